"""The real CLI on every snapshot shape and on dumps that cover several devices."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memforensics.testing import (
    as_pytorch_1_13,
    as_pytorch_2_0,
    as_segment_list,
    as_torch_npu,
    as_torch_npu_early,
    fragmented,
    several_devices,
    write_dump,
    wrong_sidecar_device,
)

pytestmark = pytest.mark.integration

CONVERTERS = {
    "torch113.pickle": as_pytorch_1_13,
    "torch20.pkl": as_pytorch_2_0,
    "memory_snapshot.pkl": as_segment_list,
    "npu.pickle.gz": as_torch_npu,
    "npu_early.pkl.gz": as_torch_npu_early,
}


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    script = shutil.which("memforensics", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "memforensics"]
    return subprocess.run(
        [*command, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def _write_shapes(folder: Path) -> dict[str, Path]:
    snapshot = fragmented().snapshot
    return {
        name: write_dump(folder / name, convert(snapshot), gz=name.endswith(".gz"))
        for name, convert in CONVERTERS.items()
    }


def test_every_command_accepts_every_shape(tmp_path: Path) -> None:
    """summary, diff, ls and report exit 0 on each shape; summary names what it cannot tell."""
    paths = _write_shapes(tmp_path / "shapes")
    truth = fragmented().truth
    for name, path in paths.items():
        proc = _cli("summary", path, "--json")
        assert proc.returncode == 0, (name, proc.stderr)
        data = json.loads(proc.stdout)
        assert data["allocated_bytes"] == truth.allocated_bytes, name
        assert data["snapshot_shape"]["producer"], name
        diff = _cli("diff", paths["torch113.pickle"], path, "--json")
        assert diff.returncode == 0, (name, diff.stderr)
        assert json.loads(diff.stdout)["total_delta_bytes"] == 0, name
    listing = json.loads(_cli("ls", tmp_path / "shapes", "--json").stdout)
    assert sorted(Path(entry["path"]).name for entry in listing["dumps"]) == sorted(CONVERTERS)
    report = _cli("report", tmp_path / "shapes", "-o", tmp_path / "r.html")
    assert report.returncode == 0, report.stderr
    assert "5 dump(s)" in " ".join(report.stdout.split())  # the line wraps in 80 columns
    text = _cli("summary", paths["memory_snapshot.pkl"], "--verbose").stdout
    assert "cannot tell  a segment list" in text


def test_summary_names_every_device_and_reads_the_oom_one(tmp_path: Path) -> None:
    """A 3-GPU OOM dump: the text lists all devices, explains the OOM's, and --device 2 works."""
    multi = several_devices(oom_device=1, sidecar_device=0)
    path = write_dump(tmp_path / "oom" / "rank0_pid1.pickle", multi.snapshot, sidecar=multi.sidecar)
    proc = _cli("summary", path)
    assert proc.returncode == 0, proc.stderr
    assert "device       1 of 3, the OOM's device" in proc.stdout
    assert "2: 1.50 GiB reserved" in proc.stdout
    assert "sidecar says device 0" in proc.stderr
    data = json.loads(_cli("summary", path, "--json", "--device", "2").stdout)
    assert data["device_index"] == 2
    assert data["allocated_bytes"] == multi.truths[2].allocated_bytes
    assert [item["device_index"] for item in data["devices"]] == [0, 1, 2]
    missing = _cli("summary", path, "--device", "9")
    assert missing.returncode == 2
    assert "no device 9" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_summary_without_oom_explains_each_device(tmp_path: Path) -> None:
    """No OOM: one summary per device with memory, each in full with --verbose, the others one
    line each on the default screen (JSON: the rest under other_devices)."""
    multi = several_devices(oom_device=None, sidecar_device=None)
    path = write_dump(tmp_path / "dp.pkl", multi.snapshot)
    text = _cli("summary", path, "--verbose").stdout
    assert text.count("verdict      NO-OOM") == 3
    screen = _cli("summary", path).stdout
    assert screen.count("explains it)") == 2
    data = json.loads(_cli("summary", path, "--json").stdout)
    devices = [data["device_index"]] + [o["device_index"] for o in data["other_devices"]]
    assert devices == [0, 1, 2]
    assert [o["allocated_bytes"] for o in data["other_devices"]] == [
        multi.truths[1].allocated_bytes,
        multi.truths[2].allocated_bytes,
    ]


def test_diff_device_flag_and_pairs(tmp_path: Path) -> None:
    """diff of two 3-GPU dumps compares device to device; --device N compares only N."""
    multi = several_devices(oom_device=None, sidecar_device=None)
    left = write_dump(tmp_path / "a.pickle", multi.snapshot)
    right = write_dump(tmp_path / "b.pickle", multi.snapshot)
    data = json.loads(_cli("diff", left, right, "--json").stdout)
    pairs = [(data["before_device_index"], data["after_device_index"])]
    pairs += [(o["before_device_index"], o["after_device_index"]) for o in data["other_devices"]]
    assert sorted(pairs) == [(0, 0), (1, 1), (2, 2)]
    one = json.loads(_cli("diff", left, right, "--json", "--device", "2").stdout)
    assert (one["before_device_index"], one["other_devices"]) == (2, [])
    assert "device 1 → device 1" in _cli("diff", left, right).stdout


def test_wrong_sidecar_index_cli_reads_the_history(tmp_path: Path) -> None:
    """Issue 9 through the CLI: 43 history events, not 0, and the disagreement is a warning."""
    case = wrong_sidecar_device()
    path = write_dump(tmp_path / "oom" / "rank3_pid9.pickle", case.snapshot, sidecar=case.sidecar)
    proc = _cli("summary", path, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["device_index"], data["trace_entries"]) == (3, 43)
    assert "sidecar says device 0" in proc.stderr
