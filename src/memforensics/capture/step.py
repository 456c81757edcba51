"""The step contexts ``mf.step(n)`` returns: the one hot path of the library.

Split from :mod:`memforensics.capture.facade` so the code that runs twice per training step reads on
its own, apart from install and dump logic; it reaches the facade only through attributes and
bound methods prepared at install time, so moving it here adds no lookup or call per step.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Literal

from memforensics.capture.log import warn_once
from memforensics.capture.oom import is_oom_error

if TYPE_CHECKING:
    from memforensics.capture.facade import MemoryForensics


class NullStep:
    """The step context of a rank that captures nothing: as cheap as a context can be."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> Literal[False]:
        return False


NULL_STEP = NullStep()


class StepContext:
    """``with mf.step(n):`` for a capturing rank.

    This runs twice per training step, so the common case (no window opens or closes) is a
    handful of attribute reads and integer comparisons done here, with everything the facade
    needs prepared at install time (bound methods, or None when there is nothing to do). The
    rare cases (nesting, a step number that goes backwards, a window boundary, an OOM) go
    through the facade's slower helpers. See docs/performance.md for what this costs.
    """

    __slots__ = ("_mf", "_number")

    def __init__(self, mf: MemoryForensics, number: int | None) -> None:
        self._mf = mf
        self._number = number

    def __enter__(self) -> None:
        mf = self._mf
        try:
            mf._depth += 1
            if mf._depth > 1:
                mf._nested_step()
                return
            number = self._number
            last = mf._last_step
            if number is None:
                number = 0 if last is None else last + 1
            elif last is not None and number <= last:
                number = mf._step_not_increasing(number, last)
            mf._last_step = mf.current_step = number
            mf._fired_at_enter = mf._guard.fired
            begin = mf._begin_window
            if begin is not None and begin(number):
                mf._window_history()
            tag = mf._tag
            if tag is not None:
                tag(f"step={number}")
        except Exception as exc:  # noqa: BLE001 - nothing raises into training
            warn_once("step_enter_failed", "step_enter_failed", error=repr(exc))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        mf = self._mf
        try:
            if mf._depth > 1:
                return False
            if exc is not None and mf._guard.fired == mf._fired_at_enter and is_oom_error(exc):
                mf._capture_from_exception(exc)
            end = mf._end_window
            if end is not None:
                window = end()
                if window is not None:
                    mf._dumper.window(window)
                    mf._idle_history()
                    mf._journal_line("window")
            if mf.current_step >= mf._journal_next:  # type: ignore[operator] # set by __enter__
                mf._journal_line("step")
            tag = mf._tag
            if tag is not None:
                tag("")
        except Exception as error:  # noqa: BLE001
            warn_once("step_exit_failed", "step_exit_failed", error=repr(error))
        finally:
            depth = mf._depth - 1
            if depth <= 0:
                depth = 0
                mf.current_step = None
            mf._depth = depth
        return False  # never swallow: the user's exception leaves unchanged
