"""What filled the device: lifetimes, kinds of memory, the peak and its call tree."""

from memforensics.analysis.filled.kinds import KINDS, KindBytes, classify
from memforensics.analysis.filled.lifetimes import BEFORE, Allocation, Lifetimes, lifetimes
from memforensics.analysis.filled.peak import CallNode, Moment, live_at
from memforensics.analysis.filled.text import filled_lines, tree_lines
from memforensics.analysis.filled.what_filled import Filled, what_filled

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
