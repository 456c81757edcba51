"""The allocator's state at any point of the trace: the final segments with later events undone.

A snapshot holds the *final* layout and the trace of what led there. Walking the trace backwards
from the final layout undoes each event: an ``alloc`` makes its block free again, a
``free_completed`` makes it live, a ``segment_alloc`` removes the segment, a ``segment_free``
brings it back. What that cannot recover is the exact size of a block that was freed and merged
away: it is its request rounded as the allocator rounds, plus a tail too small to have been
split off (at most 1 MiB in the large pool), up to the next block it bordered. That border is
the next live block or the segment's end, or closer: the lowest address the trace allocates
inside that gap while the block is still held. An allocation takes the front of a free block,
so the byte before it belonged to a live block, and with no other block in between that byte
was the old block's (its free event gives only the request, never the block). Every event
that contradicts the state it is undone against (a free of a block that is not live, a segment
released twice) is counted: a trace that does not fit its own snapshot is not history the
replay can trust.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

from memforensics.allocator import (
    K_MIN_BLOCK_SIZE,
    K_SMALL_BUFFER,
    K_SMALL_SIZE,
    NO_LIMIT,
    AllocatorSettings,
)
from memforensics.analysis.dump import ALLOCATED, PENDING_FREE, Dump, as_int, block_size

# The allocator's state at one point of the trace: segments with the blocks live inside them.
#
# :mod:`~memforensics.analysis.oom.history` builds it by undoing the trace; the OOM moment, the
# replay's start layout and the blame read it.


@dataclass(slots=True)
class LiveBlock:
    """A block held by the program (or freed and waiting for its streams) at that point."""

    address: int
    requested: int
    size: int | None  # None: not known exactly (guessed from the request when placed)
    pending: bool
    stream: int


Held = tuple[int, "int | None", bool, int]
"""A live block while the trace is undone: requested bytes, size if known, pending, stream."""


@dataclass(slots=True)
class SegmentState:
    """One segment (an expandable segment: one mapped range) and the live blocks inside."""

    address: int
    size: int
    stream: int
    is_small: bool
    expandable: bool
    blocks: list[LiveBlock] = field(default_factory=list)

    @property
    def end(self) -> int:
        """First address past the segment."""
        return self.address + self.size


@dataclass(frozen=True)
class AllocatorState:
    """Segments with their live blocks, by address; ``problems`` the contradictions met."""

    segments: tuple[SegmentState, ...]
    problems: tuple[str, ...]
    problem_count: int

    @property
    def reserved(self) -> int:
        """Bytes in segments."""
        return sum(segment.size for segment in self.segments)

    @property
    def allocated(self) -> int:
        """Bytes in live blocks (sizes as placed)."""
        return sum(block.size or 0 for seg in self.segments for block in seg.blocks)

    @property
    def live_blocks(self) -> int:
        """Number of live blocks."""
        return sum(len(segment.blocks) for segment in self.segments)

    def free_runs(self) -> list[tuple[SegmentState, int, int]]:
        """Every free run ``(segment, address, size)``: adjacent free blocks always merge,
        so a gap between live blocks is one free block."""
        runs: list[tuple[SegmentState, int, int]] = []
        for segment in self.segments:
            cursor = segment.address
            for block in segment.blocks:
                if block.address > cursor:
                    runs.append((segment, cursor, block.address - cursor))
                cursor = max(cursor, block.address + (block.size or 0))
            if segment.end > cursor:
                runs.append((segment, cursor, segment.end - cursor))
        return runs


SEGMENT_ACTIONS = ("segment_alloc", "segment_free", "segment_map", "segment_unmap")
"""A tuple, not a set: a hostile trace's ``action`` may be unhashable."""
_MAX_PROBLEMS = 5
_NOT_HISTORY = ("snapshot", "user_defined")  # a tuple: a hostile action may be unhashable


class _Problems:
    """Counts contradictions, keeping the first few messages."""

    def __init__(self) -> None:
        self.count = 0
        self.messages: list[str] = []

    def add(self, message: str) -> None:
        self.count += 1
        if len(self.messages) < _MAX_PROBLEMS:
            self.messages.append(message)


def has_history(dump: Dump) -> bool:
    """True when the trace records allocator events (not only ``snapshot`` markers)."""
    return any(type(e) is dict and e.get("action") not in _NOT_HISTORY for e in dump.trace)


def state_before(dump: Dump, index: int, settings: AllocatorSettings) -> AllocatorState:
    """The allocator state just before trace event ``index`` (0: the start of recording)."""
    segments: dict[int, list[int | bool]] = {}  # address -> [size, stream, is_small, expandable]
    live: dict[int, Held] = {}
    for segment in dump.segments:
        segments[segment.address] = [
            segment.total_size,
            segment.stream or 0,
            segment.segment_type == "small",
            segment.is_expandable,
        ]
        for block in segment.blocks:
            if block.state in (ALLOCATED, PENDING_FREE):
                pending = block.state == PENDING_FREE
                live[block.address] = (
                    block.requested_size,
                    block.size,
                    pending,
                    segment.stream or 0,
                )
    problems = _Problems()
    trace = dump.trace
    for position in range(len(trace) - 1, max(index, 0) - 1, -1):
        entry = trace[position]
        if type(entry) is not dict:
            continue
        address, size = entry.get("addr"), entry.get("size")
        if type(address) is not int or type(size) is not int:
            continue
        action = entry.get("action")
        if action == "alloc":  # the hot cases first: one dict operation each
            if live.pop(address, None) is None:
                problems.add(f"event {position}: alloc at {address:#x}, not live after it")
        elif action == "free_completed" or action == "free_requested" or action == "free":  # noqa: PLR1714  # chained == is faster here than a tuple test
            held = live.get(address)
            if held is not None and not held[2] and action != "free":
                problems.add(f"event {position}: {action} at {address:#x}, still live after it")
            stream = entry.get("stream")
            live[address] = (
                size,
                None,
                action == "free_completed",
                stream if type(stream) is int else 0,
            )
        elif action in SEGMENT_ACTIONS:
            _undo_segment(entry, action, address, size, position, segments, problems)
    unknown = any(held[1] is None for held in live.values())
    borders = _Borders(trace, max(index, 0)) if unknown else None
    return _assemble(segments, live, problems, settings, borders)


class _Borders:
    """Where a block live at a position ended, as the allocations made while it was held show.

    Reads the trace from the position on: the first allocation at each address and the first
    free of each block. A block freed at ``p`` ended at or before any address allocated before
    ``p`` above it; with no live block in between, exactly at the lowest such address.
    """

    def __init__(self, trace: list[object], index: int) -> None:
        first_alloc: dict[int, int] = {}
        self.first_free: dict[int, int] = {}
        for position in range(index, len(trace)):
            entry = trace[position]
            if type(entry) is not dict:
                continue
            address, action = entry.get("addr"), entry.get("action")
            if type(address) is not int:
                continue
            if action == "alloc":
                first_alloc.setdefault(address, position)
            elif action in ("free_requested", "free_completed", "free"):
                self.first_free.setdefault(address, position)
        self.addresses = sorted(first_alloc)
        self.positions = [first_alloc[address] for address in self.addresses]

    def end(self, address: int, boundary: int) -> int:
        """The lowest address in ``(address, boundary)`` allocated while the block at
        ``address`` was held (before its first free), else ``boundary``."""
        freed = self.first_free.get(address)
        if freed is None:
            return boundary
        i = bisect_right(self.addresses, address)
        while i < len(self.addresses) and self.addresses[i] < boundary:
            if self.positions[i] < freed:
                return self.addresses[i]
            i += 1
        return boundary


def _undo_segment(
    entry: dict[str, object],
    action: object,
    address: int,
    size: int,
    position: int,
    segments: dict[int, list[int | bool]],
    problems: _Problems,
) -> None:
    """Undo one segment event against the state after it."""
    stream = as_int(entry.get("stream")) or 0
    if action == "segment_alloc":
        if segments.pop(address, None) is None:
            problems.add(f"event {position}: segment_alloc at {address:#x} not in the state")
    elif action == "segment_free":
        if address in segments:
            problems.add(f"event {position}: segment_free at {address:#x}, still reserved")
        segments[address] = [size, stream, size == K_SMALL_BUFFER, False]
    elif action == "segment_map":
        _unmap_range(segments, address, size, position, problems)
    elif action == "segment_unmap":
        _map_range(segments, address, size, stream)


def _unmap_range(
    segments: dict[int, list[int | bool]], address: int, size: int, position: int, p: _Problems
) -> None:
    """Undo a ``segment_map``: cut ``[address, address + size)`` out of its mapped range."""
    for start, fields in segments.items():
        length = int(fields[0])
        if start <= address and address + size <= start + length and fields[3]:
            del segments[start]
            if address > start:
                segments[start] = [address - start, *fields[1:]]
            if address + size < start + length:
                segments[address + size] = [start + length - address - size, *fields[1:]]
            return
    p.add(f"event {position}: segment_map at {address:#x} not in the state")


def _map_range(segments: dict[int, list[int | bool]], address: int, size: int, stream: int) -> None:
    """Undo a ``segment_unmap``: the range is mapped again, joined to adjacent ranges."""
    is_small = size % K_SMALL_BUFFER == 0 and size % (20 << 20) != 0
    start, end = address, address + size
    for other, fields in list(segments.items()):
        if not fields[3] or int(fields[1]) != stream:
            continue
        other_end = other + int(fields[0])
        if other_end == start or other == end:
            is_small = bool(fields[2])
            del segments[other]
            start, end = min(start, other), max(end, other_end)
    segments[start] = [end - start, stream, is_small, True]


def _assemble(
    segments: dict[int, list[int | bool]],
    live: dict[int, Held],
    problems: _Problems,
    settings: AllocatorSettings,
    borders: _Borders | None = None,
) -> AllocatorState:
    """Put live blocks into their segments and size the blocks whose size is not known."""
    states = [
        SegmentState(address, int(f[0]), int(f[1]), bool(f[2]), bool(f[3]))
        for address, f in sorted(segments.items())
    ]
    starts = [segment.address for segment in states]
    stray = 0
    for address in sorted(live):
        requested, size, pending, stream = live[address]
        block = LiveBlock(address, requested, size, pending, stream)
        i = bisect_right(starts, block.address) - 1
        if i < 0 or block.address >= states[i].end:
            stray += 1
            continue
        states[i].blocks.append(block)
    for segment in states:
        _size_blocks(segment, settings, borders)
    if stray:
        problems.add(f"{stray} live block(s) lie in no segment")
    return AllocatorState(tuple(states), tuple(problems.messages), problems.count)


def _size_blocks(
    segment: SegmentState, settings: AllocatorSettings, borders: _Borders | None
) -> None:
    """A block of unknown size is its rounded request, plus a tail too small to be split off
    (``should_split``'s rule) before the next border (:class:`_Borders`)."""
    blocks = segment.blocks
    for i, block in enumerate(blocks):
        if block.size is not None:
            continue
        size = block_size(settings, max(block.requested, 1))
        boundary = blocks[i + 1].address if i + 1 < len(blocks) else segment.end
        if borders is not None and not segment.expandable:  # a mapped page may border it
            boundary = borders.end(block.address, boundary)
        tail = boundary - block.address - size
        if segment.is_small or segment.expandable:
            keep_tail = 0 < tail < K_MIN_BLOCK_SIZE
        elif size >= settings.max_split_size and settings.max_split_size != NO_LIMIT:
            keep_tail = 0 < tail < settings.max_non_split_rounding_size
        else:
            keep_tail = 0 < tail <= K_SMALL_SIZE
        room = max(boundary - block.address, 0)
        block.size = size + tail if keep_tail else min(size, room)


def changes_after(trace: list[object], index: int) -> bool:
    """True when an event after ``index`` changed the allocator state (not just snapshots)."""
    for entry in trace[index + 1 :]:
        if type(entry) is dict and entry.get("action") not in ("oom", "snapshot", "user_defined"):
            return True
    return False
