"""The facade's OOM hooks: attaching the observer, and the two ways an OOM reaches a dump.

Split from :mod:`memforensics.capture.facade`. The allocator's observer calls in from inside the
failing ``malloc``; the ``step()`` fallback catches the OOMs no observer saw (CANN, NCCL, no
hook). Both journal the OOM first and share one guard, so one OOM never dumps twice and a
burst of them stops at ``max_oom_snapshots``.
"""

from __future__ import annotations

from collections.abc import Callable

from memforensics.backends._protocol import DeviceBackend
from memforensics.capture.dumps import Dumper
from memforensics.capture.log import warn_once
from memforensics.capture.oom import REGISTRY, OomGuard, attach_error_reason


class OomHooks:
    """Mixin of :class:`~memforensics.capture.facade.MemoryForensics`: the OOM path."""

    backend: DeviceBackend
    closed: bool
    oom_attached: bool
    current_step: int | None
    _guard: OomGuard
    _dumper: Dumper

    # provided by the facade's journal hooks (annotation only: the MRO finds the method)
    _journal_line: Callable[..., None]

    def _attach_observer(self) -> None:
        try:
            REGISTRY.ensure_attached(self.backend)
            self.oom_attached = True
        except Exception as exc:  # noqa: BLE001 - each refusal is a warning, never fatal
            warn_once(
                f"attach:{self.backend.name}:{exc}",
                "oom_observer_not_attached",
                device=self.backend.name,
                reason=attach_error_reason(exc),
                consequence="OOM dumps come only from exceptions leaving mf.step()",
            )
        REGISTRY.set_handler(self._on_oom_observer)

    def _on_oom_observer(self, device: int, allocation: int, limit: int, free: int) -> None:
        """The registry calls this from inside the allocator's failing malloc, with the failing
        device, the allocator's allocation size, the limit and the driver's free bytes."""
        if self.closed:
            return
        self._journal_line("oom", periodic=False)
        if not self._guard.admit():
            return
        try:
            self._dumper.oom(
                step=self.current_step,
                allocation=allocation,
                limit=limit,
                free=free,
                device_index=device,
                source="observer",
            )
        finally:
            self._guard.release()

    def _capture_from_exception(self, exc: BaseException) -> None:
        """step() fallback for OOMs the observer never saw (CANN, NCCL, no hook)."""
        self._journal_line("oom", periodic=False)
        if not self._guard.admit():
            return
        try:
            self._dumper.oom_from_exception(exc, self.current_step)
        finally:
            self._guard.release()
