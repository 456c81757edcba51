"""The two ways an OOM reaches a dump: the allocator's observer, and ``step()``'s exception.

The observer calls in from inside the failing ``malloc``; the ``step()`` fallback catches the
OOMs no observer saw (CANN, NCCL, no hook). Both journal the OOM first and share one guard, so
one OOM never dumps twice and a burst of them stops at ``max_oom_snapshots``.
"""

from __future__ import annotations

from memforensics.backends._protocol import DeviceBackend
from memforensics.capture.dumps import Dumper
from memforensics.capture.journal import JournalSchedule
from memforensics.capture.log import warn_once
from memforensics.capture.oom import REGISTRY, OomGuard, OomHandler, attach_error_reason


class OomCapture:
    """One process's OOM path: attaching the observer, then a journal line and a guarded dump."""

    def __init__(
        self,
        backend: DeviceBackend,
        dumper: Dumper,
        journal: JournalSchedule,
        guard: OomGuard,
    ) -> None:
        self._backend = backend
        self._dumper = dumper
        self._journal = journal
        self._guard = guard

    def attach(self, handler: OomHandler) -> bool:
        """Attach the process's one observer to the backend's hook and route OOMs to ``handler``.

        False when the hook is missing or refuses: a warning says so, and OOM dumps then come
        only from exceptions leaving ``step()``.
        """
        attached = False
        try:
            REGISTRY.ensure_attached(self._backend)
            attached = True
        except Exception as exc:  # noqa: BLE001 - each refusal is a warning, never fatal
            warn_once(
                f"attach:{self._backend.name}:{exc}",
                "oom_observer_not_attached",
                device=self._backend.name,
                reason=attach_error_reason(exc),
                consequence="OOM dumps come only from exceptions leaving mf.step()",
            )
        REGISTRY.set_handler(handler)
        return attached

    def observed(
        self,
        step: int | None,
        device: int,
        allocation_bytes: int,
        device_total_bytes: int,
        device_free_bytes: int,
    ) -> None:
        """The observer saw an OOM on ``device``: the allocator's allocation size, the limit and
        the driver's free bytes, from inside the failing malloc."""
        observed = {
            "allocation_bytes": allocation_bytes,
            "device_total_bytes": device_total_bytes,
            "device_free_bytes": device_free_bytes,
        }
        self._journal.line("oom", step, periodic=False, observed=observed)
        if not self._guard.admit():
            return
        try:
            self._dumper.oom(
                step=step,
                allocation_bytes=allocation_bytes,
                device_total_bytes=device_total_bytes,
                device_free_bytes=device_free_bytes,
                device_index=device,
                source="observer",
            )
        finally:
            self._guard.release()

    def raised(self, exc: BaseException, step: int | None) -> None:
        """An OOM error left ``step()`` that no observer saw (CANN, NCCL, no hook)."""
        self._journal.line("oom", step, periodic=False)
        if not self._guard.admit():
            return
        try:
            self._dumper.oom_from_exception(exc, step)
        finally:
            self._guard.release()
