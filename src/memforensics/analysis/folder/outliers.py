"""Which ranks stand out from the others in a run.

Outliers use the median and the median absolute deviation (MAD), which one bad rank cannot
drag along the way it drags a mean and a standard deviation. For peak reserved bytes and for
reserved growth per 1,000 steps, a rank stands out when

    |value - median| > max(OUTLIER_Z / 0.6745 * MAD, floor)

``OUTLIER_Z`` is 3.5, Iglewicz and Hoaglin's cut for the modified z-score. The floor keeps a
symmetric job, where every healthy rank reports the same bytes and the MAD is 0, from flagging a
one-byte difference: ``max(1 MiB, 5 % of the median peak reserved)`` for peak reserved, and for
growth the slope that would add that many bytes over the steps the ranks cover (so a one-step
dip in a 40-step run is no trend, and 2 MiB a step is). At least three ranks are needed to
speak of "the others".
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memforensics.analysis.folder.ranks import RankFacts

OUTLIER_Z = 3.5
MAD_TO_Z = 0.6745
MIN_FLOOR = 1 << 20
FLOOR_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class Outlier:
    """One rank standing out on one figure."""

    rank: int
    figure: str  # "peak_reserved_bytes" or "reserved_growth_per_1k_steps"
    value: float
    median: float
    threshold: float  # the allowed distance from the median


def find_outliers(ranks: Sequence[RankFacts]) -> list[Outlier]:
    """Ranks far from the others (rule in the module docstring), farthest first."""
    peaks = {
        r.rank: float(r.peak_reserved_bytes) for r in ranks if r.peak_reserved_bytes is not None
    }
    growth = {
        r.rank: r.reserved_growth_per_1k_steps
        for r in ranks
        if r.reserved_growth_per_1k_steps is not None
    }
    if len(peaks) < 3:
        return []
    floor = max(MIN_FLOOR, FLOOR_SHARE * abs(statistics.median(peaks.values())))
    found = _outliers("peak_reserved_bytes", peaks, floor)
    spans = [
        r.last_step - r.first_step
        for r in ranks
        if r.first_step is not None and r.last_step is not None
    ]
    span = max(statistics.median(spans), 1) if spans else 1
    if len(growth) >= 3:
        found += _outliers("reserved_growth_per_1k_steps", growth, floor * 1000 / span)
    found.sort(key=lambda o: (-abs(o.value - o.median) / o.threshold, o.rank))
    return found


def _outliers(figure: str, values: Mapping[int, float], floor: float) -> list[Outlier]:
    median = statistics.median(values.values())
    mad = statistics.median(abs(v - median) for v in values.values())
    threshold = max(OUTLIER_Z / MAD_TO_Z * mad, floor)
    return [
        Outlier(rank, figure, value, median, threshold)
        for rank, value in values.items()
        if abs(value - median) > threshold
    ]
