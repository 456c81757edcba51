"""The real ``memforensics`` console script: summary, diff, ls and report in a subprocess."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memforensics.testing import MiB, fragmented, growth_pair, write_dump, write_run_folder

pytestmark = pytest.mark.integration


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    script = shutil.which("memforensics", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "memforensics"]
    return subprocess.run(
        [*command, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def test_summary_json_contract(tmp_path: Path) -> None:
    """summary --json has the contract keys with the synthetic truth's values."""
    synthetic = fragmented()
    path = synthetic.write(tmp_path / "oom" / "rank0_pid1_step12_20261130-101112-000001.pickle")
    proc = _cli("summary", path, "--json", "--top", "3")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    truth = synthetic.truth
    assert data["reserved_bytes"] == truth.reserved_bytes
    assert data["allocated_bytes"] == truth.allocated_bytes
    assert data["active_bytes"] == truth.active_bytes
    assert data["free_in_reserved_bytes"] == truth.free_in_reserved_bytes
    assert data["largest_free_block_bytes"] == truth.largest_free_block_bytes
    assert data["segments"] == truth.segments
    assert data["blocks"] == truth.blocks
    assert data["oom"]["requested_bytes"] == MiB(32)
    assert data["oom"]["device_free_bytes"] == 0
    assert data["verdict"]["name"] == "fragmentation"
    assert data["top_sites"][0].keys() == {
        "site",
        "caller",
        "bytes",
        "requested_bytes",
        "blocks",
        "kind",
        "kinds",
    }
    site = data["top_sites"][0]
    assert sum(part["bytes"] for part in site["kinds"]) == site["bytes"]
    assert site["kinds"][0]["kind"] == site["kind"]


def test_summary_human_table(tmp_path: Path) -> None:
    """The human summary names the cause, the verdict beneath it and sizes in MiB; --verbose
    adds the verdict's expandable_segments advice, which the replay could not prove here."""
    path = fragmented().write(tmp_path / "x.pickle")
    proc = _cli("summary", path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("  cause        memory outside PyTorch: 79.50 GiB")
    assert any(line.startswith("  verdict      FRAGMENTATION") for line in lines)
    assert "256.00 MiB" in proc.stdout
    assert "expandable_segments:True" not in proc.stdout
    verbose = _cli("summary", path, "--verbose")
    assert "expandable_segments:True" in verbose.stdout


def test_diff_json(tmp_path: Path) -> None:
    """diff --json reports growth per site and total_delta_bytes."""
    before, after = growth_pair()
    a = before.write(tmp_path / "steps4-7" / "rank0_pid1.pickle")
    b = after.write(tmp_path / "steps100-103" / "rank0_pid1.pickle")
    proc = _cli("diff", a, b, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["total_delta_bytes"] == MiB(1536)
    assert data["growth"][0]["delta_bytes"] == MiB(1536)
    assert data["leak_suspects"][0]["blocks"] == 92


def test_diff_json_peaks_of_dumps_without_trace_have_the_summarys_kinds(tmp_path: Path) -> None:
    """Two snapshots without an allocator trace: diff's peaks (each the snapshot itself) are
    split by kind, as ``summary --json``'s ``peak`` of each dump splits them, the KV cache's
    64 MiB and 1,600 MiB among them."""
    paths = []
    for name, synthetic in zip(("before", "after"), growth_pair(), strict=True):
        snapshot = {**synthetic.snapshot, "device_traces": [[]]}
        paths.append(write_dump(tmp_path / f"{name}.pickle", snapshot))
    proc = _cli("diff", *paths, "--json", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    peaks = json.loads(proc.stdout)["peaks"]
    assert (peaks["before_traced"], peaks["after_traced"]) == (False, False)
    kinds = {k["kind"]: (k["before_bytes"], k["after_bytes"]) for k in peaks["kinds"]}
    assert kinds["kv_cache"] == (MiB(64), MiB(1600))
    for side, path in zip(("before", "after"), paths, strict=True):
        summary = _cli("summary", path, "--json", "--no-cache")
        assert summary.returncode == 0, summary.stderr
        peak = json.loads(summary.stdout)["peak"]
        told = {k["kind"]: k["bytes"] for k in peak["kinds"]}
        index = 0 if side == "before" else 1
        assert {kind: both[index] for kind, both in kinds.items() if both[index]} == told
        assert sum(told.values()) == peaks[f"{side}_live_bytes"] == peak["live_bytes"]


def test_ls_json_first_oom(tmp_path: Path) -> None:
    """ls --json lists every dump and names the rank that failed first."""
    truth = write_run_folder(tmp_path, world_size=6)
    proc = _cli("ls", tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert len(data["dumps"]) == truth.dumps
    assert data["first_oom"]["rank"] == truth.first_oom_rank
    human = _cli("ls", tmp_path)
    assert f"first OOM: rank {truth.first_oom_rank} step 12" in human.stdout


def test_report_writes_offline_html(tmp_path: Path) -> None:
    """report -o writes one HTML file with no network reference, for a file and a run folder."""
    write_run_folder(tmp_path / "run", world_size=2)
    (tmp_path / "run" / "manual" / "broken.pickle").unlink()
    out = tmp_path / "report.html"
    proc = _cli("report", fragmented().write(tmp_path / "f.pickle"), tmp_path / "run", "-o", out)
    assert proc.returncode == 0, proc.stderr
    html = out.read_text()
    document = json.loads(
        re.search(r'<script type="application/json" id="mf-data">(.*?)</script>', html, re.S)[1]
    )
    assert len(document["dumps"]) == 4
    assert not re.search(r"https?:|<link|src=|@import|<iframe", html)


def test_report_covers_every_readable_dump_of_a_folder(tmp_path: Path) -> None:
    """A bad file never aborts a folder report: it is listed on stderr and in the page, the
    rest is reported, and the exit status is 1; with no readable file at all it is 2."""
    write_run_folder(tmp_path / "run", world_size=2)
    broken = tmp_path / "run" / "manual" / "broken.pickle"
    assert broken.exists()
    out = tmp_path / "report.html"
    proc = _cli("report", tmp_path / "run", "-o", out)
    assert proc.returncode == 1
    assert f"skipped: {broken}" in proc.stderr
    html = out.read_text()
    document = json.loads(
        re.search(r'<script type="application/json" id="mf-data">(.*?)</script>', html, re.S)[1]
    )
    assert len(document["dumps"]) == 3
    [unreadable] = [s for s in document["run"] if s["id"] == "unreadable"]
    assert str(broken) in unreadable["data"]["rows"][0][0]
    none = _cli("report", broken, broken, "-o", tmp_path / "none.html")
    assert none.returncode == 2
    assert len(none.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "none.html").exists()


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"", "truncated or corrupt"),
        (b"\x80\x04\x95garbage", "truncated or corrupt|not a readable snapshot"),
        (pickle.dumps({"segments": [os.system]}, protocol=4), "refused"),
        (pickle.dumps([1, 2, 3], protocol=4), "not a memory snapshot"),
    ],
)
def test_bad_file_is_one_line_and_status_2(tmp_path: Path, content: bytes, why: str) -> None:
    """A corrupt, hostile or wrongly shaped file: one stderr line, exit 2, no traceback."""
    path = tmp_path / "bad.pickle"
    path.write_bytes(content)
    for command in (
        ["summary", path],
        ["diff", path, path],
        ["report", path, "-o", tmp_path / "r.html"],
    ):
        proc = _cli(*command)
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert re.search(why, lines[0])
        assert str(path) in lines[0]
        assert "Traceback" not in proc.stderr


def test_missing_file_and_usage_errors(tmp_path: Path) -> None:
    """A missing file and a missing argument both exit 2 without a traceback."""
    proc = _cli("summary", tmp_path / "nope.pickle")
    assert proc.returncode == 2
    assert "no such file" in proc.stderr
    usage = _cli("diff", tmp_path / "only-one.pickle")
    assert usage.returncode == 2
    assert "usage:" in usage.stderr
    assert _cli("ls", tmp_path / "missing").returncode == 2
