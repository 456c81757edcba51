"""README's first command: `memforensics demo` runs a leaky loop into OOM and shows the evidence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memforensics.examples import demo_train

pytestmark = pytest.mark.integration


def _demo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memforensics", "demo", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "300"},  # a tmp path on one line; 80 columns: test_cli_screen
    )


def test_demo_on_sim_writes_windows_and_an_explainable_oom(tmp_path: Path) -> None:
    """The sim demo exits 0, keeps step windows, and writes an OOM dump whose cause is readable;
    it says so in its own words, with no raw log line beside them."""
    out = tmp_path / "demo"
    proc = _demo("--device", "sim", "--out-dir", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "out_of_memory" not in proc.stdout + proc.stderr
    assert "timestamp=" not in proc.stdout + proc.stderr
    [oom] = sorted((out / "oom").glob("*.pickle"))
    assert f"OOM snapshot: {oom}" in proc.stdout
    sidecar = json.loads(oom.with_suffix(".json").read_text())
    oom_facts = sidecar["oom"]
    # The leak asks for 5 to 6.5 MiB; under 10 MiB the allocator needs a whole 20 MiB segment,
    # and the device has less than that free: the request fits, the allocation does not.
    assert oom_facts["requested_bytes"] < oom_facts["device_free_bytes"]
    assert oom_facts["allocation_bytes"] == 20 << 20 > oom_facts["device_free_bytes"]
    assert "(the allocator asked the device for 20.00 MiB), device free" in proc.stdout
    windows = sorted(p.name for p in out.iterdir() if p.name.startswith("steps"))
    assert windows[0] == "steps0-1"
    assert len(windows) == 3  # the first window and the newest two (keep_last=2)
    assert not list(out.rglob("*.py"))  # nothing is copied into the folder, let alone run
    summary = subprocess.run(
        [sys.executable, "-m", "memforensics", "summary", "--json", str(oom)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    facts = json.loads(summary.stdout)
    assert facts["verdict"]["name"] in {"fragmentation", "exhausted"}
    assert facts["top_sites"][0]["site"].endswith("keep_metrics")
    packaged = Path(demo_train.__file__).resolve()
    assert str(packaged) in facts["top_sites"][0]["site"]  # the packaged module ran, not a copy
    assert f"ran {packaged}" in proc.stdout


def test_demo_headline_names_the_leak_and_points_at_leaks(tmp_path: Path) -> None:
    """The demo's OOM summary names keep_metrics' growth as the cause, ahead of the allocator's
    category; fragmentation comes only after it, with the replay's proof; next: names leaks;
    and the summary of every dump it wrote fits 25 lines, its causes 100 columns."""
    out = tmp_path / "demo"
    proc = _demo("--device", "sim", "--out-dir", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"next: memforensics leaks {out}" in proc.stdout
    [oom] = sorted((out / "oom").glob("*.pickle"))
    facts = json.loads(_summary(str(oom), "--json"))
    causes = [cause["name"] for cause in facts["diagnosis"]["causes"]]
    assert causes[0] == "growth"
    top = facts["diagnosis"]["causes"][0]
    assert top["sites"][0].endswith("keep_metrics")
    assert top["sufficient"] is True
    assert top["first_step"] == 0
    if "fragmentation" in causes:
        assert causes.index("fragmentation") > 0
        evidence = " ".join(cause["evidence"] for cause in facts["diagnosis"]["causes"])
        assert "replayed with expandable_segments the request is served" in evidence
    lines = _summary(str(oom)).splitlines()
    assert lines[1].startswith("  cause        growth: demo_train.py:")
    assert "keep_metrics holds" in lines[1]
    verdict = next(index for index, line in enumerate(lines) if line.startswith("  verdict"))
    assert verdict > 1  # the allocator's category stands beneath the cause
    assert "removing it frees" in " ".join(" ".join(lines).split())
    dumps = sorted(out.rglob("*.pickle"))
    assert len(dumps) >= 4
    for dump in dumps:
        text = _summary(str(dump))
        assert len(text.splitlines()) <= 25, text
        words = [line for line in text.splitlines() if line.startswith(("  cause", "  also"))]
        assert all(len(line) <= 100 for line in words), text


def test_demo_tracks_its_model_so_its_kinds_are_known(tmp_path: Path) -> None:
    """The demo tracks its model and optimizer: the OOM sidecar lists their tensors, and summary
    labels their bytes from the process (known, at confidence 1.0), not by inference."""
    out = tmp_path / "demo"
    proc = _demo("--device", "sim", "--out-dir", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [oom] = sorted((out / "oom").glob("*.pickle"))
    tensors = json.loads(oom.with_suffix(".json").read_text())["tensors"]
    assert tensors, "the OOM sidecar lists no tracked tensors"
    assert {"parameter", "gradient", "optimizer_state"} <= {entry["kind"] for entry in tensors}
    kinds = {row["kind"]: row for row in json.loads(_summary(str(oom), "--json"))["kinds"]}
    for kind in ("parameter", "gradient", "optimizer_state"):
        assert kinds[kind]["known_bytes"] == kinds[kind]["bytes"] > 0
        assert kinds[kind]["confidence"] == 1.0
    assert kinds["unknown"]["known_bytes"] == 0  # the leak is still not claimed as known


def _summary(*args: str) -> str:
    """``memforensics summary --no-cache ARGS`` at 100 columns: its stdout."""
    return subprocess.run(
        [sys.executable, "-m", "memforensics", "summary", "--no-cache", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "COLUMNS": "100"},
    ).stdout


def test_demo_auto_falls_back_to_sim_and_says_so(tmp_path: Path) -> None:
    """Without an accelerator, `--device auto` runs on sim and says it does."""
    from memforensics.backends._select import create_backend

    if create_backend("auto").name != "none":
        pytest.skip("this machine has an accelerator: auto would use it")
    proc = _demo("--out-dir", str(tmp_path / "auto"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "running on the simulated 'sim' device" in proc.stdout


@pytest.mark.torch
def test_demo_on_missing_cuda_is_a_one_line_error(tmp_path: Path) -> None:
    """Asking for CUDA where there is none exits 2 with one line on stderr."""
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the demo would really run")
    proc = _demo("--device", "cuda", "--out-dir", str(tmp_path / "cuda"), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "memforensics demo: --device cuda: no such device is available here"
    ]
