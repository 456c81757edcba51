"""Fakes of the exact torch / torch_npu surface the device adapters touch, with real signatures.

``FakeAllocator`` stands behind the patched names: it records every call, returns snapshots in
PyTorch's own format, and keeps the observers attached to its OOM hook so a test can fire an
out-of-memory event the way the framework's caching allocator would.

The fakes are derived from the real frameworks' signatures, in this one place:
- ``patch_cuda`` installs them on the real CPU torch, and every call first binds against the
  real function's ``inspect.signature`` (a keyword the real torch lacks fails the test);
- ``patch_npu`` installs a stand-in ``torch_npu`` whose functions carry ``NPU_SIGNATURES``,
  the parameters of the newest torch_npu release, which ``nox -s frameworks`` checks against
  the real wheel's sources (tests/frameworks). ``_record_memory_history`` there is torch_npu's
  real shape: ``(enabled="all", *args, **kwargs)`` forwarding to ``_record_memory_history_impl``.
"""

from __future__ import annotations

import copy
import importlib.machinery
import inspect
import json
import os
import re
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import memforensics
from memforensics import MemoryForensics

GIB = 1 << 30
NPU_VERSION = "2.14.0"

_PK = inspect.Parameter.POSITIONAL_OR_KEYWORD
_VAR_POS = inspect.Parameter.VAR_POSITIONAL
_VAR_KW = inspect.Parameter.VAR_KEYWORD
_NO_DEFAULT = inspect.Parameter.empty

NPU_SIGNATURES: dict[str, tuple[tuple[str, Any, Any], ...]] = {
    "npu.is_available": (),
    "npu.init": (),
    "npu.current_device": (),
    "npu.set_device": (("device", _PK, _NO_DEFAULT),),
    "npu.synchronize": (("device", _PK, None),),
    "npu.mem_get_info": (("device", _PK, None),),
    "npu.memory_stats": (("device", _PK, None),),
    "npu.memory_stats_as_nested_dict": (("device", _PK, None),),
    "npu.get_per_process_memory_fraction": (("device", _PK, None),),
    "npu.memory._record_memory_history": (
        ("enabled", _PK, "all"),
        ("args", _VAR_POS, _NO_DEFAULT),
        ("kwargs", _VAR_KW, _NO_DEFAULT),
    ),
    "npu.memory._record_memory_history_impl": (
        ("enabled", _PK, "all"),
        ("context", _PK, "all"),
        ("stacks", _PK, "all"),
        ("max_entries", _PK, sys.maxsize),
        ("device", _PK, None),
    ),
    "npu.memory._snapshot": (("device", _PK, None), ("augment_with_fx_traces", _PK, False)),
    "npu.memory._dump_snapshot": (
        ("filename", _PK, "dump_snapshot.pickle"),
        ("augment_with_fx_traces", _PK, False),
    ),
}
"""torch_npu 2.14.0's parameters (name, kind, default) of every function the fakes stand in
for, by path under ``torch_npu``. torch_npu has no ``_set_memory_metadata``."""
NPU_ABSENT = ("npu.memory._set_memory_metadata",)
"""Names the real torch_npu does not have (checked too)."""

OLD_TORCH_HISTORY = NPU_SIGNATURES["npu.memory._record_memory_history_impl"]
"""``_record_memory_history`` of torch 2.1-2.5, before ``clear_history``: the same parameters
torch_npu's implementation still has."""

SIDECAR_KEYS = {
    "schema", "kind", "rank", "world_size", "hostname", "pid", "device", "device_index",
    "steps", "step", "created_at", "snapshot_file", "snapshot_bytes", "torch_version",
    "memforensics_version", "partial", "tensors",
}  # fmt: skip
"""Every key DESIGN.md lists for a sidecar."""
SIDECAR_EXTRA_KEYS = {"truncated", "trace_entries", "tensors_dropped", "peak_allocated_bytes"}
"""Keys the implementation adds beyond DESIGN.md's list (``truncated``: the ring overflowed;
``tensors_dropped``: tracked tensors past the bound; ``peak_allocated_bytes``: the allocator's
peak when the dump was taken)."""
OOM_KEYS = {
    "requested_bytes", "allocation_bytes", "device_total_bytes", "device_free_bytes", "stack",
    "allocator",
}  # fmt: skip
OOM_EXTRA_KEYS = {"source", "error"}


def signature_of(params: tuple[tuple[str, Any, Any], ...]) -> inspect.Signature:
    """An ``inspect.Signature`` from ``(name, kind, default)`` triples."""
    return inspect.Signature(
        [inspect.Parameter(name, kind, default=default) for name, kind, default in params]
    )


def with_signature(
    signature: inspect.Signature, body: Callable[[dict[str, Any]], Any], name: str
) -> Callable[..., Any]:
    """A function that binds its call to ``signature`` (TypeError like the real one) and passes
    the explicitly given arguments, by name, to ``body``."""

    def fake(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        return body(dict(bound.arguments))

    fake.__signature__ = signature  # type: ignore[attr-defined]
    fake.__name__ = fake.__qualname__ = name
    return fake


def npu_record_memory_history(impl: Callable[..., Any]) -> Callable[..., Any]:
    """torch_npu's ``_record_memory_history``: no signature of its own, forwards to ``impl``.

    Built like the real one (a module-level function whose code names
    ``_record_memory_history_impl``), so adapters that read the wrapped implementation's
    parameters find them here as they would in torch_npu.
    """
    namespace: dict[str, Any] = {"_record_memory_history_impl": impl}
    # The real wrapper's shape, compiled from a constant.
    exec(
        "def _record_memory_history(enabled='all', *args, **kwargs):\n"
        "    return _record_memory_history_impl(enabled, *args, **kwargs)\n",
        namespace,
    )
    wrapper: Callable[..., Any] = namespace["_record_memory_history"]
    return wrapper


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
        "device_traces": [[] for _ in range(device)] + [trace],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1},
    }


def oom_entry(size: int, device_free: int, time_us: int = 1_700_000_000_500_000) -> dict[str, Any]:
    """The trace's ``oom`` entry as torch records it: the user's request rounded to the block
    size in ``size``, the driver's free bytes in ``device_free``."""
    return {"action": "oom", "addr": 0, "size": size, "stream": 0, "time_us": time_us,
            "device_free": device_free, "frames": []}  # fmt: skip


@dataclass
class FakeAllocator:
    """The allocator behind the patched framework names: records calls, fires OOMs."""

    device: str
    available: bool = True
    total: int = 16 * GIB
    free: int = 1 * GIB
    current: int = 0
    """What ``current_device()`` returns; ``set_device`` changes it."""
    fraction: float = 1.0
    """What ``get_per_process_memory_fraction()`` returns."""
    hook: str = "ok"
    """``"ok"``, ``"missing"`` (no attach function) or ``"raises"`` (cudaMallocAsync)."""
    history_signature: str = "new"
    """cuda: ``"new"`` (the installed torch's, with ``clear_history``) or ``"old"`` (torch 2.1-2.5,
    without it). npu always has torch_npu's real shape (no ``clear_history``)."""
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
        """The arguments (by name, as passed) of every ``_record_memory_history`` call."""
        return [kwargs for _, kwargs in self.called("_record_memory_history")]

    def fire_oom(
        self,
        allocation_bytes: int = 2 * GIB,
        device: int = 0,
        device_total_bytes: int | None = None,
    ) -> None:
        """What the caching allocator does on a failed malloc: call every observer with the
        failing device, the allocation size, the limit (the total unless given) and free bytes."""
        total = self.total if device_total_bytes is None else device_total_bytes
        for observer in list(self.observers):
            observer(device, allocation_bytes, total, self.free)

    # -- the framework surface -----------------------------------------------------------------
    def is_available(self) -> bool:
        self._call("is_available")
        return self.available

    def init(self) -> None:
        self._call("init")

    def current_device(self) -> int:
        self._call("current_device")
        return self.current

    def set_device(self, device: Any) -> None:
        self._call("set_device", device)
        self.current = int(device)

    def synchronize(self, device: Any = None) -> None:
        """Must never be called: the dispatcher would swallow a raise, so count instead."""
        self.synchronized += 1
        self._call("synchronize", device)

    def memory_stats(self, device: Any = None) -> dict[str, Any]:
        self._call("memory_stats", device)
        return dict(self.stats_value)

    def memory_stats_as_nested_dict(self, device: Any = None) -> dict[str, Any]:
        """``stats_value`` nested as torch nests it: ``a.b.c`` becomes ``{a: {b: {c: ...}}}``."""
        self._call("memory_stats_as_nested_dict", device)
        nested: dict[str, Any] = {}
        for key, value in self.stats_value.items():
            *path, last = key.split(".")
            level = nested
            for part in path:
                level = level.setdefault(part, {})
            level[last] = value
        return nested

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        self._call("mem_get_info", device)
        return self.free, self.total

    def get_per_process_memory_fraction(self, device: Any = None) -> float:
        self._call("get_per_process_memory_fraction", device)
        return self.fraction

    def snapshot(self, device: Any = None, augment_with_fx_traces: bool = False) -> dict[str, Any]:
        self._call("_snapshot")
        if self.on_snapshot is not None:
            self.on_snapshot()
        return copy.deepcopy(self.snapshot_value)

    def set_memory_metadata(self, metadata: str) -> None:
        self._call("_set_memory_metadata", metadata)

    def dump_snapshot(
        self, filename: str = "dump_snapshot.pickle", augment_with_fx_traces: bool = False
    ) -> None:
        self._call("_dump_snapshot", filename)

    def attach(self, observer: Callable[[int, int, int, int], None]) -> None:
        self._call("attach_out_of_memory_observer", observer)
        if self.hook == "raises":
            raise RuntimeError(
                "cudaMallocAsync does not yet support attachOutOfMemoryObserver. "
                "If you need it, please file an issue describing your use case."
            )
        self.observers.append(observer)

    def _record(self, arguments: dict[str, Any]) -> None:
        self._call("_record_memory_history", **arguments)

    def record_function(self, real: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """``_record_memory_history`` with the signature this fake's framework version has:
        the real torch's (``real``), torch 2.1-2.5's, or torch_npu's wrapper and implementation."""
        if self.device == "npu":
            impl = with_signature(
                signature_of(NPU_SIGNATURES["npu.memory._record_memory_history_impl"]),
                self._record,
                "_record_memory_history_impl",
            )
            return npu_record_memory_history(impl)
        if self.history_signature == "old" or real is None:
            signature = signature_of(OLD_TORCH_HISTORY)
        else:
            signature = inspect.signature(real)
        return with_signature(signature, self._record, "_record_memory_history")


def _bound_to(real: Any, fake: Callable[..., Any]) -> Callable[..., Any]:
    """``fake``, but every call first binds against ``real``'s signature (when it has one)."""
    try:
        signature = inspect.signature(real)
    except (TypeError, ValueError):  # a C function without a signature: nothing to bind
        return fake

    def checked(*args: Any, **kwargs: Any) -> Any:
        signature.bind(*args, **kwargs)  # TypeError, as the real torch would raise
        return fake(*args, **kwargs)

    checked.__signature__ = signature  # type: ignore[attr-defined]
    return checked


CUDA_PATCHED = (
    "is_available", "init", "current_device", "set_device", "synchronize", "memory_stats",
    "memory_stats_as_nested_dict", "mem_get_info", "get_per_process_memory_fraction",
)  # fmt: skip
"""``torch.cuda`` names the fake stands behind (each bound to the real signature)."""


def patch_cuda(monkeypatch: pytest.MonkeyPatch, alloc: FakeAllocator) -> None:
    """Point the torch.cuda names the adapter uses at ``alloc``, on the real CPU torch; every
    call binds against the real function's signature first."""
    import torch
    import torch.cuda.memory

    for name in CUDA_PATCHED:
        monkeypatch.setattr(
            torch.cuda, name, _bound_to(getattr(torch.cuda, name), getattr(alloc, name))
        )
    real_record = torch.cuda.memory._record_memory_history
    monkeypatch.setattr(
        torch.cuda.memory, "_record_memory_history", alloc.record_function(real_record)
    )
    monkeypatch.setattr(
        torch.cuda.memory, "_snapshot", _bound_to(torch.cuda.memory._snapshot, alloc.snapshot)
    )
    if alloc.metadata_supported:
        real_metadata = getattr(
            torch.cuda.memory, "_set_memory_metadata", alloc.set_memory_metadata
        )
        monkeypatch.setattr(
            torch.cuda.memory,
            "_set_memory_metadata",
            _bound_to(real_metadata, alloc.set_memory_metadata),
            raising=False,
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


def _npu_function(path: str, fake: Callable[..., Any]) -> Callable[..., Any]:
    """``fake`` carrying (and binding against) torch_npu's real signature for ``path``."""
    signature = signature_of(NPU_SIGNATURES[path])

    def call(arguments: dict[str, Any]) -> Any:
        return fake(**arguments)

    return with_signature(signature, call, path.rsplit(".", 1)[-1])


def patch_npu(monkeypatch: pytest.MonkeyPatch, alloc: FakeAllocator) -> types.ModuleType:
    """Insert a stand-in ``torch_npu`` (``npu``, ``npu.memory``, ``_C``) backed by ``alloc``."""
    memory_attrs: dict[str, Any] = {
        "_record_memory_history": alloc.record_function(),
        "_snapshot": _npu_function("npu.memory._snapshot", alloc.snapshot),
        "_dump_snapshot": _npu_function("npu.memory._dump_snapshot", alloc.dump_snapshot),
    }
    memory = _module("torch_npu.npu.memory", **memory_attrs)
    npu_attrs = {name: _npu_function(f"npu.{name}", getattr(alloc, name)) for name in CUDA_PATCHED}
    npu = _module("torch_npu.npu", memory=memory, **npu_attrs)
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


# -- fixtures the adapter tests share --------------------------------------------------------
# tests/unit/conftest.py hands these to pytest. None is autouse: a module that wants the clean
# environment asks for it (``pytest.mark.usefixtures("clean_env")``), the others request
# ``device``, ``fake``, ``install`` and ``out_dir`` by name or define their own.
Fake = Callable[..., FakeAllocator]
Install = Callable[..., MemoryForensics]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No MEMFORENSICS_*, RANK or OOM_SNAPSHOT_ENABLE from the outer environment leaks in."""
    for name in list(os.environ):
        if name.startswith("MEMFORENSICS_") or name in {"RANK", "WORLD_SIZE"}:
            monkeypatch.delenv(name)
    monkeypatch.delenv("OOM_SNAPSHOT_ENABLE", raising=False)


@pytest.fixture(params=["cuda", "npu"])
def device(request: pytest.FixtureRequest) -> str:
    """The device whose adapter the test drives."""
    param: str = request.param
    return param


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, device: str) -> Iterator[Fake]:
    """Make a FakeAllocator for ``device``; fail the test if anything synchronized it."""
    made: list[FakeAllocator] = []

    def make(**options: Any) -> FakeAllocator:
        alloc = patch_device(monkeypatch, device, **options)
        made.append(alloc)
        return alloc

    yield make
    assert [a.synchronized for a in made] == [0] * len(made), "a device synchronize was issued"


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    """Where dumps go (not created in advance: install() creates it)."""
    return tmp_path / "out"


@pytest.fixture
def install(device: str, out_dir: Path) -> Install:
    """``memforensics.install`` for rank 0 on ``device`` into ``out_dir``, plus overrides."""

    def run(**config: Any) -> MemoryForensics:
        options: dict[str, Any] = {"out_dir": out_dir, "device": device, "rank": 0, **config}
        return memforensics.install(**options)

    return run
