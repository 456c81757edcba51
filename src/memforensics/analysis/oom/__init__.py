"""The allocator at the OOM: the history undone to that moment, the lower bound, the verdict."""

from memforensics.analysis.oom.bound import LowerBound, lower_bound, peak_live_bytes
from memforensics.analysis.oom.history import (
    SEGMENT_ACTIONS,
    changes_after,
    has_history,
    oom_positions,
    state_before,
)
from memforensics.analysis.oom.moment import OomMoment, oom_moment, recorded_settings
from memforensics.analysis.oom.risk import AtRisk, at_risk
from memforensics.analysis.oom.state import AllocatorState, LiveBlock, SegmentState
from memforensics.analysis.oom.text import (
    at_risk_headline,
    at_risk_lines,
    fragmentation_text,
    headroom_text,
)
from memforensics.analysis.oom.verdict import (
    EXHAUSTED,
    EXTERNAL,
    FRAGMENTATION,
    NO_OOM,
    UNKNOWN,
    Verdict,
    judge,
    verdict_at_oom,
)

__all__ = [
    "EXHAUSTED",
    "EXTERNAL",
    "FRAGMENTATION",
    "NO_OOM",
    "SEGMENT_ACTIONS",
    "UNKNOWN",
    "AllocatorState",
    "AtRisk",
    "LiveBlock",
    "LowerBound",
    "OomMoment",
    "SegmentState",
    "Verdict",
    "at_risk",
    "at_risk_headline",
    "at_risk_lines",
    "changes_after",
    "fragmentation_text",
    "has_history",
    "headroom_text",
    "judge",
    "lower_bound",
    "oom_moment",
    "oom_positions",
    "peak_live_bytes",
    "recorded_settings",
    "state_before",
    "verdict_at_oom",
]
