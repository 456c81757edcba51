"""``diff`` by kind: live bytes per kind of memory in each dump, and the change.

Each dump is classified on its own (:func:`~memforensics.analysis.filled.what_filled`); the
kinds are compared at each dump's snapshot, the same moment the site rows compare.
"""

from __future__ import annotations

from typing import Any

from memforensics.analysis.compare.sides import DumpSides
from memforensics.analysis.dump import Dump
from memforensics.analysis.filled import KINDS


def kinds_change(
    before: Dump | DumpSides, after: Dump | DumpSides, device: int | None = None
) -> list[dict[str, Any]]:
    """Live bytes per kind at each dump's moment (on ``device``, else the whole file), and
    the change (for ``diff``)."""
    old = (before if isinstance(before, DumpSides) else DumpSides.of(before)).kinds(device)
    new = (after if isinstance(after, DumpSides) else DumpSides.of(after)).kinds(device)
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
