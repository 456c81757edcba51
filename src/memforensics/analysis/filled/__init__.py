"""What filled the device: lifetimes, kinds of memory, the peak and its call tree."""

from memforensics.analysis.filled.kinds import KINDS, KindBytes, main_kind
from memforensics.analysis.filled.known import Known
from memforensics.analysis.filled.lifetime import BEFORE, Allocation, Lifetimes
from memforensics.analysis.filled.peak import (
    CallNode,
    Filled,
    KindSite,
    Moment,
    Unwound,
    kind_sites,
    live_at,
    what_filled,
)
from memforensics.analysis.filled.text import filled_lines

__all__ = [
    "BEFORE",
    "KINDS",
    "Allocation",
    "CallNode",
    "Filled",
    "KindBytes",
    "KindSite",
    "Known",
    "Lifetimes",
    "Moment",
    "Unwound",
    "filled_lines",
    "kind_sites",
    "live_at",
    "main_kind",
    "what_filled",
]
