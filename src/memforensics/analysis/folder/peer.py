"""How the failing rank differs from a healthy peer at the same step, figure by figure.

Both ranks are read at one journal line each, at the same step, so the difference is what the
failing rank held that a rank doing the same work did not: bytes allocated or reserved, retries,
memory outside PyTorch.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memforensics.analysis.folder.journals import MISSING, ProcessJournal
from memforensics.analysis.folder.ranks import Failure, RankFacts

COMPARED = (
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "alloc_retries",
    "external_bytes",
    "device_free_bytes",
)


@dataclass(frozen=True, slots=True)
class PeerComparison:
    """The failing rank against the healthiest peer, line against line at one step."""

    rank: int
    peer: int
    step: int
    peer_step: int
    failing: dict[str, int | None]
    healthy: dict[str, int | None]
    differences: dict[str, int | None]
    """failing - healthy, per figure (None where either is unknown)."""


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
    healthy = best[3]
    return PeerComparison(
        rank=failure.rank,
        peer=best[1],
        step=at_step,
        peer_step=best[2],
        failing=failing_figures,
        healthy=healthy,
        differences=_differences(failing_figures, healthy),
    )


def _differences(
    failing: Mapping[str, int | None], healthy: Mapping[str, int | None]
) -> dict[str, int | None]:
    """failing - healthy, per figure (None where either is unknown)."""
    found: dict[str, int | None] = {}
    for key in COMPARED:
        mine, theirs = failing[key], healthy[key]
        found[key] = None if mine is None or theirs is None else mine - theirs
    return found


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
