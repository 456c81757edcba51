"""The recorded run, read from its trace alone: the trace decoded once into the events every
replay run walks, the run's reserved bytes and segment events, and where it released its whole
cache.

The replay's baseline is measured against this record before any what-if row is shown: a
baseline that does not reach the recorded reserved peak with the recorded segment events is not
the run that happened, and a setting's change against it is a change against a run nobody made.

Where the recorded allocator released every cached segment at once, it ran
``release_cached_blocks`` (``c10/cuda/CUDACachingAllocator.cpp``): either ``malloc``'s retry
after a failed ``cudaMalloc`` (free every unsplit cached block, then ``alloc_block`` again) or the
program's ``empty_cache()``. A replay that does not know the device's size never fails a
``cudaMalloc`` and would never release; every run of the replay releases its cache there instead,
as the recorded allocator did (:func:`cache_releases`). A release of only some cached segments is
the allocator's own choice under its settings (garbage collection, ``max_split_size``), which
each run makes for itself.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from dataclasses import dataclass

from memforensics.analysis.oom import SEGMENT_ACTIONS, AllocatorState

# A dump's trace decoded once into the plain tuples every replay run feeds the model.
#
# The self-check and each what-if row walk the same trace; reading a million dicts with
# ``dict.get`` in every run costs more than the model itself. :func:`decode` reads each entry
# once and keeps what a run looks at, with the checks the runs make (an ``int`` address, an
# ``int`` size, the stream an ``int`` else 0) already applied, so every run decides exactly as
# if it had read the dicts itself.

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


GROWS = ("segment_alloc", "segment_map")
"""Segment events that add reserved bytes (``segment_free`` and ``segment_unmap`` take them)."""


@dataclass(frozen=True, slots=True)
class RecordedReserved:
    """The recorded run's reserved bytes up to a point of its trace."""

    start_bytes: int
    peak_bytes: int
    peak_index: int | None  # trace index of the segment event that reached it (None: the start)
    segment_events: int  # segment_alloc, _free, _map and _unmap up to that point


def recorded_reserved(
    events: list[Event], start: AllocatorState, stop: int | None = None
) -> RecordedReserved:
    """Reserved bytes of the recorded run from ``start`` through trace index ``stop`` (None:
    the whole trace), from its segment events."""
    reserved = peak = start.reserved
    peak_index: int | None = None
    count = 0
    for code, _addr, size, _stream, position, action in events:
        if stop is not None and position > stop:
            break
        if code != SEGMENT or size is None:
            continue
        count += 1
        reserved += size if action in GROWS else -size
        if reserved > peak:
            peak, peak_index = reserved, position
    return RecordedReserved(start.reserved, peak, peak_index, count)


def cache_releases(events: list[Event], start: AllocatorState) -> frozenset[int]:
    """Trace indices of the events just after which the recorded allocator had released every
    cached segment (``release_cached_blocks``): the event each replay run releases its cache
    before.

    A segment is cached when no block in it is held: frees waiting for other streams count as
    done, since ``release_cached_blocks`` first waits for them. Segments of expandable
    address spaces are left to the runner's own rules (their pages, not whole segments, are
    released).
    """
    cached = _Segments(start)
    found: set[int] = set()
    freed: set[int] = set()  # segments released since the last event that asks or frees
    made: set[int] = set()  # segments made since then (a retry's new segment is cached)
    for code, addr, size, _stream, position, action in events:
        if code == SEGMENT:
            if action == "segment_free" and addr is not None:
                cached.remove(addr)
                freed.add(addr)
            elif action == "segment_alloc" and addr is not None and size is not None:
                cached.add(addr, size)
                made.add(addr)
            elif action in ("segment_map", "segment_unmap"):
                freed.clear()  # expandable pages: the runner's own rules judge these
            continue
        if freed and not (cached.unused() - made):
            found.add(position)
        if code == OTHER:
            continue
        freed.clear()
        made.clear()
        if addr is None:
            continue
        if code == ALLOC:
            cached.hold(addr)
        elif code in (FREE_REQUESTED, FREE, FREE_COMPLETED):
            cached.release(addr)
    return frozenset(found)


class _Segments:
    """The recorded run's non-expandable segments and how many blocks each holds."""

    def __init__(self, start: AllocatorState) -> None:
        self.starts: list[int] = []
        self.sizes: dict[int, int] = {}
        self.held: dict[int, int] = {}  # segment address -> blocks held in it
        self.blocks: dict[int, int] = {}  # block address -> its segment's address
        for segment in start.segments:
            if segment.expandable:
                continue
            self.add(segment.address, segment.size)
            for block in segment.blocks:
                if not block.pending:  # released by release_cached_blocks' sync
                    self.hold(block.address)

    def add(self, address: int, size: int) -> None:
        if address not in self.sizes:
            insort(self.starts, address)
        self.sizes[address] = size
        self.held[address] = 0

    def remove(self, address: int) -> None:
        if self.sizes.pop(address, None) is not None:
            del self.starts[bisect_right(self.starts, address) - 1]
            del self.held[address]

    def hold(self, block: int) -> None:
        i = bisect_right(self.starts, block) - 1
        if i < 0:
            return
        segment = self.starts[i]
        if block < segment + self.sizes[segment]:
            self.held[segment] += 1
            self.blocks[block] = segment

    def release(self, block: int) -> None:
        segment = self.blocks.pop(block, None)
        if segment is not None and segment in self.held:
            self.held[segment] -= 1

    def unused(self) -> set[int]:
        """Segments holding no block: what ``release_cached_blocks`` would release."""
        return {address for address, count in self.held.items() if count <= 0}


@dataclass(frozen=True, slots=True)
class BaselineCheck:
    """The baseline run against the recorded run, up to where the baseline stops: what every
    what-if row is measured against must be the run that happened.

    Two figures are compared, exactly: the peak reserved bytes (to the byte) and the number of
    segment events. ``reproduced`` when both agree; ``peak_reproduced`` when the peak does
    (what each row's change is measured with), the segment events differing by the start
    layout the baseline lays out afresh. Otherwise ``why`` says what is known of the cause.
    """

    recorded_peak_reserved_bytes: int
    recorded_peak_index: int | None  # trace index of the segment event that reached it
    baseline_peak_reserved_bytes: int
    baseline_peak_index: int | None  # trace index of the request that reached it
    recorded_segment_events: int
    baseline_segment_events: int
    cache_releases: int
    """Releases of the whole cache in the recording, replayed as such in every run."""
    reproduced: bool
    """The same peak reserved to the byte and the same number of segment events."""
    diverged_at: int | None = None
    """Trace index of the first request after which the baseline's reserved bytes differ from
    the recording's (None: they never do, or the baseline reproduces the recording)."""
    diverged_reserved_bytes: int | None = None  # the baseline's reserved bytes there
    diverged_recorded_bytes: int | None = None  # the recording's reserved bytes there
    why: str | None = None
    """Why the baseline differs from the recording (None when it reproduces it)."""
    peak_reproduced: bool = False
    """The baseline reaches the recorded peak reserved to the byte: the result is trusted on
    it (the rows' changes are peaks against the baseline's)."""

    @property
    def gap_bytes(self) -> int:
        """The baseline's peak reserved less the recording's (negative: it stays below)."""
        return self.baseline_peak_reserved_bytes - self.recorded_peak_reserved_bytes
