"""The journal through the CUDA and NPU adapters, on the real CPU torch with the surface faked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torchfakes import GIB, patch_device

import memforensics

pytest.importorskip("torch")

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("clean_env")]


@pytest.mark.parametrize("device", ["cuda", "npu"])
def test_journal_reads_stats_and_free_memory_only(
    device: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line costs memory_stats() and mem_get_info(): no synchronize, no peak reset."""
    alloc = patch_device(monkeypatch, device, free=3 * GIB, total=16 * GIB)
    alloc.stats_value = {
        "allocated_bytes.all.current": 5 * GIB,
        "reserved_bytes.all.current": 6 * GIB,
        "active_bytes.all.current": 5 * GIB,
        "allocated_bytes.all.peak": 7 * GIB,
        "reserved_bytes.all.peak": 8 * GIB,
        "num_alloc_retries": 3,
        "num_ooms": 1,
    }
    mf = memforensics.install(device=device, out_dir=str(tmp_path), journal_every=2, near_oom=False)
    before = len(alloc.calls)
    for step in range(4):
        with mf.step(step):
            pass
    during = [name for name, _, _ in alloc.calls[before:]]
    mf.close()
    assert sorted(set(during) - {"_set_memory_metadata"}) == ["mem_get_info", "memory_stats"]
    assert during.count("memory_stats") == 2  # steps 0 and 2 only
    assert alloc.synchronized == 0
    (path,) = (tmp_path / "journal").iterdir()
    line = json.loads(path.read_text().splitlines()[0])
    assert line == {
        **line,
        "allocated_bytes": 5 * GIB,
        "reserved_bytes": 6 * GIB,
        "active_bytes": 5 * GIB,
        "peak_allocated_bytes": 7 * GIB,
        "peak_reserved_bytes": 8 * GIB,
        "alloc_retries": 3,
        "ooms": 1,
        "device_free_bytes": 3 * GIB,
        "device_total_bytes": 16 * GIB,
        "external_bytes": 16 * GIB - 3 * GIB - 6 * GIB,
    }


def test_a_failing_stats_call_leaves_nulls_not_a_lost_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """memory_stats() raising: the line is still written, its allocator figures null."""
    alloc = patch_device(monkeypatch, "cuda", failing={"memory_stats"})
    mf = memforensics.install(device="cuda", out_dir=str(tmp_path), journal_every=1)
    with mf.step(0):
        pass
    mf.close()
    (path,) = (tmp_path / "journal").iterdir()
    line = json.loads(path.read_text().splitlines()[0])
    assert line["reserved_bytes"] is None
    assert line["external_bytes"] is None
    assert line["device_total_bytes"] == alloc.total
