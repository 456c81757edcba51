"""The allocator at the OOM: the history undone to that moment, the lower bound, the verdict."""

from memforensics.analysis.oom.bound import CAPACITY, LowerBound, lower_bound
from memforensics.analysis.oom.history import (
    SEGMENT_ACTIONS,
    AllocatorState,
    LiveBlock,
    SegmentState,
    changes_after,
    has_history,
    state_before,
)
from memforensics.analysis.oom.moment import (
    TRACE,
    OomMoment,
    ServeRoute,
    judged_moment_warning,
    oom_moment,
    recorded_rules,
    recorded_settings,
    seed_state,
    settings_notes,
    settings_read,
)
from memforensics.analysis.oom.risk import AtRisk, at_risk
from memforensics.analysis.oom.text import (
    at_risk_headline,
    at_risk_lines,
    fragmentation_text,
    headroom_text,
)
from memforensics.analysis.oom.verdict import (
    DEVICE_FREE_UNKNOWN,
    Verdict,
    device_free_text,
    judge,
    needed_text,
    outside_text,
    replayable,
    verdict_at_oom,
)

__all__ = [
    "CAPACITY",
    "DEVICE_FREE_UNKNOWN",
    "SEGMENT_ACTIONS",
    "TRACE",
    "AllocatorState",
    "AtRisk",
    "LiveBlock",
    "LowerBound",
    "OomMoment",
    "SegmentState",
    "ServeRoute",
    "Verdict",
    "at_risk",
    "at_risk_headline",
    "at_risk_lines",
    "changes_after",
    "device_free_text",
    "fragmentation_text",
    "has_history",
    "headroom_text",
    "judge",
    "judged_moment_warning",
    "lower_bound",
    "needed_text",
    "oom_moment",
    "outside_text",
    "recorded_rules",
    "recorded_settings",
    "replayable",
    "seed_state",
    "settings_notes",
    "settings_read",
    "state_before",
    "verdict_at_oom",
]
