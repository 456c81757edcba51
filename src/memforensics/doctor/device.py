"""The doctor's device checks: which backend, does it see a device, does the OOM hook attach,
which history options does this framework accept, and are Python frames really recorded?

They talk to the device only through the ``DeviceBackend`` Protocol, so they report rather than
crash where torch is absent, and they run in order: the first picks the backend and finds out
whether it is usable, and the later ones build on that.
"""

from __future__ import annotations

from collections.abc import Callable

from memforensics._units import format_bytes
from memforensics.backends._protocol import DeviceBackend
from memforensics.backends._torch import CLEAR_KEYWORD, HISTORY_KEYWORDS, TorchAllocatorBackend
from memforensics.backends.npu import OOM_SNAPSHOT_ENABLE, oom_snapshot_enable
from memforensics.capture.oom import REGISTRY
from memforensics.doctor.probe import allocate_probe, is_probe_frame, unavailable_reason
from memforensics.doctor.status import Status

BackendFactory = Callable[[str], DeviceBackend]

PROBE_BYTES = 4096


class DeviceChecks:
    """The checks of one ``device``, in order: ``check_device`` first, as it picks the backend."""

    def __init__(self, device: str, factory: BackendFactory) -> None:
        self.device = device
        self._factory = factory
        self.backend: DeviceBackend | None = None
        """The backend ``check_device`` picked (None before it ran)."""
        self.usable = False
        """True once ``check_device`` found the backend's device available."""

    def check_device(self) -> tuple[Status, str]:
        """Which backend ``install(device=...)`` would use, and whether it sees a device."""
        backend = self._factory(self.device)
        self.backend = backend
        if backend.name == "none":
            if self.device == "none":
                return "warn", "device 'none': install() would capture nothing"
            return "warn", "auto found no CUDA or NPU device: install() would capture nothing"
        if not backend.available():
            return "fail", unavailable_reason(backend)
        self.usable = True
        index = backend.device_index()
        info = backend.mem_get_info()
        where = f"{backend.name}:{index}" if index is not None else backend.name
        if info is None:
            return "pass", f"{where} available"
        free, total = info
        return "pass", f"{where}: {format_bytes(total)} total, {format_bytes(free)} free"

    def check_oom_hook(self) -> tuple[Status, str]:
        """Does the allocator's OOM hook exist, and does our observer attach to it?"""
        backend = self.backend
        if backend is None or backend.name == "none":
            return "warn", "not checked: no device"
        if isinstance(backend, TorchAllocatorBackend):
            try:
                module = backend.c_module()
            except Exception as exc:  # noqa: BLE001
                return "fail", f"{backend.name}: framework not importable ({exc})"
            hook = f"{module.__name__}.{backend.hook_name}"
            if getattr(module, backend.hook_name, None) is None:
                return "fail", (
                    f"{hook} is missing in this build: OOM dumps would come only from "
                    "exceptions leaving mf.step()"
                )
            if not self.usable:
                return "warn", f"{hook} exists; not attached: no {backend.name} device"
        else:
            hook = f"the {backend.name} device's observer list"
        try:
            fresh = REGISTRY.ensure_attached(backend)
        except Exception as exc:  # noqa: BLE001 - the refusal is the finding
            if backend.name == "npu" and oom_snapshot_enable() != 0:
                return "warn", f"not attached: {exc}"
            return "fail", f"attach refused: {exc}"
        return "pass", f"observer attached to {hook}" + ("" if fresh else " (already)")

    def check_history_options(self) -> tuple[Status, str]:
        """Which ``_record_memory_history`` options this framework version understands."""
        backend = self.backend
        if backend is None or backend.name == "none":
            return "warn", "not checked: no device"
        if not isinstance(backend, TorchAllocatorBackend):
            return "pass", (
                f"{backend.name}: enabled, context, stacks, max_entries, clear_history, metadata"
            )
        found = backend.history_parameters()
        metadata = hasattr(backend.memory_module(), "_set_memory_metadata")
        notes: list[str] = []
        if backend.records_history_itself():
            notes.append(
                f"{OOM_SNAPSHOT_ENABLE} is on: torch_npu records history itself and "
                "memforensics leaves it alone (windows are not cleared)"
            )
        if found is None:
            listed = "parameters unknown (no readable signature)"
            notes.append("memforensics passes enabled, context, stacks, max_entries")
        else:
            listed = ", ".join(found)
            if "trace_alloc_max_entries" in found:
                return "warn", f"legacy API (torch < 2.1): {listed}; stacks='all' is not honoured"
            unknown = [name for name in HISTORY_KEYWORDS if name not in found]
            if unknown:
                notes.append(f"does not accept {', '.join(unknown)}: history calls would fail")
            if CLEAR_KEYWORD not in found:
                notes.append(f"no {CLEAR_KEYWORD}: a window clears history by restarting it")
        listed += "; _set_memory_metadata" if metadata else ""
        if not metadata:
            notes.append("no _set_memory_metadata: allocations are not tagged step=N")
        return ("warn" if notes else "pass"), "; ".join([listed, *notes])

    def check_history_frames(self) -> tuple[Status, str]:
        """Record history, allocate a little, snapshot: are Python frames really recorded?"""
        backend = self.backend
        if backend is None or not self.usable:
            return "warn", "not run: no usable device"
        backend.record_history("all", max_entries=10_000, stacks="python", clear=True)
        try:
            probe = allocate_probe(backend, PROBE_BYTES)
            snapshot = backend.snapshot()
            del probe
        finally:
            backend.record_history(None, max_entries=10_000, stacks="python", clear=False)
        index = backend.device_index() or 0
        traces = snapshot.get("device_traces") or []
        trace = traces[index] if index < len(traces) else []
        allocs = [event for event in trace if event.get("action") == "alloc"]
        if not allocs:
            return "fail", f"history recording produced no alloc events ({len(trace)} events)"
        mine = [e for e in allocs if any(is_probe_frame(f) for f in e.get("frames") or [])]
        if not mine:
            return "fail", (
                f"{len(allocs)} alloc events, but none carries the probe's Python frames: "
                "dumps would not say who allocated"
            )
        frames = mine[-1]["frames"]
        return "pass", f"{len(trace)} trace events; the probe allocation has {len(frames)} frames"
