"""Whatever a journal file holds, overview reads every whole good line and never raises."""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memforensics._layout import journal_name
from memforensics.analysis import build_overview
from memforensics.analysis.folder import overview_text
from memforensics.analysis.folder.journals import growth_per_1k
from memforensics.analysis.report import render_overview
from memforensics.capture.journal import format_line

_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
)
_odd_line = st.one_of(
    st.binary(max_size=30).filter(lambda b: b"\n" not in b),
    st.dictionaries(
        st.sampled_from(["time", "step", "rank", "event", "reserved_bytes", "ooms"]),
        _values,
        max_size=6,
    ).map(lambda d: json.dumps(d).encode()),
)
_good = st.builds(
    lambda step, reserved: format_line(
        "step", step, 0, {"reserved_bytes": reserved, "allocated_bytes": reserved}, 1e9 + step
    ),
    st.integers(0, 10**6),
    st.integers(0, 2**50),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.one_of(_good, _odd_line.map(lambda b: b + b"\n")), max_size=12),
    st.binary(max_size=20),
)
def test_any_journal_content_is_read_without_raising(lines: list[bytes], tail: bytes) -> None:
    """Good lines, odd lines and a torn tail in any mix: no exception; good lines all counted."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "journal"
        folder.mkdir()
        torn = tail.replace(b"\n", b"")
        (folder / journal_name(0, 1)).write_bytes(b"".join(lines) + torn)
        view = build_overview(tmp, workers=1)
        overview_text(view)
        render_overview(view)
        good = sum(1 for line in lines if line.startswith(b'{"time":1'))
        rank = view.rank(0)
        lines_read = 0 if rank is None else rank.lines
        assert lines_read >= good  # odd lines with a numeric time are read too
        assert view.problems.torn_last_lines == ((0,) if torn else ())


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 10**7), st.integers(0, 2**47)), min_size=2, max_size=40
    ).filter(lambda pairs: len({x for x, _ in pairs}) > 1)
)
def test_growth_is_the_least_squares_slope(pairs: list[tuple[int, int]]) -> None:
    """growth_per_1k agrees with statistics.linear_regression (computed exactly on ints)."""
    steps, values = [x for x, _ in pairs], [y for _, y in pairs]
    expected = statistics.linear_regression(steps, values).slope * 1000
    assert growth_per_1k(steps, values) == pytest.approx(expected, rel=1e-6, abs=1e-3)
