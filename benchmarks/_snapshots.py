"""Sim snapshots of a given size for the benchmarks: the sim's own allocator and trace format."""

from __future__ import annotations

import pickle
from typing import Any

from memforensics.backends import sim


def churn(device: sim.SimDevice, events: int, depth: int = 0) -> None:
    """Allocate and free 4 KiB tensors until ``events`` trace entries exist, ``depth`` frames
    below this function (stack depth is what the sim records per event)."""
    if depth > 0:
        churn(device, events, depth - 1)
        return
    live: list[sim.SimTensor] = []
    for _ in range(events // 2):
        live.append(device.empty(4096))
        if len(live) > 64:
            live.pop(0).free()
    for tensor in live:
        tensor.free()


def sim_snapshot(events: int, depth: int = 0) -> dict[str, Any]:
    """A fresh sim device's snapshot holding ``events`` trace entries (``max_entries`` = events)."""
    device = sim.reset_device(1 << 40)
    device.record_memory_history("all", max_entries=events)
    churn(device, events + 200, depth)
    return device.snapshot()


class PrebuiltBackend:
    """A DeviceBackend whose ``snapshot()`` returns a prepared dict at no cost.

    Taking the snapshot must happen on the training thread whatever the writer does, and costs
    the same for every writer; this backend takes it out so the figures isolate the writing.
    """

    name = "sim"

    def __init__(self, snapshot: dict[str, Any]) -> None:
        self.value = snapshot
        self.observers: list[Any] = []
        self.fresh: list[dict[str, Any]] = []

    def prepare(self, copies: int) -> None:
        """Build ``copies`` private copies now, so each dump gets (and frees) its own object,
        as a real ``_snapshot()`` does, without counting the build in the timed region."""
        blob = pickle.dumps(self.value, protocol=4)
        self.fresh = [pickle.loads(blob) for _ in range(copies)]

    def available(self) -> bool:
        return True

    def device_index(self) -> int | None:
        return 0

    def attach_oom_observer(self, observer: Any) -> object:
        self.observers.append(observer)
        return self

    def oom_hook_key(self) -> object:
        return self

    def record_history(
        self, mode: Any, *, max_entries: int, stacks: Any, clear: bool, context: Any = "alloc"
    ) -> None:
        return None

    def memory_fraction(self) -> float | None:
        return None

    def snapshot(self) -> dict[str, Any]:
        return self.fresh.pop() if self.fresh else self.value

    def mem_get_info(self) -> tuple[int, int] | None:
        return 1 << 30, 16 << 30

    def memory_stats(self) -> dict[str, Any]:
        return {"num_ooms": 1}

    def set_step_metadata(self, text: str) -> bool:
        return False

    def framework_version(self) -> str | None:
        return None

    def journal_stats(self) -> dict[str, int | None]:
        return {"ooms": 1, "device_free_bytes": 1 << 30, "device_total_bytes": 16 << 30}
