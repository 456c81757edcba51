"""The window state machine against a tiny reference model (Hypothesis stateful tests)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from memforensics.capture.window import Window, WindowSchedule, windows_to_delete


def reference_windows(
    calls: list[int],
    steps: int,
    every: int | None,
    skip_first: int,
    max_windows: int | None,
    closed: bool,
) -> list[tuple[int, int, bool]]:
    """Expected (first_step, last_step, partial) for step numbers ``calls``, by brute force."""
    period = every or steps
    expected = []
    k = 0
    while max_windows is None or k < max_windows:
        start = skip_first + k * period
        if start >= len(calls):
            break
        covered = calls[start : start + steps]
        if len(covered) == steps:
            expected.append((covered[0], covered[-1], False))
        elif closed:
            expected.append((covered[0], covered[-1], True))
        k += 1
    return expected


class WindowMachine(RuleBasedStateMachine):
    """Drive WindowSchedule with random schedules, steps and an early close."""

    @initialize(
        steps=st.integers(1, 5),
        extra=st.integers(0, 4),
        use_every=st.booleans(),
        skip_first=st.integers(0, 6),
        max_windows=st.none() | st.integers(1, 4),
    )
    def setup(
        self, steps: int, extra: int, use_every: bool, skip_first: int, max_windows: int | None
    ) -> None:
        self.steps = steps
        self.every = steps + extra if use_every else None
        self.skip_first = skip_first
        self.max_windows = max_windows
        self.schedule = WindowSchedule(
            steps, every=self.every, skip_first=skip_first, max_windows=max_windows
        )
        self.calls: list[int] = []
        self.opened_at: list[int] = []
        self.dumped: list[Window] = []
        self.closed = False
        self.next_step = 0

    @precondition(lambda self: not self.closed)
    @rule(gap=st.integers(1, 3))
    def run_step(self, gap: int) -> None:
        """One step: begin, end, and collect what it decided."""
        number = self.next_step
        self.next_step += gap
        self.calls.append(number)
        if self.schedule.begin(number):
            self.opened_at.append(number)
        window = self.schedule.end()
        if window is not None:
            self.dumped.append(window)

    @precondition(lambda self: not self.closed)
    @rule()
    def close(self) -> None:
        """Close early: a window still open comes back partial."""
        window = self.schedule.close()
        if window is not None:
            assert window.partial
            self.dumped.append(window)
        self.closed = True

    @precondition(lambda self: self.closed)
    @rule()
    def close_again(self) -> None:
        """Closing twice yields nothing the second time."""
        assert self.schedule.close() is None

    @invariant()
    def matches_reference(self) -> None:
        """Dumped windows are exactly what the brute-force model expects so far."""
        if not hasattr(self, "schedule"):
            return
        got = [(w.first_step, w.last_step, w.partial) for w in self.dumped]
        expected = reference_windows(
            self.calls, self.steps, self.every, self.skip_first, self.max_windows, self.closed
        )
        if not self.closed and self.schedule.is_open:
            expected = [e for e in expected if not e[2]]
        assert got == expected

    @invariant()
    def windows_never_overlap(self) -> None:
        """Each window starts after the previous one ended, and opened where it says."""
        if not hasattr(self, "schedule"):
            return
        for before, after in zip(self.dumped, self.dumped[1:], strict=False):
            assert before.last_step < after.first_step
        assert [w.first_step for w in self.dumped] == self.opened_at[: len(self.dumped)]

    @invariant()
    def full_windows_hold_exactly_steps_calls(self) -> None:
        """A non-partial window covers exactly ``steps`` step calls."""
        if not hasattr(self, "schedule"):
            return
        for window in self.dumped:
            span = [c for c in self.calls if window.first_step <= c <= window.last_step]
            if window.partial:
                assert 1 <= len(span) < self.steps
            else:
                assert len(span) == self.steps


TestWindowMachine = WindowMachine.TestCase
TestWindowMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_window_names() -> None:
    """Folder names are step{N} for one step and steps{a}-{b} for several."""
    assert Window(0, 12, 12).name == "step12"
    assert Window(0, 4, 7).name == "steps4-7"


def test_skip_first_then_back_to_back() -> None:
    """skip_first=4, steps=2: the first window is steps4-5, the next steps6-7."""
    schedule = WindowSchedule(2, skip_first=4)
    names = []
    for n in range(8):
        schedule.begin(n)
        window = schedule.end()
        if window:
            names.append(window.name)
    assert names == ["steps4-5", "steps6-7"]


def test_every_leaves_gaps_and_max_windows_stops() -> None:
    """every=5, steps=2, max_windows=2: windows at calls 0-1 and 5-6, then none."""
    schedule = WindowSchedule(2, every=5, max_windows=2)
    names = []
    for n in range(20):
        schedule.begin(n)
        window = schedule.end()
        if window:
            names.append(window.name)
    assert names == ["steps0-1", "steps5-6"]


@pytest.mark.parametrize(("steps", "every"), [(0, None), (3, 2)])
def test_invalid_schedules_raise(steps: int, every: int | None) -> None:
    """The pure object refuses schedules the config would refuse too."""
    with pytest.raises(ValueError, match=r"steps|every"):
        WindowSchedule(steps, every=every)


@given(count=st.integers(0, 30), keep_last=st.none() | st.integers(0, 5))
def test_retention_keeps_first_and_newest(count: int, keep_last: int | None) -> None:
    """Retention deletes everything but the first window and the newest keep_last."""
    windows = [Window(i, 2 * i, 2 * i + 1) for i in range(count)]
    doomed = windows_to_delete(windows, keep_last)
    kept = [w for w in windows if w not in doomed]
    if keep_last is None or count <= 1:
        assert kept == windows
        return
    assert kept[0] == windows[0]
    newest = windows[1:][-keep_last:] if keep_last else []
    assert kept == [windows[0], *newest]
