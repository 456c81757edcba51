"""The Python stack the planned device records under each allocation, against Python's own
``traceback`` of the same frames, on first sight of a chain of callers and on every repeat."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

from memforensics.plan.device import _StackCapture


def _allocate(capture: _StackCapture, **options: Any) -> Any:
    """Where the device calls its capture: the stack starts at this function's caller."""
    return capture(**options)


def _truth(skipped: tuple[str, ...] = ()) -> list[tuple[str, int, str]]:
    """The caller's stack as ``traceback`` reads it, innermost first, ``skipped`` files out."""
    summary = traceback.extract_stack(sys._getframe(1))
    return [
        (f.filename, f.lineno or 0, f.name)
        for f in reversed(summary)
        if not f.filename.startswith(skipped)
    ]


def _nested(depth: int, capture: _StackCapture) -> tuple[Any, list[tuple[str, int, str]]]:
    """The capture and the truth, taken ``depth`` calls deep, one line apart."""
    if depth:
        return _nested(depth - 1, capture)
    truth = _truth()
    return _allocate(capture), [(truth[0][0], truth[0][1] + 1, truth[0][2]), *truth[1:]]


def test_repeated_chains_give_the_stack_traceback_reads() -> None:
    """Every capture, first or repeated, from any depth and call site, is traceback's stack."""
    capture = _StackCapture(())
    for _ in range(3):
        for depth in (0, 1, 5, 2, 5):
            stack, truth = _nested(depth, capture)
            assert list(stack) == truth
        here = _allocate(capture)
        assert here[0][1] == sys._getframe().f_lineno - 1
        assert list(here[1:]) == _truth()[1:]


def test_equal_stacks_are_one_object() -> None:
    """A chain seen again gives the very stack kept the first time (one copy in the trace)."""
    capture = _StackCapture(())
    first = [_nested(3, capture)[0] for _ in range(2)]
    assert first[0] is first[1]


def test_skipped_files_are_left_out() -> None:
    """Frames of a skipped file are not recorded, at first sight and on repeats."""
    here = os.path.abspath(__file__)
    capture = _StackCapture((here,))
    for _ in range(2):
        stack, _truth_here = _nested(2, capture)
        assert all(frame[0] != here for frame in stack)
        assert list(stack) == _truth((here,))[: len(stack)]


_ENGINE = """
def _engine_run_backward(hook):
    return hook()
"""


def _engine() -> Any:
    """A function named and placed as torch's entry into autograd's engine."""
    namespace: dict[str, Any] = {}
    path = os.path.join(os.sep, "site", "torch", "autograd", "graph.py")
    exec(compile(_ENGINE, path, "exec"), namespace)
    return namespace["_engine_run_backward"]


def test_autograd_thread_keeps_only_the_frames_the_engine_runs() -> None:
    """On autograd's thread the stack is what runs inside the engine; none outside it."""
    capture = _StackCapture(())
    engine = _engine()

    def hook() -> Any:
        return _allocate(capture, on_autograd_thread=True), _truth()

    for _ in range(3):
        stack, truth = engine(hook)
        assert stack == (truth[0],)
        assert truth[1][2] == "_engine_run_backward"
        assert _allocate(capture, on_autograd_thread=True) == ()
        outside = _allocate(capture)
        assert [frame[2] for frame in outside] == [frame[2] for frame in _truth()]
