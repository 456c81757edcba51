"""The step-window state machine: steps in, "open / dump window a-b" decisions out.

Pure on purpose: no torch, no I/O, no clock. That makes the schedule (``skip_first``,
``every``, ``max_windows``) and its edge cases testable exhaustively with Hypothesis, and keeps
the per-step cost of the training loop to a few integer comparisons.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memforensics._layout import window_folder
from memforensics.backends._protocol import DeviceBackend, HistoryMode
from memforensics.capture.config import ForensicsConfig
from memforensics.capture.log import guarded

# What the allocator records inside and outside step windows.
#
# A rank records ``oom_history`` between windows (so an OOM dump still says who holds the memory)
# and full history (``"all"``, cleared) inside one (so a window's dump holds that window's events).
# Every switch goes through the backend guarded: a backend that refuses costs a warning, never the
# training step.


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


@dataclass(frozen=True, slots=True)
class Window:
    """A run of consecutive ``step()`` calls recorded and dumped together."""

    index: int
    """0 for the first window this process opened, then 1, 2, ..."""
    first_step: int
    last_step: int
    partial: bool = False
    """True when ``close()`` cut the window short."""

    @property
    def name(self) -> str:
        """Folder name: ``step12`` for a one-step window, ``steps4-7`` for several."""
        return window_folder(self.first_step, self.last_step)


class WindowSchedule:
    """Decides, call by call, when a window opens and when it is complete.

    ``begin(step)`` is called when a step starts and returns True when a window opens there
    (history must be cleared). ``end()`` is called when the step ends and returns the completed
    ``Window`` to dump, if any. ``close()`` returns the partial window to dump, if one is open.
    """

    __slots__ = (
        "_calls",
        "_current_first",
        "_current_len",
        "_every",
        "_last_step",
        "_max_windows",
        "_next_open",
        "_opened",
        "_steps",
    )

    def __init__(
        self,
        steps: int,
        *,
        every: int | None = None,
        skip_first: int = 0,
        max_windows: int | None = None,
    ) -> None:
        if steps < 1:
            raise ValueError("steps must be >= 1")
        if every is not None and every < steps:
            raise ValueError("every must be >= steps")
        self._steps = steps
        self._every = every if every is not None else steps
        self._max_windows = max_windows
        self._calls = 0
        self._opened = 0
        self._next_open = skip_first
        self._current_first: int | None = None
        self._current_len = 0
        self._last_step: int | None = None

    @property
    def is_open(self) -> bool:
        """True while a window is recording."""
        return self._current_first is not None

    def begin(self, step: int) -> bool:
        """Register the start of step ``step``; True when a window opens at this step."""
        call = self._calls
        self._calls = call + 1
        self._last_step = step
        if self._current_first is not None:
            self._current_len += 1
            return False
        if call != self._next_open:
            return False
        if self._max_windows is not None and self._opened >= self._max_windows:
            return False
        self._opened += 1
        self._next_open = call + self._every
        self._current_first = step
        self._current_len = 1
        return True

    def end(self) -> Window | None:
        """Register the end of the current step; the completed window, if this step ended one."""
        if self._current_first is None or self._current_len < self._steps:
            return None
        assert self._last_step is not None
        window = Window(self._opened - 1, self._current_first, self._last_step)
        self._current_first = None
        self._current_len = 0
        return window

    def close(self) -> Window | None:
        """End recording early; the partial window that was open, if any."""
        if self._current_first is None or self._last_step is None:
            return None
        window = Window(self._opened - 1, self._current_first, self._last_step, partial=True)
        self._current_first = None
        self._current_len = 0
        return window


def windows_to_delete(completed: Sequence[Window], keep_last: int | None) -> list[Window]:
    """Retention: keep the first window and the newest ``keep_last``; the rest may go.

    The first window is kept because it is the baseline every later window is compared with;
    the newest ones are kept because they are closest to whatever went wrong.
    """
    if keep_last is None or len(completed) <= 1:
        return []
    rest = list(completed[1:])
    keep_from = max(len(rest) - keep_last, 0)
    return rest[:keep_from]
