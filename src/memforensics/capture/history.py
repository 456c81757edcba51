"""What the allocator records inside and outside step windows.

A rank records ``oom_history`` between windows (so an OOM dump still says who holds the memory)
and full history (``"all"``, cleared) inside one (so a window's dump holds that window's events).
Every switch goes through the backend guarded: a backend that refuses costs a warning, never the
training step.
"""

from __future__ import annotations

from memforensics.backends._protocol import DeviceBackend, HistoryMode
from memforensics.capture.config import ForensicsConfig
from memforensics.capture.log import guarded


class HistorySwitch:
    """Turns the backend's allocator history on, widens it for a window, narrows it after."""

    def __init__(self, backend: DeviceBackend, config: ForensicsConfig, rank: int) -> None:
        self._backend = backend
        self._config = config
        self._rank = rank
        wanted = config.oom_history
        self._idle: HistoryMode = None if wanted == "off" else wanted
        """The mode outside windows (``oom_history``; ``"off"`` is off)."""
        self.mode: HistoryMode = None
        """What the backend records now, as far as this switch knows (None: nothing)."""

    def start(self) -> None:
        """At install: record the mode outside windows, cleared of anything older."""
        mode = self._idle
        if mode is not None and self._record(mode, clear=True):
            self.mode = mode

    def open_window(self) -> None:
        """A window opens: full history, cleared so the dump holds this window's events."""
        if self._record("all", clear=True):
            self.mode = "all"

    def close_window(self) -> None:
        """A window was dumped: back to ``oom_history`` until the next one (or for good)."""
        mode = self._idle
        if mode == self.mode:
            return  # oom_history="all": keep recording, nothing to switch
        if self._record(mode, clear=False):
            self.mode = mode

    def stop(self) -> None:
        """At close: stop recording, if anything is recorded."""
        if self.mode is not None:
            self._record(None, clear=False)
            self.mode = None

    def _record(self, mode: HistoryMode, *, clear: bool) -> bool:
        """Switch the backend to ``mode``; False (and a warning once) when it refuses."""
        done = guarded(
            "history_failed",
            self._record_now,
            mode,
            clear,
            device=self._backend.name,
            rank=self._rank,
        )
        return done is True

    def _record_now(self, mode: HistoryMode, clear: bool) -> bool:
        config = self._config
        self._backend.record_history(
            mode,
            max_entries=config.max_entries,
            stacks=config.stacks,
            clear=clear,
            context=config.context,
        )
        return True
