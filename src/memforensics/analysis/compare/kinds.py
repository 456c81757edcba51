"""``diff`` by kind: live bytes per kind of memory in each dump, and the change.

Each dump is classified on its own (:func:`~memforensics.analysis.filled.what_filled`); the
kinds are compared at each dump's snapshot, the same moment the site rows compare.
"""

from __future__ import annotations

from typing import Any

from memforensics.analysis.compare.devices import sides_of
from memforensics.analysis.compare.sides import SideOf
from memforensics.analysis.dump import Dump
from memforensics.analysis.filled import KINDS


def kinds_change(
    before: Dump | SideOf, after: Dump | SideOf, device: int | None = None
) -> list[dict[str, Any]]:
    """Live bytes per kind at each dump's moment (on ``device``, else the whole file), and
    the change (for ``diff``); either side a dump or a function giving its sides."""
    old = sides_of(before)(device).kinds
    new = sides_of(after)(device).kinds
    return [
        {
            "kind": kind,
            "before_bytes": old.get(kind, 0),
            "after_bytes": new.get(kind, 0),
            "delta_bytes": new.get(kind, 0) - old.get(kind, 0),
        }
        for kind in KINDS
        if kind in old or kind in new
    ]
