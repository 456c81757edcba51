"""The kinds table as a person reads it: the kind holding most comes first."""

from __future__ import annotations

from memforensics.analysis.filled.kinds import KindBytes
from memforensics.analysis.filled.text import kinds_lines


def test_rows_run_biggest_first_ties_in_kinds_order() -> None:
    """Rows are sorted by bytes, biggest first; two kinds of equal bytes keep KINDS order."""
    kinds = (
        KindBytes("parameter", 10, 1, 0.9),
        KindBytes("gradient", 10, 1, 0.9),
        KindBytes("activation", 300, 3, 0.6),
        KindBytes("temporary", 20, 2, 0.9),
    )
    rows = kinds_lines(kinds, "at the peak")[3:]
    assert [row.split()[0] for row in rows] == ["activation", "temporary", "parameter", "gradient"]
