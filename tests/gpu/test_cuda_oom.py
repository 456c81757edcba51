"""A real CUDA OOM, observed by the real allocator hook (skipped where no CUDA device exists)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import memforensics  # noqa: E402 - after the importorskip above, by design

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.torch,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_real_oom_is_dumped_and_propagates_unchanged(tmp_path: Path) -> None:
    """Under a memory cap, a real OOM writes oom/ with the allocator's figures."""
    torch.cuda.init()
    total = torch.cuda.mem_get_info()[1]
    torch.cuda.set_per_process_memory_fraction(min((1 << 30) / total, 1.0))
    mf = memforensics.install(steps=1, device="cuda", out_dir=str(tmp_path))
    assert mf.oom_attached
    kept: list[object] = []

    def fill_device() -> None:
        for _ in range(64):
            kept.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))

    try:
        with pytest.raises(torch.OutOfMemoryError), mf.step(0):
            fill_device()
    finally:
        kept.clear()
        mf.close()
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    ooms = sorted((tmp_path / "oom").glob("*.pickle"))
    assert len(ooms) == 1
    sidecar = json.loads(ooms[0].with_suffix(".json").read_text())
    oom = sidecar["oom"]
    assert oom["source"] == "observer"
    # In a window history is "all", so the trace's oom entry has the request; a 256 MiB request
    # is already a multiple of the block size and of the 2 MiB allocation rounding.
    assert oom["requested_bytes"] == 256 << 20
    assert oom["allocation_bytes"] == 256 << 20
    assert (1 << 30) - (1 << 20) <= oom["device_total_bytes"] <= 1 << 30  # the fraction's limit
    assert sidecar["device_index"] == torch.cuda.current_device()
    assert sidecar["schema"] == 2
    snapshot = pickle.loads(ooms[0].read_bytes())
    assert snapshot["segments"]
    assert (tmp_path / "step0").is_dir()
