"""The facade's history switching: what the allocator records inside and outside windows.

Split from :mod:`memforensics.capture.facade`: a rank records ``oom_history`` between windows and full
history (``"all"``, cleared) inside one, and every switch goes through the backend guarded, so a
refusing backend costs a warning and never the training step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memforensics.backends._protocol import DeviceBackend, HistoryMode
from memforensics.capture.config import ForensicsConfig


class HistorySwitch:
    """Mixin of :class:`~memforensics.capture.facade.MemoryForensics`: start, widen, narrow history."""

    config: ForensicsConfig
    backend: DeviceBackend
    _history: HistoryMode
    _try: Callable[..., Any]

    def _start_history(self) -> None:
        """Outside windows a rank records what ``oom_history`` says; a window opens with "all"."""
        mode = self._idle_mode
        if mode is not None and self._record(mode, clear=True):
            self._history = mode

    @property
    def _idle_mode(self) -> HistoryMode:
        """The history mode outside windows (``oom_history``; ``"off"`` is off)."""
        wanted = self.config.oom_history
        return None if wanted == "off" else wanted

    def _window_history(self) -> None:
        """A window opens: full history, cleared so the dump holds this window's events."""
        if self._record("all", clear=True):
            self._history = "all"

    def _idle_history(self) -> None:
        """A window was dumped: back to ``oom_history`` until the next one (or for good)."""
        mode = self._idle_mode
        if mode == self._history:
            return  # oom_history="all": keep recording, nothing to switch
        if self._record(mode, clear=False):
            self._history = mode

    def _record(self, mode: HistoryMode, *, clear: bool) -> bool:
        return self._try("history_failed", self._record_now, mode, clear) is True

    def _record_now(self, mode: HistoryMode, clear: bool) -> bool:
        self.backend.record_history(
            mode,
            max_entries=self.config.max_entries,
            stacks=self.config.stacks,
            clear=clear,
            context=self.config.context,
        )
        return True
