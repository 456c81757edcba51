"""The verdict at the OOM for ``summary``: the state at the OOM, the lower bound, the verdict.

Kept apart from ``_summary`` so the summary only asks one question here; everything costs one
pass over the trace at most.
"""

from __future__ import annotations

from memforensics.analysis.dump.load import Dump
from memforensics.analysis.dump.model import ALLOCATED, PENDING_FREE
from memforensics.analysis.oom.bound import _least, peak_live_bytes
from memforensics.analysis.oom.moment import FINAL, OomMoment, oom_moment
from memforensics.analysis.oom.verdict import (
    LowerBound,
    Verdict,
    judge,
    no_oom,
    unknown_no_evidence,
)

_NOT_HISTORY = ("snapshot", "user_defined")  # a tuple: a hostile action may be unhashable


def has_history(dump: Dump) -> bool:
    """True when the trace records allocator events (not only ``snapshot`` markers)."""
    return any(type(e) is dict and e.get("action") not in _NOT_HISTORY for e in dump.trace)


def lower_bound(dump: Dump, moment: OomMoment) -> LowerBound | None:
    """Most bytes ever live at once (least rounding) plus the external memory at the OOM.

    The peak runs over the recorded trace up to the OOM, the failed request included; without
    history, over the live blocks at the OOM plus the request. None without a known limit.
    """
    external = moment.external_bytes
    if moment.limit_bytes is None or external is None:
        return None
    peak = 0
    if moment.source == FINAL or moment.index is None:
        live = sum(
            _least(block.requested_size)
            for segment in dump.segments
            for block in segment.blocks
            if block.state in (ALLOCATED, PENDING_FREE)
        )
        peak = live + (_least(moment.requested_bytes) if moment.requested_bytes else 0)
    if moment.index is not None and has_history(dump):
        found = peak_live_bytes(dump, until=moment.index)
        if found is not None:
            peak = max(peak, found[0])
    return LowerBound(peak, external, moment.limit_bytes)


def verdict_at_oom(
    dump: Dump,
    *,
    requested: int | None,
    top_sites: list[tuple[str, int]],
    expandable: bool,
) -> tuple[Verdict, OomMoment | None, LowerBound | None]:
    """The summary's verdict, the state it was judged on, and the lower bound behind it."""
    moment = oom_moment(dump, requested=requested)
    if moment is None:
        if not dump.meta.has_sidecar and not has_history(dump):
            return unknown_no_evidence(), None, None
        return no_oom(), None, None
    bound = lower_bound(dump, moment)
    verdict = judge(moment, bound=bound, top_sites=top_sites, expandable=expandable)
    return verdict, moment, bound
