"""Fakes of the exact torch / torch_npu surface DESIGN.md lets the device adapters touch.

``FakeAllocator`` stands behind the patched names: it records every call, returns snapshots in
PyTorch's own format, and keeps the observers attached to its OOM hook so a test can fire an
out-of-memory event the way the framework's caching allocator would. ``patch_cuda`` installs it
on the real CPU torch; ``patch_npu`` installs a stand-in ``torch_npu`` module.
"""

from __future__ import annotations

import copy
import importlib.machinery
import json
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

GIB = 1 << 30
NPU_VERSION = "2.13.0.post1"

SIDECAR_KEYS = {
    "schema", "kind", "rank", "world_size", "hostname", "pid", "device", "device_index",
    "steps", "step", "created_at", "snapshot_file", "snapshot_bytes", "torch_version",
    "memforensics_version", "partial",
}  # fmt: skip
"""Every key DESIGN.md lists for a sidecar."""
SIDECAR_EXTRA_KEYS = {"truncated", "trace_entries"}
"""Keys the implementation adds beyond DESIGN.md's list (``truncated`` comes from issue 2)."""
OOM_KEYS = {"requested_bytes", "device_total_bytes", "device_free_bytes", "stack", "allocator"}
OOM_EXTRA_KEYS = {"source", "error"}


def make_snapshot(trace_entries: int = 2, device: int = 0) -> dict[str, Any]:
    """A small snapshot dict shaped exactly like ``torch.cuda.memory._snapshot()``'s."""
    frames = [{"filename": "train.py", "line": 42, "name": "forward"}]
    block = {
        "address": 139_637_976_727_552,
        "size": 2 * (1 << 20),
        "requested_size": 2_000_000,
        "state": "active_allocated",
        "frames": frames,
    }
    segment = {
        "device": device,
        "address": 139_637_976_727_552,
        "total_size": 20 * (1 << 20),
        "allocated_size": 2 * (1 << 20),
        "active_size": 2 * (1 << 20),
        "requested_size": 2_000_000,
        "stream": 0,
        "segment_type": "large",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": frames,
        "blocks": [block, {"address": 139_637_978_824_704, "size": 18 * (1 << 20),
                           "requested_size": 0, "state": "inactive", "frames": []}],
    }  # fmt: skip
    trace = [
        {"action": "alloc", "addr": 139_637_976_727_552 + 512 * i, "size": 512, "stream": 0,
         "time_us": 1_700_000_000_000_000 + i, "frames": frames}
        for i in range(trace_entries)
    ]  # fmt: skip
    return {
        "segments": [segment],
        "device_traces": [trace],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1},
    }


@dataclass
class FakeAllocator:
    """The allocator behind the patched framework names: records calls, fires OOMs."""

    device: str
    available: bool = True
    total: int = 16 * GIB
    free: int = 1 * GIB
    hook: str = "ok"
    """``"ok"``, ``"missing"`` (no attach function) or ``"raises"`` (cudaMallocAsync)."""
    history_signature: str = "new"
    """``"new"`` (has ``clear_history``) or ``"old"`` (older torch / torch_npu, without it)."""
    metadata_supported: bool = True
    snapshot_value: dict[str, Any] = field(default_factory=make_snapshot)
    stats_value: dict[str, Any] = field(
        default_factory=lambda: {"allocated_bytes.all.current": 2 * (1 << 20),
                                 "reserved_bytes.all.current": 20 * (1 << 20), "num_ooms": 0}
    )  # fmt: skip
    failing: set[str] = field(default_factory=set)
    """Names of framework functions that raise when called."""
    on_snapshot: Callable[[], None] | None = None
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)
    observers: list[Callable[[int, int, int, int], None]] = field(default_factory=list)
    synchronized: int = 0

    # -- bookkeeping ---------------------------------------------------------------------------
    def _call(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append((name, args, kwargs))
        if name in self.failing:
            raise RuntimeError(f"{self.device}: {name} failed (injected)")

    def called(self, name: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        """The (args, kwargs) of every call of ``name``, oldest first."""
        return [(args, kwargs) for n, args, kwargs in self.calls if n == name]

    def history_calls(self) -> list[dict[str, Any]]:
        """The keyword arguments of every ``_record_memory_history`` call."""
        return [kwargs for _, kwargs in self.called("_record_memory_history")]

    def fire_oom(self, requested: int = 2 * GIB, device: int = 0) -> None:
        """What the caching allocator does on a failed malloc: call every observer."""
        for observer in list(self.observers):
            observer(device, requested, self.total, self.free)

    # -- the framework surface -----------------------------------------------------------------
    def is_available(self) -> bool:
        self._call("is_available")
        return self.available

    def init(self) -> None:
        self._call("init")

    def current_device(self) -> int:
        self._call("current_device")
        return 0

    def synchronize(self, device: Any = None) -> None:
        """Must never be called: the dispatcher would swallow a raise, so count instead."""
        self.synchronized += 1
        self._call("synchronize", device)

    def memory_stats(self, device: Any = None) -> dict[str, Any]:
        self._call("memory_stats", device)
        return dict(self.stats_value)

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        self._call("mem_get_info", device)
        return self.free, self.total

    def snapshot(self) -> dict[str, Any]:
        self._call("_snapshot")
        if self.on_snapshot is not None:
            self.on_snapshot()
        return copy.deepcopy(self.snapshot_value)

    def set_memory_metadata(self, text: str) -> None:
        self._call("_set_memory_metadata", text)

    def dump_snapshot(self, filename: str = "dump_snapshot.pickle") -> None:
        self._call("_dump_snapshot", filename)

    def attach(self, observer: Callable[[int, int, int, int], None]) -> None:
        self._call("attach_out_of_memory_observer", observer)
        if self.hook == "raises":
            raise RuntimeError(
                "cudaMallocAsync does not yet support attachOutOfMemoryObserver. "
                "If you need it, please file an issue describing your use case."
            )
        self.observers.append(observer)

    def record_function(self) -> Callable[..., None]:
        """``_record_memory_history`` with the signature this fake's torch version has."""
        fake = self
        if self.history_signature == "new":

            def _record_memory_history(
                enabled: str | None = "all",
                context: str | None = "all",
                stacks: str = "all",
                max_entries: int = sys.maxsize,
                device: Any = None,
                clear_history: bool = False,
            ) -> None:
                kwargs = {"enabled": enabled, "stacks": stacks, "max_entries": max_entries}
                if clear_history:
                    kwargs["clear_history"] = clear_history
                fake._call("_record_memory_history", **kwargs)

            return _record_memory_history

        def _record_memory_history_old(
            enabled: str | None = "all",
            context: str | None = "all",
            stacks: str = "all",
            max_entries: int = sys.maxsize,
            device: Any = None,
        ) -> None:
            fake._call(
                "_record_memory_history", enabled=enabled, stacks=stacks, max_entries=max_entries
            )

        return _record_memory_history_old


def patch_cuda(monkeypatch: pytest.MonkeyPatch, alloc: FakeAllocator) -> None:
    """Point the torch.cuda names DESIGN.md lists at ``alloc``, on the real CPU torch."""
    import torch
    import torch.cuda.memory

    monkeypatch.setattr(torch.cuda, "is_available", alloc.is_available)
    monkeypatch.setattr(torch.cuda, "init", alloc.init)
    monkeypatch.setattr(torch.cuda, "current_device", alloc.current_device)
    monkeypatch.setattr(torch.cuda, "synchronize", alloc.synchronize)
    monkeypatch.setattr(torch.cuda, "memory_stats", alloc.memory_stats)
    monkeypatch.setattr(torch.cuda, "mem_get_info", alloc.mem_get_info)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", alloc.record_function())
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", alloc.snapshot)
    if alloc.metadata_supported:
        monkeypatch.setattr(
            torch.cuda.memory, "_set_memory_metadata", alloc.set_memory_metadata, raising=False
        )
    else:
        monkeypatch.delattr(torch.cuda.memory, "_set_memory_metadata", raising=False)
    hook = "_cuda_attach_out_of_memory_observer"
    if alloc.hook == "missing":
        monkeypatch.delattr(torch._C, hook, raising=False)
    else:
        monkeypatch.setattr(torch._C, hook, alloc.attach, raising=False)


def _module(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    # find_spec() (how device="auto" asks whether torch_npu is installed) needs a spec.
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    for key, value in attrs.items():
        setattr(module, key, value)
    return module


def patch_npu(monkeypatch: pytest.MonkeyPatch, alloc: FakeAllocator) -> types.ModuleType:
    """Insert a stand-in ``torch_npu`` (``npu``, ``npu.memory``, ``_C``) backed by ``alloc``."""
    memory_attrs: dict[str, Any] = {
        "_record_memory_history": alloc.record_function(),
        "_snapshot": alloc.snapshot,
        "_dump_snapshot": alloc.dump_snapshot,
    }
    if alloc.metadata_supported:
        memory_attrs["_set_memory_metadata"] = alloc.set_memory_metadata
    memory = _module("torch_npu.npu.memory", **memory_attrs)
    npu = _module(
        "torch_npu.npu",
        is_available=alloc.is_available,
        init=alloc.init,
        current_device=alloc.current_device,
        synchronize=alloc.synchronize,
        memory_stats=alloc.memory_stats,
        mem_get_info=alloc.mem_get_info,
        memory=memory,
    )
    c_attrs: dict[str, Any] = {}
    if alloc.hook != "missing":
        c_attrs["_npu_attach_out_of_memory_observer"] = alloc.attach
    c_module = _module("torch_npu._C", **c_attrs)
    root = _module("torch_npu", npu=npu, _C=c_module, __version__=NPU_VERSION)
    for module in (root, npu, memory, c_module):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return root


def patch_device(monkeypatch: pytest.MonkeyPatch, device: str, **options: Any) -> FakeAllocator:
    """A ``FakeAllocator`` for ``device`` ("cuda" or "npu"), with that framework patched.

    For npu, CUDA is made unavailable so that ``device="auto"`` resolves to the NPU as it would
    on an Ascend host.
    """
    alloc = FakeAllocator(device, **options)
    if device == "cuda":
        patch_cuda(monkeypatch, alloc)
    else:
        patch_cuda(monkeypatch, FakeAllocator("cuda", available=False, hook="missing"))
        patch_npu(monkeypatch, alloc)
    return alloc


# -- reading what was written ------------------------------------------------------------------
def files_under(root: Path) -> list[str]:
    """Every dump file below ``root`` as a sorted relative POSIX path (temp files included).

    The journal/ folder is left out: its lines have their own tests (test_journal.py).
    """
    if not root.exists():
        return []
    files = (p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    return sorted(name for name in files if not name.startswith("journal/"))


def oom_files(out_dir: Path) -> list[Path]:
    """The OOM snapshot pickles written under ``out_dir``."""
    folder = out_dir / "oom"
    return sorted(folder.glob("*.pickle")) if folder.is_dir() else []


def read_sidecar(snapshot: Path) -> dict[str, Any]:
    """The JSON sidecar beside ``snapshot``."""
    data: dict[str, Any] = json.loads(snapshot.with_suffix(".json").read_text())
    return data


def logged(stderr: str, event: str) -> list[str]:
    """The stderr log lines of ``event`` (the key=value renderer quotes it)."""
    pattern = re.compile(rf"\bevent='{re.escape(event)}'")
    return [line for line in stderr.splitlines() if pattern.search(line)]
