"""``diff`` by kind: live bytes per kind of memory in each dump, and the change.

Each dump is classified on its own (:func:`~memforensics.analysis.filled.what_filled`); the
kinds are compared at each dump's snapshot, the same moment the site rows compare.
"""

from __future__ import annotations

from typing import Any

from memforensics.analysis.dump import Dump
from memforensics.analysis.filled import KINDS, what_filled


def kinds_change(before: Dump, after: Dump) -> list[dict[str, Any]]:
    """Live bytes per kind at each dump's moment, and the change (for ``diff``)."""
    old = {k.kind: k.bytes for k in what_filled(before).kinds}
    new = {k.kind: k.bytes for k in what_filled(after).kinds}
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
