"""The two judgements ``overview`` makes: which ranks stand out, and how the failing rank
differs from a healthy peer at the same step.

**Outliers** use the median and the median absolute deviation (MAD), which one bad rank cannot
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
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memforensics.analysis.folder.journals import MISSING, ProcessJournal

if TYPE_CHECKING:
    from memforensics.analysis.folder.overview import Failure, RankFacts

OUTLIER_Z = 3.5
MAD_TO_Z = 0.6745
MIN_FLOOR = 1 << 20
FLOOR_SHARE = 0.05
COMPARED = (
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "alloc_retries",
    "external_bytes",
    "device_free_bytes",
)


@dataclass(frozen=True, slots=True)
class Outlier:
    """One rank standing out on one figure."""

    rank: int
    figure: str  # "peak_reserved_bytes" or "reserved_growth_per_1k_steps"
    value: float
    median: float
    threshold: float  # the allowed distance from the median

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "rank": self.rank,
            "figure": self.figure,
            "value": self.value,
            "median": self.median,
            "threshold": self.threshold,
        }


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


@dataclass(frozen=True, slots=True)
class PeerComparison:
    """The failing rank against the healthiest peer, line against line at one step."""

    rank: int
    peer: int
    step: int
    peer_step: int
    failing: dict[str, int | None]
    healthy: dict[str, int | None]

    @property
    def differences(self) -> dict[str, int | None]:
        """failing - healthy, per figure (None where either is unknown)."""
        return {
            key: None
            if self.failing[key] is None or self.healthy[key] is None
            else self.failing[key] - self.healthy[key]  # type: ignore[operator]
            for key in COMPARED
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "rank": self.rank,
            "peer": self.peer,
            "step": self.step,
            "peer_step": self.peer_step,
            "failing": self.failing,
            "healthy": self.healthy,
            "differences": self.differences,
        }


def compare_with_peer(
    failure: Failure,
    journals: Mapping[int, list[ProcessJournal]],
    ranks: Sequence[RankFacts],
    outliers: set[int],
) -> PeerComparison | None:
    """Compare at the failing rank's last journal line at or before its OOM step.

    That line, not the OOM line, because every rank writes one at the same steps (the journal
    is aligned to multiples of ``journal_every``) while the OOM line is the failing rank's
    alone. The healthiest peer is the rank that never ran out of memory, is no outlier, and
    had the least reserved at that step (ties: the lowest rank).
    """
    own = journals.get(failure.rank)
    if not own:
        return None
    step = failure.step if failure.step is not None else _last_step(own[-1])
    failing = _line_at(own, step, skip_oom=True) if step is not None else None
    if failing is None:
        return None
    at_step, failing_figures = failing
    best: tuple[int, int, int, dict[str, int | None]] | None = None
    for facts in ranks:
        if facts.failure is not None or facts.rank in outliers or facts.rank == failure.rank:
            continue
        line = _line_at(journals.get(facts.rank, []), at_step, skip_oom=True)
        if line is None:
            continue
        reserved = line[1]["reserved_bytes"]
        key = (reserved if reserved is not None else 1 << 62, facts.rank)
        if best is None or key < best[:2]:
            best = (key[0], key[1], line[0], line[1])
    if best is None:
        return None
    return PeerComparison(failure.rank, best[1], at_step, best[2], failing_figures, best[3])


def _last_step(journal: ProcessJournal) -> int | None:
    steps = [s for s in journal.steps if s != MISSING]
    return steps[-1] if steps else None


def _line_at(
    journals: Sequence[ProcessJournal], step: int, *, skip_oom: bool
) -> tuple[int, dict[str, int | None]] | None:
    """The newest line with a step at or before ``step`` (newest process first)."""
    for journal in reversed(journals):
        index = bisect_right(journal.steps, step) - 1  # steps never decrease within a process
        while index >= 0 and skip_oom and journal.events[index] == "o":
            index -= 1
        if index >= 0 and journal.steps[index] != MISSING:
            figures = {
                key: None if journal.columns[key][index] == MISSING else journal.columns[key][index]
                for key in COMPARED
            }
            return journal.steps[index], figures
    return None
