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


def test_tracked_model_and_adam_are_labelled_from_the_process(tmp_path: Path) -> None:
    """A real model and Adam on CUDA, tracked: at the OOM dump, 100 % of the blocks holding
    their tensors carry the true kind from the process, and the walk allocates nothing."""
    from memforensics.analysis import load_dump, what_filled
    from memforensics.capture.track import Tracker

    torch.cuda.init()
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.BatchNorm1d(1024), torch.nn.Linear(1024, 512)
    ).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = torch.randn(64, 512, device="cuda")
    model(batch).square().mean().backward()
    optimizer.step()
    truth: dict[int, str] = {}
    for param in model.parameters():
        truth[param.untyped_storage().data_ptr()] = "parameter"
        truth[param.grad.untyped_storage().data_ptr()] = "gradient"
        for value in optimizer.state[param].values():
            if value.is_cuda:  # Adam's step count stays on the CPU unless capturable
                truth[value.untyped_storage().data_ptr()] = "optimizer_state"
    for buffer in model.buffers():
        truth[buffer.untyped_storage().data_ptr()] = "buffer"

    tracker = Tracker()
    tracker.add(model, optimizer)
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    walked = tracker.tensors("cuda")
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before  # no allocation
    assert walked is not None
    assert {entry["address"] for entry in walked.entries} == set(truth)

    total = torch.cuda.mem_get_info()[1]

    def train_then_fail() -> None:
        model(batch).square().mean().backward()
        optimizer.step()
        torch.empty(2 * total, dtype=torch.uint8, device="cuda")  # more than the device has

    mf = memforensics.install(
        steps=1, device="cuda", out_dir=str(tmp_path), model=model, optimizer=optimizer
    )
    try:
        with pytest.raises(torch.OutOfMemoryError), mf.step(0):
            train_then_fail()
    finally:
        mf.close()
    [oom] = sorted((tmp_path / "oom").glob("*.pickle"))
    sidecar = json.loads(oom.with_suffix(".json").read_text())
    assert sidecar["tensors"]
    filled = what_filled(load_dump(oom))
    live = {found.addr: found for found in filled.lifetimes.at_snapshot()}
    assert set(truth) <= set(live)
    for address, kind in truth.items():
        found = live[address]
        assert found.known == ((kind, found.size),), (kind, found.known)
        assert found.confidence == 1.0
    assert filled.known is not None
    assert filled.known.bytes == sum(live[address].size for address in truth)
