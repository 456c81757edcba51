"""Ranges of the values a test lets through: two meet exactly where some number passes both
tests, so a test of picked values is never bounded below what can pass it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")  # collected, then deselected, where torch is absent

from memforensics.plan.picks import Range  # noqa: E402

pytestmark = pytest.mark.torch

ENDS = st.sampled_from([-math.inf, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, math.inf])


@st.composite
def ranges(draw: st.DrawFn) -> Range:
    """A range between two of a few ends, each end in or out (in only where finite)."""
    low, high = sorted((draw(ENDS), draw(ENDS)))
    low_in = draw(st.booleans()) and math.isfinite(low)
    high_in = draw(st.booleans()) and math.isfinite(high)
    return Range(low, high, low_in, high_in)


def _holds(r: Range, x: float) -> bool:
    above = x > r.low or (x == r.low and r.low_in)
    below = x < r.high or (x == r.high and r.high_in)
    return above and below


NUMBERS = [n / 4 for n in range(-12, 13)]
"""Every end and a number between each two neighbours: a number in both ranges, if any, is
among them."""


@given(ranges(), ranges())
def test_two_ranges_meet_exactly_where_a_number_lies_in_both(a: Range, b: Range) -> None:
    """``meets`` is true exactly when some number lies in both ranges, either way round."""
    both = any(_holds(a, x) and _holds(b, x) for x in NUMBERS)
    assert a.meets(b) is both
    assert b.meets(a) is both
