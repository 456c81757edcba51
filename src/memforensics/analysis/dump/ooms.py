"""Where a trace records OOMs: the positions of its ``oom`` entries, found once per dump.

Several readers ask where the trace's (last) OOM is: the device choice, the OOM's moment, the
summary's OOM record. On a million-entry trace without an OOM each backwards walk in Python
visits every entry; reading the actions in C and searching them there costs a tenth of one.
"""

from __future__ import annotations

from itertools import repeat
from typing import Any


def trace_actions(trace: list[Any]) -> list[object]:
    """Each entry's ``action`` (None for an entry that is no dict), read in C when it can be."""
    try:
        return list(map(dict.get, trace, repeat("action")))
    except TypeError:  # an entry that is no dict: the careful pass
        return [entry.get("action") if type(entry) is dict else None for entry in trace]


def oom_positions(trace: list[Any], actions: list[object] | None = None) -> tuple[int, ...]:
    """Indices of the trace's ``oom`` entries, oldest first (``actions``: the trace's, when
    already read)."""
    if actions is None:
        actions = trace_actions(trace)
    found: list[int] = []
    start = 0
    while True:
        try:
            index = actions.index("oom", start)
        except ValueError:
            return tuple(found)
        found.append(index)
        start = index + 1
