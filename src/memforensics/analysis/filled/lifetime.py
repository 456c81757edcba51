"""Lifetimes: every allocation the dump can see, from its ``alloc`` to its free, in trace order.

The snapshot says what is live at its own moment; the trace says what happened before. Pairing
each ``alloc`` with the free at the same address turns the two into one list of allocations,
each with a start and an end in trace positions. Allocations made before recording began show
up too: as frees with no ``alloc`` (start ``-1``), or as live blocks the trace never mentions.
Kinds, the peak, the timeline and the segment layout at a moment all read this one list, so a
million-event trace is walked once.

It also holds the one answer to "did the history record this allocation?"
(:attr:`Allocation.recorded`): its ``alloc`` is in the trace, and the trace records stacks
(:attr:`~memforensics.analysis.dump.Dump.records_stacks`). Such an allocation without frames
was made with no Python on the stack (autograd's backward thread records none with
``stacks="python"``); one the history never recorded has no frames because nothing was
recorded. Every site label reads this (:func:`~memforensics.analysis.dump.frames.attribute`),
so ``summary``, ``diff``, the report and the call tree name a frameless block the same way.

Sizes are block sizes (:func:`~memforensics.analysis.dump.block_size`), the unit of the
snapshot's ``allocated`` figure; the caller's request is kept beside it. An allocation counts
as live from its ``alloc`` until its free is *requested*, as PyTorch's ``allocated_bytes``
counter does: a block freed but still awaiting another stream (``active_pending_free``) is no
longer allocated. So the allocations live at the snapshot are exactly its allocated blocks: a
traced allocation whose free went unrecorded (history switched off meanwhile) and whose block
the snapshot no longer holds counts until the trace's last entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from memforensics.allocator import AllocatorSettings
from memforensics.analysis.dump import (
    ALLOCATED,
    PENDING_FREE,
    Dump,
    Stacks,
    block_size,
    parse_step,
)
from memforensics.analysis.oom import recorded_settings

BEFORE = -1  # start of an allocation made before the trace begins
_FREES = frozenset({"free_requested", "free_completed", "free"})
_SEGMENTS = frozenset({"segment_alloc", "segment_map", "segment_free", "segment_unmap"})
_MAPPINGS = frozenset({"segment_map", "segment_unmap"})


class SegmentEvent(NamedTuple):
    """A ``segment_*`` entry of the trace: ``sign`` +1 when memory was reserved, -1 when
    released; ``mapping`` for an expandable segment's ``segment_map``/``segment_unmap``, which
    grow or shrink a segment rather than make or end one."""

    position: int
    sign: int
    addr: int
    size: int
    mapping: bool = False


class Allocation:
    """One allocation: trace positions of its start and end, its size, frames and step tags.

    ``start`` is ``-1`` when it was made before the trace; ``end`` is the trace length when it
    is still live at the snapshot, else the position of its (requested) free. ``recorded``:
    the history recorded it with its stack (see the module docstring), so empty ``frames`` mean
    no Python was on the stack, not that nothing was recorded. ``size`` is its
    block's size, ``requested`` what the caller asked for. Equal stacks share one ``frames``
    list (:class:`~memforensics.analysis.dump.frames.Stacks`), so whatever is read from a stack
    can be kept by its identity. ``kind``, ``phase`` and ``confidence`` are filled by the
    classifier; ``known``, the block's bytes by kind as the process told them (``(kind,
    bytes)`` pairs adding up to ``size``), by :mod:`~memforensics.analysis.filled.known`.
    """

    __slots__ = (
        "addr",
        "confidence",
        "end",
        "frames",
        "free_step",
        "kind",
        "known",
        "phase",
        "recorded",
        "requested",
        "size",
        "start",
        "step",
    )

    def __init__(
        self, start: int, addr: int, size: int, frames: object, step: int | None, requested: int
    ) -> None:
        self.start = start
        self.end = -1
        self.addr = addr
        self.size = size
        self.requested = requested
        self.frames = frames
        self.step = step
        self.free_step: int | None = None
        self.kind = "unknown"
        self.phase = "none"
        self.confidence = 0.0
        self.known: tuple[tuple[str, int], ...] | None = None
        self.recorded = False

    def live_at(self, moment: int) -> bool:
        """True if allocated at or before trace position ``moment`` and not yet freed after it."""
        return self.start <= moment < self.end


@dataclass
class Lifetimes:
    """All allocations of one dump, and where segments and OOMs appear in its trace."""

    allocations: list[Allocation]
    length: int  # trace length: the snapshot's own moment
    by_event: list[Allocation | None]  # the allocation each trace position starts or ends
    segment_events: list[SegmentEvent] = field(default_factory=list)
    oom_positions: list[int] = field(default_factory=list)
    has_trace: bool = False
    taken_at_oom: bool = False
    """The snapshot was taken at an OOM its sidecar records, whether or not the trace holds
    an ``oom`` entry for it (an allocation that failed outside the caching allocator)."""

    @property
    def live_at_start(self) -> bool:
        """Was any block live when recording started (allocated before the trace begins)?"""
        return any(found.start == BEFORE for found in self.allocations)

    def at_snapshot(self) -> list[Allocation]:
        """Allocations live at the snapshot's moment."""
        return [a for a in self.allocations if a.end >= self.length]

    def recorded_blocks(self) -> frozenset[int]:
        """Addresses of the blocks allocated at the snapshot whose allocation the history
        recorded (:attr:`Allocation.recorded`): what a snapshot block's own frames cannot say."""
        return frozenset(a.addr for a in self.at_snapshot() if a.recorded)

    def reserved_at(self, position: int, reserved_now: int) -> int:
        """Reserved bytes right after trace position ``position``: ``reserved_now`` (the
        snapshot's) with every later ``segment_*`` entry undone."""
        later = sum(e.sign * e.size for e in self.segment_events if e.position > position)
        return reserved_now - later

    def segments_at(self, position: int, segments_now: int) -> int:
        """Segments right after trace position ``position``: ``segments_now`` with every later
        ``segment_alloc``/``segment_free`` undone (mapping pages into an expandable segment
        makes no new segment)."""
        later = sum(e.sign for e in self.segment_events if e.position > position and not e.mapping)
        return segments_now - later


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
    """Pair allocs with frees over ``dump.trace``, then add live blocks the trace never saw.

    Sizes become block sizes once the walk knows which allocations the snapshot still holds.
    """
    trace = dump.trace
    length = len(trace)
    by_event: list[Allocation | None] = [None] * length
    allocations: list[Allocation] = []
    open_: dict[int, Allocation] = {}
    pending: dict[int, Allocation] = {}
    segment_events: list[SegmentEvent] = []
    canonical = Stacks().canonical  # equal stacks share one list: judged once downstream
    for index, action in enumerate(dump.actions):  # read in C once; None: no dict
        if action == "alloc":
            get = trace[index].get
            addr = get("addr")
            if type(addr) is not int:
                addr = 0
            size = get("size")
            meta = get("user_metadata")
            step = None if meta is None else _step(meta)
            size = size if type(size) is int and size > 0 else 0
            found = Allocation(index, addr, size, canonical(get("frames")), step, size)
            stale = open_.pop(addr, None)  # a missed free (ring buffer): end it here
            if stale is not None:
                stale.end = index
            open_[addr] = found
            allocations.append(found)
            by_event[index] = found
        elif type(action) is not str:  # no entry, or a hostile file's action
            continue
        elif action in _FREES:
            get = trace[index].get
            addr = get("addr")
            if type(addr) is not int:
                addr = 0
            freed: Allocation | None = open_.pop(addr, None)
            if freed is None and action == "free_completed" and addr in pending:
                del pending[addr]
                continue  # its free was requested earlier: it stopped being allocated then
            if freed is None:  # made before the trace began: only its free is recorded
                size = get("size")
                size = size if type(size) is int and size > 0 else 0
                freed = Allocation(BEFORE, addr, size, None, None, size)
                allocations.append(freed)
            freed.end = index
            meta = get("user_metadata")
            freed.free_step = None if meta is None else _step(meta)
            by_event[index] = freed
            if action == "free_requested":
                pending[addr] = freed
        elif action in _SEGMENTS:
            get = trace[index].get
            addr, size = get("addr"), get("size")
            sign = 1 if action in ("segment_alloc", "segment_map") else -1
            segment_events.append(
                SegmentEvent(
                    index,
                    sign,
                    addr if type(addr) is int else 0,
                    size if type(size) is int else 0,
                    action in _MAPPINGS,
                )
            )
    ooms = list(dump.oom_positions)
    for found in open_.values():
        found.end = length
    held = _add_untraced_blocks(dump, open_, pending, allocations, length, canonical)
    for found in open_.values():
        if id(found) not in held:  # freed while history was off: gone by the snapshot
            found.end = max(length - 1, found.start)
    _to_block_sizes(allocations, held, recorded_settings(dump))
    if dump.records_stacks:
        for found in allocations:
            found.recorded = found.start != BEFORE
    traced = any(found is not None for found in by_event)
    at_oom = dump.meta.taken_at_oom
    return Lifetimes(allocations, length, by_event, segment_events, ooms, traced, at_oom)


def _to_block_sizes(
    allocations: list[Allocation], held: set[int], settings: AllocatorSettings
) -> None:
    """Count every allocation whose block the snapshot does not hold at its rounded size.

    A trace repeats a few hundred distinct request sizes, so each is rounded once.
    """
    rounded: dict[int, int] = {}
    for found in allocations:
        if id(found) not in held:
            requested = found.requested
            size = rounded.get(requested)
            if size is None:
                size = rounded[requested] = block_size(settings, requested)
            found.size = size


def _add_untraced_blocks(
    dump: Dump,
    open_: dict[int, Allocation],
    pending: dict[int, Allocation],
    allocations: list[Allocation],
    length: int,
    canonical: Callable[[object], object],
) -> set[int]:
    """Give traced allocations still live at the snapshot their block's size; add allocated
    blocks without an ``alloc`` in the trace (made before it), with the block's own frames and
    step tag (recorded even in ``"state"`` mode).

    Blocks awaiting their free are not allocated, but a traced one still gives its allocation
    its size. Returns the ``id`` of every allocation whose size is the snapshot's own block.
    """
    held: set[int] = set()
    for segment in dump.segments:
        for block in segment.blocks:
            if block.state == PENDING_FREE and block.address in pending:
                freed = pending[block.address]
                freed.size = block.size
                held.add(id(freed))
            if block.state != ALLOCATED:
                continue
            found = open_.get(block.address)
            if found is not None:
                found.size = block.size
                held.add(id(found))
                if not found.frames and block.frames:
                    found.frames = canonical(block.frames)
                continue
            extra = Allocation(
                BEFORE,
                block.address,
                block.size,
                canonical(block.frames),
                _step(block.user_metadata),
                block.requested_size,
            )
            extra.end = length
            allocations.append(extra)
            held.add(id(extra))
    return held
