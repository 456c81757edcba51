"""A dump's trace decoded once into the plain tuples every replay run feeds the model.

The self-check and each what-if row walk the same trace; reading a million dicts with
``dict.get`` in every run costs more than the model itself. :func:`decode` reads each entry
once and keeps what a run looks at, with the checks the runs make (an ``int`` address, an
``int`` size, the stream an ``int`` else 0) already applied, so every run decides exactly as
if it had read the dicts itself.
"""

from __future__ import annotations

from memforensics.analysis.oom import SEGMENT_ACTIONS

SEGMENT, ALLOC, FREE_REQUESTED, FREE, FREE_COMPLETED, OOM, OTHER = range(7)
"""Event codes: a recorded segment event, the request actions, and any other dict entry (it
still marks where an ``empty_cache()`` may have happened)."""
REQUESTS = (ALLOC, OOM)
"""Codes of the entries that ask for memory."""

_CODES = {
    "alloc": ALLOC,
    "free_requested": FREE_REQUESTED,
    "free": FREE,
    "free_completed": FREE_COMPLETED,
    "oom": OOM,
}
Event = tuple[int, int | None, int | None, int, int, object]
"""``(code, addr, size, stream, position, extra)``: ``addr`` and ``size`` the entry's when they
are ``int`` (else None), ``stream`` the entry's when ``int`` (else 0), ``position`` the index
in the trace; ``extra`` the action name of a segment event, and for ``free_requested`` whether
the next entry completes that free (no other stream held the block)."""


def decode(trace: list[object]) -> list[Event]:
    """The trace's dict entries as :data:`Event` tuples, in order.

    Entries that are not dicts, and segment events without an ``int`` address and size, are
    left out: a run skips them without looking further.
    """
    events: list[Event] = []
    append = events.append
    count = len(trace)
    for position, entry in enumerate(trace):
        if type(entry) is not dict:
            continue
        action = entry.get("action")
        addr, size = entry.get("addr"), entry.get("size")
        if type(addr) is not int:
            addr = None
        if type(size) is not int:
            size = None
        if action in SEGMENT_ACTIONS:
            if addr is not None and size is not None:
                append((SEGMENT, addr, size, 0, position, action))
            continue
        stream = entry.get("stream")
        if type(stream) is not int:
            stream = 0
        code = _CODES.get(action, OTHER) if isinstance(action, str) else OTHER
        extra: object = None
        if code == FREE_REQUESTED and addr is not None:
            extra = _completes(trace, position + 1, count, addr)
        append((code, addr, size, stream, position, extra))
    return events


def _completes(trace: list[object], position: int, count: int, addr: int) -> bool:
    """True when the entry at ``position`` completes the free of ``addr`` (False past the end:
    the snapshot was taken before the free completed)."""
    if position >= count:
        return False
    entry = trace[position]
    return (
        type(entry) is dict
        and entry.get("action") == "free_completed"
        and entry.get("addr") == addr
    )
