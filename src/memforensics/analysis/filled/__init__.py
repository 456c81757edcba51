"""What filled the device: lifetimes, kinds of memory, the peak and its call tree."""

from memforensics.analysis.filled.gathered import Gathered
from memforensics.analysis.filled.kinds import (
    KINDS,
    KindBytes,
    KindShare,
    block_kinds,
    kind_split,
    main_kind,
)
from memforensics.analysis.filled.known import Known
from memforensics.analysis.filled.lifetime import BEFORE, Allocation, Lifetimes
from memforensics.analysis.filled.peak import (
    OPTIMIZER_TEMPORARIES,
    CallNode,
    Filled,
    KindSite,
    Moment,
    OptimizerTemporaries,
    Unwound,
    kind_sites,
    live_at,
    optimizer_temporaries,
    what_filled,
)
from memforensics.analysis.filled.roles import KV_ALLOCATORS
from memforensics.analysis.filled.text import filled_lines

__all__ = [
    "BEFORE",
    "KINDS",
    "KV_ALLOCATORS",
    "OPTIMIZER_TEMPORARIES",
    "Allocation",
    "CallNode",
    "Filled",
    "Gathered",
    "KindBytes",
    "KindShare",
    "KindSite",
    "Known",
    "Lifetimes",
    "Moment",
    "OptimizerTemporaries",
    "Unwound",
    "block_kinds",
    "filled_lines",
    "kind_sites",
    "kind_split",
    "live_at",
    "main_kind",
    "optimizer_temporaries",
    "what_filled",
]
