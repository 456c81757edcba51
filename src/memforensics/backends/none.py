"""The ``none`` backend: no device, nothing to capture, nothing that can fail."""

from __future__ import annotations

from typing import Any, Literal

from memforensics._errors import BackendError
from memforensics.backends._protocol import HistoryContext, HistoryMode, OomObserver
from memforensics.backends._torch import EMPTY_STATS


class NoneBackend:
    """Chosen when no accelerator is found; every capture is a no-op."""

    name = "none"

    def available(self) -> bool:
        """Never: there is no device."""
        return False

    def device_index(self) -> int | None:
        """No device, no index."""
        return None

    def oom_hook_key(self) -> object:
        """One (absent) hook for the process."""
        return "none"

    def attach_oom_observer(self, observer: OomObserver) -> object:
        """Refuse: with no device there is no allocator to observe."""
        raise BackendError("no accelerator: there is no allocator OOM hook to attach to")

    def record_history(
        self,
        mode: HistoryMode,
        *,
        max_entries: int,
        stacks: Literal["python", "all"],
        clear: bool,
        context: HistoryContext = "alloc",
    ) -> None:
        """Nothing to record."""

    def snapshot(self) -> dict[str, Any]:
        """An empty snapshot in PyTorch's shape."""
        return {"segments": [], "device_traces": []}

    def mem_get_info(self) -> tuple[int, int] | None:
        """Unknown."""
        return None

    def memory_fraction(self) -> float | None:
        """Unknown."""
        return None

    def memory_stats(self) -> dict[str, Any]:
        """No statistics."""
        return {}

    def allocator_pressure(self) -> tuple[int, int] | None:
        """Unknown."""
        return None

    def set_step_metadata(self, text: str) -> bool:
        """Unsupported."""
        return False

    def framework_version(self) -> str | None:
        """No framework in use."""
        return None

    def journal_stats(self) -> dict[str, int | None]:
        """Every figure unknown."""
        return dict(EMPTY_STATS)
