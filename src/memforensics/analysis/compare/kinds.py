"""``diff`` by kind: live bytes per kind of memory in each dump, and the change.

Each dump is classified on its own (:func:`~memforensics.analysis.filled.what_filled`); the
kinds are compared at each dump's snapshot, the same moment the site rows compare.
"""

from __future__ import annotations

from dataclasses import dataclass

from memforensics.analysis.compare.sides import DiffSide
from memforensics.analysis.filled import KINDS


@dataclass(frozen=True, slots=True)
class KindChange:
    """Live bytes of one kind of memory in both dumps, and the change."""

    kind: str
    before_bytes: int
    after_bytes: int
    delta_bytes: int


def kinds_change(before: DiffSide, after: DiffSide) -> tuple[KindChange, ...]:
    """Live bytes per kind at each side's moment, and the change (for ``diff``), in the
    kinds' order; kinds neither side holds are left out."""
    old, new = before.kinds, after.kinds
    return tuple(
        KindChange(kind, old.get(kind, 0), new.get(kind, 0), new.get(kind, 0) - old.get(kind, 0))
        for kind in KINDS
        if kind in old or kind in new
    )
