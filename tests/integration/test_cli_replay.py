"""``memforensics replay`` and the proven verdicts, on what the demo and the quickstart produce."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shared_data import REAL_SNAPSHOTS, needs_shared_data

pytestmark = pytest.mark.integration

LEAK = """\
from memforensics.testing import get_device

device, history = get_device(), []
for step in range(1000):
    history.append(device.empty(48 << 20))
    grads = device.empty(32 << 20)
    del grads
"""


def _cli(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memforensics", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **(env or {})},
    )


def _demo(out: Path, conf: str = "") -> tuple[Path, int]:
    env = {"PYTORCH_CUDA_ALLOC_CONF": conf}
    proc = _cli("demo", "--device", "sim", "--out-dir", out, env=env)
    assert proc.returncode == 0, proc.stderr
    steps = int(re.search(r"trained (\d+) steps", proc.stdout).group(1))  # type: ignore[union-attr]
    return sorted((out / "oom").glob("*.pickle"))[0], steps


def test_demo_oom_is_avoidable_by_expandable_segments(tmp_path: Path) -> None:
    """replay: the demo's OOM is avoidable by expandable segments; the sim under them trains on."""
    oom, steps = _demo(tmp_path / "default")
    proc = _cli("replay", oom, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["trusted"], data["refusals"]
    assert data["oom_reproduced"] is True
    assert data["placements_same"] == data["placements_checked"] > 0
    assert "expandable_segments=True" in data["avoided_by"]
    assert data["lower_bound"]["proven_exhausted"] is False
    _oom, steps_expandable = _demo(tmp_path / "expandable", "expandable_segments:True")
    assert steps_expandable > steps  # the run gets past the step that failed
    text = _cli("replay", oom)
    said = " ".join(text.stdout.split("avoided by: ")[1].split("\n\n")[0].split())
    assert said.split("; ") == data["avoided_by"]  # one row each, though a row holds a ","
    words = " ".join(text.stdout.split())
    assert "reaches the recorded peak reserved to the byte" in words  # trusted on its peak
    assert "with 1 segment event against 0 recorded" in words  # and says they differ


def test_quickstart_leak_is_proven_exhausted(tmp_path: Path) -> None:
    """The quickstart's leak: summary and replay prove no allocator setting could have fit."""
    (tmp_path / "leak.py").write_text(LEAK)
    out = tmp_path / "memforensics"
    run = subprocess.run(
        [sys.executable, "-m", "memforensics", "run", "--device", "sim", "--out-dir", str(out),
         "leak.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode != 0  # the leak ends in an OOM
    [oom] = sorted((out / "oom").glob("*.pickle"))
    summary = json.loads(_cli("summary", oom, "--json").stdout)
    assert (summary["verdict"]["name"], summary["verdict"]["reason"]) == ("exhausted", "proven")
    bound = summary["lower_bound"]
    assert bound["needed_bytes"] > bound["limit_bytes"] == 1 << 30
    assert summary["oom"]["external_bytes"] == 0
    replay = json.loads(_cli("replay", oom, "--json").stdout)
    assert replay["lower_bound"]["proven_exhausted"] is True


@needs_shared_data
def test_summary_without_history_or_sidecar_is_unknown_until_told_the_request() -> None:
    """No history, no sidecar: unknown; with --requested the user's failed request is judged."""
    path = REAL_SNAPSHOTS / "cuda-llm-at-oom-no-history.pickle"
    data = json.loads(_cli("summary", path, "--json").stdout)
    verdict = (data["verdict"]["name"], data["verdict"]["reason"])
    assert verdict == ("unknown", "no history and no sidecar")
    told = json.loads(_cli("summary", path, "--json", "--requested", "2GiB").stdout)
    verdict = (told["verdict"]["name"], told["verdict"]["reason"])
    assert verdict == ("unknown", "device free unknown")  # no exhaustion without device free
    assert told["oom"]["requested_bytes"] == 2 << 30
    bad = _cli("summary", path, "--requested", "lots")
    assert bad.returncode == 2


@needs_shared_data
@pytest.mark.parametrize("name", ["cuda-cnn-stacks-all.pickle", "cuda-transformer-forward.pickle"])
def test_real_snapshots_replay_exactly(name: str) -> None:
    """The model reproduces every segment event and block address of real CUDA runs."""
    data = json.loads(_cli("replay", REAL_SNAPSHOTS / name, "--json").stdout)
    assert data["fidelity"] == 1.0
    assert data["segment_events"] == data["segment_events_matched"] > 0
    assert data["placements_same"] == data["placements_checked"] > 0


def test_replay_set_and_errors(tmp_path: Path) -> None:
    """--set runs one alternative row; a setting PyTorch would refuse is one line, exit 2."""
    oom, _steps = _demo(tmp_path / "demo")
    data = json.loads(_cli("replay", oom, "--json", "--set", "max_split_size_mb=64").stdout)
    assert [row["name"] for row in data["what_if"]] == [
        "as recorded",
        "recorded settings, live blocks placed afresh",
        "max_split_size_mb=64",
    ]
    bad = _cli("replay", oom, "--set", "max_split_size_mb=8")
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1
    assert "too small" in bad.stderr


def test_replay_jobs_prints_the_same_table_as_one_process(tmp_path: Path) -> None:
    """replay --jobs 3 (rows in forked workers) prints what --jobs 1 prints, text and JSON;
    --jobs 0 is a usage error."""
    oom, _steps = _demo(tmp_path / "demo")
    for extra in ((), ("--json",)):
        one = _cli("replay", oom, "--no-cache", "--jobs", "1", *extra)
        three = _cli("replay", oom, "--no-cache", "--jobs", "3", *extra)
        assert one.returncode == three.returncode == 0, one.stderr + three.stderr
        assert three.stdout == one.stdout
    assert len(json.loads(one.stdout)["what_if"]) > 1  # the last pair compared was --json
    refused = _cli("replay", oom, "--no-cache", "--jobs", "0")
    assert refused.returncode == 2
    assert "--jobs must be 1 or more" in refused.stderr


def test_report_of_one_dump_replays_with_its_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """report FILE --jobs 3 gives the OOM's replay 3 processes, as replay --jobs 3 does, and
    writes the page --jobs 1 writes (bar its time)."""
    import importlib

    from memforensics.cli._main import main

    oom, _steps = _demo(tmp_path / "demo")
    shared = importlib.import_module("memforensics.analysis.report.sections")
    real = shared.replay_dump
    asked: list[object] = []

    def spy(dump: object, **kwargs: object) -> object:
        asked.append(kwargs.get("jobs"))
        return real(dump, **kwargs)

    monkeypatch.setattr(shared, "replay_dump", spy)
    pages = []
    for jobs in ("1", "3"):
        out = tmp_path / f"report{jobs}.html"
        assert main(["report", str(oom), "-o", str(out), "--jobs", jobs, "--no-cache", "-q"]) == 0
        pages.append(_document(out.read_text()))
    assert asked == [1, 3]
    assert pages[0] == pages[1]
    assert "What if: other allocator settings" in pages[1]


def _document(html: str) -> str:
    """The page without its generation time."""
    start = html.index('"generated"')
    return html[:start] + html[html.index('"version"', start) :]
