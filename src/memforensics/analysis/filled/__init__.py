"""What filled the device: lifetimes, kinds of memory, the peak and its call tree."""

from memforensics.analysis.filled.kinds import KINDS, KindBytes, classify
from memforensics.analysis.filled.lifetime import BEFORE, Allocation, Lifetimes, lifetimes
from memforensics.analysis.filled.peak import CallNode, Filled, Moment, live_at, what_filled
from memforensics.analysis.filled.text import filled_lines, tree_lines

__all__ = [
    "BEFORE",
    "KINDS",
    "Allocation",
    "CallNode",
    "Filled",
    "KindBytes",
    "Lifetimes",
    "Moment",
    "classify",
    "filled_lines",
    "lifetimes",
    "live_at",
    "tree_lines",
    "what_filled",
]
