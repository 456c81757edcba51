"""A faked CUDA surface on the real CPU torch, for benchmarks (the tests keep their own).

It replaces exactly the names DESIGN.md lets the cuda adapter touch, with the cheapest honest
stand-ins: the step benchmark then measures memforensics' own cost on the path a real GPU run
takes (the cuda adapter, ``_set_memory_metadata`` twice per step), not a simulator's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

GIB = 1 << 30


class FakeCuda:
    """Stands behind the patched ``torch.cuda`` names; ``snapshot`` is whatever it is given."""

    def __init__(self, snapshot: dict[str, Any] | None = None) -> None:
        self.snapshot_value = snapshot or {"segments": [], "device_traces": [[]]}
        self.metadata = ""
        self.nested: dict[str, Any] = {
            "num_alloc_retries": 0,
            "reserved_bytes": {"all": {"current": 2 * GIB}},
        }
        self.observers: list[Callable[[int, int, int, int], None]] = []

    def is_available(self) -> bool:
        return True

    def init(self) -> None:
        return None

    def current_device(self) -> int:
        return 0

    def synchronize(self, device: Any = None) -> None:
        raise AssertionError("memforensics must never synchronize the device")

    def memory_stats(self, device: Any = None) -> dict[str, Any]:
        return {"allocated_bytes.all.current": 0, "num_ooms": 0}

    def memory_stats_as_nested_dict(self, device: Any = None) -> dict[str, Any]:
        return self.nested  # torch's own is one C++ call building this dict (and more keys)

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        return GIB, 16 * GIB

    def get_per_process_memory_fraction(self, device: Any = None) -> float:
        return 1.0

    def record_memory_history(
        self,
        enabled: str | None = "all",
        context: str | None = "all",
        stacks: str = "all",
        max_entries: int = 0,
        device: Any = None,
        clear_history: bool = False,
    ) -> None:
        return None

    def take_snapshot(self) -> dict[str, Any]:
        return self.snapshot_value

    def set_memory_metadata(self, text: str) -> None:
        self.metadata = text  # torch's own is one Python call into a C++ setter

    def attach(self, observer: Callable[[int, int, int, int], None]) -> None:
        self.observers.append(observer)


@contextmanager
def fake_cuda(fake: FakeCuda) -> Iterator[FakeCuda]:
    """Patch the torch.cuda names the adapter uses onto ``fake``; restore them afterwards."""
    import torch
    import torch.cuda.memory

    patches = [
        (torch.cuda, "is_available", fake.is_available),
        (torch.cuda, "init", fake.init),
        (torch.cuda, "current_device", fake.current_device),
        (torch.cuda, "synchronize", fake.synchronize),
        (torch.cuda, "memory_stats", fake.memory_stats),
        (torch.cuda, "mem_get_info", fake.mem_get_info),
        (torch.cuda, "get_per_process_memory_fraction", fake.get_per_process_memory_fraction),
        (torch.cuda, "memory_stats_as_nested_dict", fake.memory_stats_as_nested_dict),
        (torch.cuda.memory, "_record_memory_history", fake.record_memory_history),
        (torch.cuda.memory, "_snapshot", fake.take_snapshot),
        (torch.cuda.memory, "_set_memory_metadata", fake.set_memory_metadata),
        (torch._C, "_cuda_attach_out_of_memory_observer", fake.attach),
    ]
    missing = object()
    saved = [(obj, name, getattr(obj, name, missing)) for obj, name, _ in patches]
    for obj, name, value in patches:
        setattr(obj, name, value)
    try:
        yield fake
    finally:
        for obj, name, value in saved:
            if value is missing:
                delattr(obj, name)
            else:
                setattr(obj, name, value)
