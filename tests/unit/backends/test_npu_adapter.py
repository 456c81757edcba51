"""The Ascend NPU adapter through the real facade, with a stand-in ``torch_npu`` module.

Behaviour the NPU adapter shares with CUDA (attach, windows, OOM dumps, failures) is tested for
both devices in ``test_cuda_adapter.py``; this file covers what only torch_npu does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from torchfakes import (
    NPU_VERSION,
    FakeAllocator,
    files_under,
    logged,
    oom_files,
    patch_device,
    read_sidecar,
)

import memforensics
from memforensics import MemoryForensics
from memforensics.capture.oom import REGISTRY

torch = pytest.importorskip("torch")  # collected, then deselected, where torch is absent

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("clean_env")]


@pytest.fixture
def npu(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAllocator]:
    """A stand-in torch_npu with one available NPU, CUDA unavailable; never synchronized."""
    alloc = patch_device(monkeypatch, "npu")
    yield alloc
    assert alloc.synchronized == 0, "a device synchronize was issued"


def install(out_dir: Path, **config: Any) -> MemoryForensics:
    """``memforensics.install`` for rank 0 into ``out_dir``, auto device unless overridden."""
    return memforensics.install(**{"out_dir": out_dir, "rank": 0, **config})


def test_auto_picks_npu_when_cuda_unavailable(npu: FakeAllocator, out_dir: Path) -> None:
    """On a host without CUDA, device="auto" selects torch_npu and attaches its observer."""
    mf = install(out_dir)
    assert mf.backend.name == "npu"
    assert mf.oom_attached
    assert npu.observers == [REGISTRY.dispatch]
    assert len(npu.called("attach_out_of_memory_observer")) == 1


def test_oom_snapshot_enable_warns_and_attaches_nothing(
    npu: FakeAllocator,
    out_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With torch_npu's own OOM_SNAPSHOT_ENABLE on, no second observer; windows still dump."""
    monkeypatch.setenv("OOM_SNAPSHOT_ENABLE", "1")
    mf = install(out_dir, steps=1)
    with mf.step(0):
        pass
    error = torch.OutOfMemoryError("NPU out of memory. Tried to allocate 2.00 GiB")
    with pytest.raises(torch.OutOfMemoryError) as caught, mf.step(1):
        raise error
    assert caught.value is error
    assert not mf.oom_attached
    assert npu.called("attach_out_of_memory_observer") == []
    assert npu.observers == []
    lines = logged(capsys.readouterr().err, "oom_observer_not_attached")
    assert len(lines) == 1
    assert "OOM_SNAPSHOT_ENABLE" in lines[0]
    pid = os.getpid()
    assert (out_dir / "step0" / f"rank0_pid{pid}.pickle").is_file()
    assert len(oom_files(out_dir)) == 1


def test_never_calls_torch_npu_dump_snapshot(npu: FakeAllocator, out_dir: Path) -> None:
    """Dumps pickle _snapshot() directly; torch_npu's profiler-starting _dump_snapshot is unused."""
    mf = install(out_dir, steps=1)
    with mf.step(0):
        npu.fire_oom()
    mf.close()
    assert len(oom_files(out_dir)) == 1
    assert (out_dir / "step0" / f"rank0_pid{os.getpid()}.pickle").is_file()
    assert npu.called("_dump_snapshot") == []
    assert [f for f in files_under(out_dir) if f.endswith(".csv")] == []


def test_sidecar_records_npu_and_torch_npu_version(npu: FakeAllocator, out_dir: Path) -> None:
    """Sidecars say ``device: "npu"`` and carry both torch's and torch_npu's versions."""
    install(out_dir)
    npu.fire_oom(allocation_bytes=1 << 30)
    (snapshot,) = oom_files(out_dir)
    sidecar = read_sidecar(snapshot)
    assert (sidecar["device"], sidecar["device_index"]) == ("npu", 0)
    assert sidecar["torch_version"] == f"{torch.__version__}+torch_npu{NPU_VERSION}"
    assert sidecar["oom"]["allocation_bytes"] == 1 << 30
    assert sidecar["oom"]["device_total_bytes"] == npu.total


def test_observer_goes_to_torch_npu_hook_not_cuda(
    npu: FakeAllocator, out_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The NPU adapter attaches through torch_npu._C, never torch._C's CUDA hook."""
    cuda_attached: list[object] = []
    monkeypatch.setattr(
        torch._C, "_cuda_attach_out_of_memory_observer", cuda_attached.append, raising=False
    )
    install(out_dir, device="npu")
    assert cuda_attached == []
    assert npu.observers == [REGISTRY.dispatch]


@pytest.mark.parametrize("device", ["npu", "auto"])
def test_torch_npu_not_installed(
    monkeypatch: pytest.MonkeyPatch,
    out_dir: Path,
    capsys: pytest.CaptureFixture[str],
    device: str,
) -> None:
    """Without torch_npu, device="npu" warns it is unavailable and "auto" falls back to none."""
    patch_device(monkeypatch, "cuda", available=False, hook="missing")
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # makes `import torch_npu` fail
    mf = install(out_dir, device=device)
    assert mf.backend.name == ("npu" if device == "npu" else "none")
    assert not mf.oom_attached
    assert len(logged(capsys.readouterr().err, "device_unavailable")) == 1


def test_npu_history_uses_torch_npu_memory(npu: FakeAllocator, out_dir: Path) -> None:
    """History recording and snapshots go through torch_npu.npu.memory, with clear_history."""
    mf = install(out_dir, steps=2, stacks="all", max_entries=4096, oom_history="all")
    with mf.step(0):
        pass
    with mf.step(1):
        pass
    stop = {"enabled": None}
    start = {"enabled": "all", "context": "alloc", "stacks": "all", "max_entries": 4096}
    assert npu.history_calls() == [stop, start, stop, start]
    assert len(npu.called("_snapshot")) == 1
    assert (out_dir / "steps0-1" / f"rank0_pid{os.getpid()}.pickle").is_file()
