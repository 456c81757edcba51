"""Lifetimes: every allocation the dump can see, from its ``alloc`` to its free, in trace order.

The snapshot says what is live at its own moment; the trace says what happened before. Pairing
each ``alloc`` with the free at the same address turns the two into one list of allocations,
each with a start and an end in trace positions. Allocations made before recording began show
up too: as frees with no ``alloc`` (start ``-1``), or as live blocks the trace never mentions.
Kinds, the peak, the timeline and the segment layout at a moment all read this one list, so a
million-event trace is walked once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memforensics.analysis.dump import ALLOCATED, PENDING_FREE, Dump, parse_step

BEFORE = -1  # start of an allocation made before the trace begins
_FREES = frozenset({"free_requested", "free_completed", "free"})
_SEGMENTS = frozenset({"segment_alloc", "segment_map", "segment_free", "segment_unmap"})


class Allocation:
    """One allocation: trace positions of its start and end, its size, frames and step tags.

    ``start`` is ``-1`` when it was made before the trace; ``end`` is the trace length when it
    is still live at the snapshot. ``kind`` and ``confidence`` are filled by the classifier.
    """

    __slots__ = (
        "addr",
        "confidence",
        "end",
        "frames",
        "free_step",
        "kind",
        "size",
        "start",
        "step",
    )

    def __init__(self, start: int, addr: int, size: int, frames: object, step: int | None) -> None:
        self.start = start
        self.end = -1
        self.addr = addr
        self.size = size
        self.frames = frames
        self.step = step
        self.free_step: int | None = None
        self.kind = "unknown"
        self.confidence = 0.0

    def live_at(self, moment: int) -> bool:
        """True if allocated at or before trace position ``moment`` and not yet freed after it."""
        return self.start <= moment < self.end


@dataclass
class Lifetimes:
    """All allocations of one dump, and where segments and OOMs appear in its trace."""

    allocations: list[Allocation]
    length: int  # trace length: the snapshot's own moment
    by_event: list[Allocation | None]  # the allocation each trace position starts or ends
    segment_events: list[tuple[int, int, int, int]] = field(default_factory=list)
    oom_positions: list[int] = field(default_factory=list)
    has_trace: bool = False

    def at_snapshot(self) -> list[Allocation]:
        """Allocations live at the snapshot's moment."""
        return [a for a in self.allocations if a.end >= self.length]


_step_cache: dict[str, int | None] = {}


def _step(metadata: object) -> int | None:
    if type(metadata) is not str:
        return None
    found = _step_cache.get(metadata, -(1 << 62))
    if found == -(1 << 62):
        found = parse_step(metadata)
        if len(_step_cache) < 10_000:
            _step_cache[metadata] = found
    return found


def lifetimes(dump: Dump) -> Lifetimes:  # noqa: PLR0912, PLR0915 - one hot loop over the trace
    """Pair allocs with frees over ``dump.trace``, then add live blocks the trace never saw."""
    trace = dump.trace
    length = len(trace)
    by_event: list[Allocation | None] = [None] * length
    allocations: list[Allocation] = []
    open_: dict[int, Allocation] = {}
    pending: dict[int, Allocation] = {}
    segment_events: list[tuple[int, int, int, int]] = []
    ooms: list[int] = []
    for index, entry in enumerate(trace):
        if type(entry) is not dict:
            continue
        get = entry.get
        action = get("action")
        if type(action) is not str:  # a hostile file may put anything here
            continue
        addr = get("addr")
        if type(addr) is not int:
            addr = 0
        if action == "alloc":
            size = get("size")
            meta = get("user_metadata")
            step = None if meta is None else _step(meta)
            found = Allocation(
                index, addr, size if type(size) is int and size > 0 else 0, get("frames"), step
            )
            stale = open_.pop(addr, None)  # a missed free (ring buffer): end it here
            if stale is not None:
                stale.end = index
            open_[addr] = found
            allocations.append(found)
            by_event[index] = found
        elif action in _FREES:
            freed: Allocation | None = open_.pop(addr, None)
            if freed is None and action != "free_requested":
                freed = pending.pop(addr, None)
            if freed is None:  # made before the trace began: only its free is recorded
                size = get("size")
                freed = Allocation(BEFORE, addr, size if type(size) is int else 0, None, None)
                allocations.append(freed)
            found = freed
            if found.end < 0 or action != "free_requested":
                if found.end >= 0 and by_event[found.end] is found:
                    by_event[found.end] = None  # the completed free supersedes the request
                found.end = index
                meta = get("user_metadata")
                found.free_step = None if meta is None else _step(meta)
                by_event[index] = found
            if action == "free_requested":
                pending[addr] = found
        elif action in _SEGMENTS:
            size = get("size")
            sign = 1 if action in ("segment_alloc", "segment_map") else -1
            segment_events.append((index, sign, addr, size if type(size) is int else 0))
        elif action == "oom":
            ooms.append(index)
    for found in open_.values():
        found.end = length
    _add_untraced_blocks(dump, open_, allocations, length)
    traced = any(found is not None for found in by_event)
    return Lifetimes(allocations, length, by_event, segment_events, ooms, traced)


def _add_untraced_blocks(
    dump: Dump, open_: dict[int, Allocation], allocations: list[Allocation], length: int
) -> None:
    """Live blocks without an ``alloc`` in the trace were made before it: add them from the
    snapshot, with the block's own frames and step tag (recorded even in ``"state"`` mode)."""
    for segment in dump.segments:
        for block in segment.blocks:
            if block.state not in (ALLOCATED, PENDING_FREE):
                continue
            found = open_.get(block.address)
            if found is not None:
                if not found.frames and block.frames:
                    found.frames = block.frames
                continue
            extra = Allocation(
                BEFORE, block.address, block.size, block.frames, _step(block.user_metadata)
            )
            extra.end = length
            allocations.append(extra)
