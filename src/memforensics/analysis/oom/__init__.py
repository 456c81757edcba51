"""The allocator at the OOM: the history undone to that moment, the lower bound, the verdict."""

from memforensics.analysis.dump.ooms import oom_positions
from memforensics.analysis.oom.bound import (
    CAPACITY,
    LIMIT,
    LowerBound,
    lower_bound,
    peak_live_bytes,
)
from memforensics.analysis.oom.history import (
    SEGMENT_ACTIONS,
    changes_after,
    has_history,
    state_before,
)
from memforensics.analysis.oom.moment import (
    FINAL,
    TRACE,
    OomMoment,
    judged_moment_warning,
    oom_moment,
    recorded_rules,
    recorded_settings,
    settings_notes,
    settings_read,
)
from memforensics.analysis.oom.risk import AtRisk, at_risk
from memforensics.analysis.oom.serve import could_serve, seed_state
from memforensics.analysis.oom.state import AllocatorState, LiveBlock, SegmentState
from memforensics.analysis.oom.text import (
    at_risk_headline,
    at_risk_lines,
    fragmentation_text,
    headroom_text,
)
from memforensics.analysis.oom.verdict import (
    COULD_SERVE,
    DEVICE_FREE_UNKNOWN,
    EXHAUSTED,
    EXTERNAL,
    FRAGMENTATION,
    NO_OOM,
    UNKNOWN,
    Verdict,
    device_free_text,
    judge,
    verdict_at_oom,
)

__all__ = [
    "CAPACITY",
    "COULD_SERVE",
    "DEVICE_FREE_UNKNOWN",
    "EXHAUSTED",
    "EXTERNAL",
    "FINAL",
    "FRAGMENTATION",
    "LIMIT",
    "NO_OOM",
    "SEGMENT_ACTIONS",
    "TRACE",
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
    "could_serve",
    "device_free_text",
    "fragmentation_text",
    "has_history",
    "headroom_text",
    "judge",
    "judged_moment_warning",
    "lower_bound",
    "oom_moment",
    "oom_positions",
    "peak_live_bytes",
    "recorded_rules",
    "recorded_settings",
    "seed_state",
    "settings_notes",
    "settings_read",
    "state_before",
    "verdict_at_oom",
]
