"""The one interface between memforensics and a device framework.

Everything above this layer (windows, the OOM path, the writer) talks to a device only through
``DeviceBackend``. That keeps torch out of the core, lets the ``sim`` device stand in for real
hardware in demos and tests, and confines each framework's quirks to one module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol, runtime_checkable

OomObserver = Callable[[int, int, int, int], None]
"""Called by the allocator on OOM as
``observer(device, allocation_bytes, device_total_bytes, device_free_bytes)``.

This is the exact signature both ``torch._C._cuda_attach_out_of_memory_observer`` and torch_npu's
``_npu_attach_out_of_memory_observer`` use. ``device`` is the device the failing allocation was
on; ``allocation_bytes`` the size the allocator tried to get from the driver after rounding (2 MiB
for requests up to 1 MiB, 20 MiB below 10 MiB, else rounded up to 2 MiB), which is also what the
error text's "Tried to allocate" prints, not the user's request; ``device_total_bytes`` the
per-process limit when a memory fraction is set, else the device total; ``device_free_bytes`` the
driver's free bytes after the allocator already released its cache. These names are kept from
here to the journal, the sidecar and every JSON answer.
"""

HistoryMode = Literal["all", "state"] | None
HistoryContext = Literal["alloc", "all"]
"""Whose stacks history keeps: allocations only (``"alloc"``), or frees too (``"all"``)."""


@runtime_checkable
class DeviceBackend(Protocol):
    """What memforensics needs from a device framework.

    Adapters import their framework lazily (inside methods), never at module import, and every
    method except ``attach_oom_observer`` and ``available`` may be called from the OOM observer,
    so none of them may synchronize the device.
    """

    name: str
    """``"cuda"``, ``"npu"``, ``"none"`` or ``"sim"``: also what sidecars record as ``device``."""

    def available(self) -> bool:
        """True when the framework is importable and a device is present."""
        ...

    def device_index(self) -> int | None:
        """Index of the current device now (not at install), or None when there is none."""
        ...

    def attach_oom_observer(self, observer: OomObserver) -> object:
        """Attach ``observer`` to the allocator's OOM hook; return a key identifying the hook.

        Raises ``BackendError`` with a clear reason when the hook is missing, the device is
        unavailable or the framework refuses (cudaMallocAsync, pluggable allocators, torch_npu's
        own ``OOM_SNAPSHOT_ENABLE`` observer). Frameworks cannot detach an observer, so callers
        attach once per hook key per process and route through a registry.
        """
        ...

    def oom_hook_key(self) -> object:
        """A hashable identity of the hook ``attach_oom_observer`` would use (for once-only)."""
        ...

    def record_history(
        self,
        mode: HistoryMode,
        *,
        max_entries: int,
        stacks: Literal["python", "all"],
        clear: bool,
        context: HistoryContext = "alloc",
    ) -> None:
        """Start (``"all"``/``"state"``), restart with ``clear``, or stop (None) recording.

        An adapter whose framework records history itself (torch_npu's ``OOM_SNAPSHOT_ENABLE``)
        leaves it alone: this is then a no-op.
        """
        ...

    def snapshot(self) -> dict[str, Any]:
        """The allocator snapshot, exactly the dict ``torch.cuda.memory._snapshot()`` returns."""
        ...

    def mem_get_info(self) -> tuple[int, int] | None:
        """``(free_bytes, total_bytes)`` of the device, or None when unknown."""
        ...

    def memory_fraction(self) -> float | None:
        """The per-process memory fraction of the current device (None: not exposed)."""
        ...

    def memory_stats(self) -> dict[str, Any]:
        """Allocator statistics (``torch.cuda.memory_stats()``), plain JSON-able values."""
        ...

    def allocator_pressure(self) -> tuple[int, int] | None:
        """``(num_alloc_retries, reserved bytes now)``: the near-OOM check's two figures.

        Read the cheapest way the framework allows (``memory_stats_as_nested_dict()``: no key
        flattening, no sorting, no device synchronize); None when unknown.
        """
        ...

    def set_step_metadata(self, text: str) -> bool:
        """Tag subsequent allocations with ``text`` (e.g. ``"step=12"``); False if unsupported."""
        ...

    def framework_version(self) -> str | None:
        """The torch (and torch_npu) version string for sidecars, or None."""
        ...

    def journal_stats(self) -> dict[str, int | None]:
        """The journal's figures (``backends._stats.JOURNAL_STATS``), None where unknown.

        From ``memory_stats()`` and ``mem_get_info()`` only: neither synchronizes the device,
        and the allocator's peak counters are read, never reset.
        """
        ...
