"""Drive the allocator model with a dump's trace: the self-check and every what-if run.

The requests and frees of the trace go into :class:`~memforensics.allocator.DeviceCachingAllocator`
in order. Run ``exact`` (the recorded settings, the reconstructed start layout, the real segment
addresses) the model should do what the real allocator did: every ``segment_alloc`` /
``segment_free`` / ``segment_map`` / ``segment_unmap`` it makes is compared with the ones the
trace recorded around the same request, and every block address with the real one. Run under
other settings, the same requests show whether and where memory would have run out.

The trace is decoded once (:mod:`~memforensics.analysis.replay.recorded`, which also reads
where the recorded allocator released its whole cache); seeding the start state and the model
probes (was that release an ``empty_cache()``?) are below.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from memforensics.allocator import (
    AllocatorSettings,
    Block,
    DeviceCachingAllocator,
)
from memforensics.analysis.dump import Dump
from memforensics.analysis.oom import SEGMENT_ACTIONS, AllocatorState, seed_state
from memforensics.analysis.replay.recorded import (
    ALLOC,
    FREE,
    FREE_COMPLETED,
    FREE_REQUESTED,
    GROWS,
    OOM,
    REQUESTS,
    SEGMENT,
    Event,
    cache_releases,
    decode,
)

# Put a dump's start state into the allocator model before a replay runs.
#
# Seeding happens once per run, before :mod:`~memforensics.analysis.replay.runner`'s hot loop feeds
# the events. The self-check seeds the reconstructed layout block for block at the real
# addresses (expandable address spaces placed where the trace maps them); a what-if run allocates
# the blocks live at the start afresh under its own settings.

STREAM_UNKNOWN = -1  # a stream standing for "some other stream used this block"


def _mapped_addresses(trace: list[object], large_page: int) -> dict[tuple[int, bool], list[int]]:
    """Addresses the trace maps or unmaps, by (stream, small pool): where expandable segments
    may begin. A range that is not a whole number of large pages is the small pool's."""
    found: dict[tuple[int, bool], list[int]] = {}
    for entry in trace:
        if type(entry) is dict and entry.get("action") in ("segment_map", "segment_unmap"):
            address, stream, size = entry.get("addr"), entry.get("stream"), entry.get("size")
            if type(address) is int and type(size) is int:
                key = (stream if type(stream) is int else 0, size % large_page != 0)
                found.setdefault(key, []).append(address)
    return found


def seed_start(
    model: DeviceCachingAllocator,
    start: AllocatorState,
    exact: bool,
    trace: list[object],
) -> dict[int, Block]:
    """Put the start state into the model; real address -> model block for live blocks.

    An expandable segment's address space begins at the lowest address the trace maps below
    its first range (within one address space's reach), else at that range.
    """
    by_addr: dict[int, Block] = {}
    if exact:
        reach = model.device_total + model.device_total // 8
        large_page = model.settings.large_segment_size
        mapped: list[dict[tuple[int, bool], list[int]]] = []  # walked once, when needed

        def base_of(stream: int, is_small: bool, first: int) -> int | None:
            if not mapped:
                mapped.append(_mapped_addresses(trace, large_page))
            found = mapped[0].get((stream, is_small), [])
            below = [a for a in found if first - reach < a < first]
            return min(below, default=None)

        return seed_state(model, start, base_of)
    for segment in start.segments:
        for held in segment.blocks:
            block = model.malloc(held.requested, segment.stream)
            if block is None:
                continue
            by_addr[held.address] = block
            if held.pending:
                model.record_stream(block, STREAM_UNKNOWN)
                model.free(block)
    return by_addr


# Questions the replay asks the allocator model without changing its state.
#
# The trace records segment releases but not the ``empty_cache()`` calls that caused them, so
# the replay has to infer them by asking the model what it would have done (would a cached block
# serve this request? would a new segment fit?), and leaving it as it was. The replay's other
# helpers that look into or restore the model are here too.

RELEASES = ("segment_free", "segment_unmap")


def emptied(
    model: DeviceCachingAllocator,
    real: list[tuple[str, int, int]],
    code: int,
    size: int | None,
    stream: int,
    released_all: bool = False,
) -> bool:
    """Should the model release its cache before this event, as the recorded releases did?

    A request's own retry releases cached blocks only when no cached block serves it, so if
    one would (the model checks without changing its state) the releases came first. A release
    of every cached segment (``released_all``, read from the recording by
    :func:`~memforensics.analysis.replay.recorded.cache_releases`) is ``release_cached_blocks``:
    the program's ``empty_cache()`` or a retry after a failed ``cudaMalloc``; every run
    releases its cache there, whatever its settings and whether or not it knows the device's
    size (then both orders give the same state). Before a failed request other releases are
    its retry; before anything else, releases alone are ``empty_cache()``. A release of only
    some segments before a request is the allocator's own (garbage collection, a split limit).
    Releases of expandable pages before an ``alloc`` are its retry only when the device had no
    room for the pages it maps.
    """
    request = size if code in REQUESTS else None  # the requested bytes (None: no request)
    if request is not None and _cached_block_fits(model, request, stream):
        return True
    if released_all:
        return True
    if code == OOM:
        return False
    if all(event[0] in RELEASES for event in real):
        return True
    if not any(event[0] == "segment_unmap" for event in real):
        return False
    if request is None:
        return False
    rounded = model.round_size(request)
    total = model.total_allocated_memory
    settings = model.settings
    threshold = settings.garbage_collection_threshold
    if model.allowed is not None and threshold > 0.0 and total > threshold * model.allowed:
        return False  # the releases were the garbage collection before a new segment
    alloc_size = model.get_allocation_size(rounded)
    if model.allowed is not None and total + alloc_size > model.allowed:
        return False
    need = rounded if settings.expandable_segments else alloc_size
    return total + need <= model.capacity


def _cached_block_fits(model: DeviceCachingAllocator, size: int, stream: int) -> bool:
    """Would ``get_free_block`` serve this request now? (The model's state is left as it was.)"""
    rounded = model.round_size(size)
    pool = model.small_blocks if rounded <= (1 << 20) else model.large_blocks
    calls = pool.get_free_blocks_call_count
    block = model.get_free_block(rounded, stream, pool)
    pool.get_free_blocks_call_count = calls
    if block is None:
        return False
    base = block.gc_count_base
    pool.insert_into_blocks(block)
    block.gc_count_base = base
    return True


def undo_malloc(model: DeviceCachingAllocator, block: Block) -> None:
    """Give back a block the model served where the real allocator failed."""
    hook = model.on_trace
    model.on_trace = _silent
    model.free(block)
    model.on_trace = hook


def _silent(action: str, addr: int, size: int, stream: int, kept: object) -> None:
    """A trace hook that records nothing."""


def largest_free(model: DeviceCachingAllocator, size: int, stream: object) -> int:
    """Largest free block of the failing request's pool and stream."""
    pool = model.small_blocks if size <= (1 << 20) else model.large_blocks
    wanted = stream if type(stream) is int else 0
    sizes = [key[1] for key in pool.keys if key[0] == wanted]
    return max(sizes, default=0)


UNBOUNDED = 1 << 62
"""Capacity of a device that never runs out (no OOM to size it from)."""


@dataclass(frozen=True, slots=True)
class Device:
    """What the device could give: ``capacity`` for reserved bytes; ``allowed`` a fraction's
    limit (None: no fraction set); ``total`` sizes expandable address spaces."""

    capacity: int
    allowed: int | None
    total: int


def placement_share(same: int, checked: int) -> float | None:
    """Share of the checked blocks placed at their recorded address (None: none checked)."""
    return same / checked if checked else None


@dataclass
class RunResult:
    """What one replay did; counts of the self-check are zero for what-if runs."""

    settings: AllocatorSettings
    events: int = 0
    real_segment_events: int = 0
    model_segment_events: int = 0
    matched_segment_events: int = 0
    allocs_checked: int = 0
    allocs_placed_same: int = 0
    oom_index: int | None = None  # trace index of the first request the model could not serve
    oom_request: int | None = None  # its rounded size
    stopped_at: int | None = None
    peak_reserved: int = 0
    fragmentation_at_peak: int = 0  # free inside reserved when allocated bytes peaked
    largest_free_at_oom: int | None = None
    mismatches: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)  # the first blocks placed elsewhere
    model: DeviceCachingAllocator | None = None
    at_first_stop: RunResult | None = None  # run without stop_at_oom: what one with it reports
    peak_index: int | None = None  # trace index of the request that reached the peak reserved
    segment_events_made: int = 0  # segment events the model made, in every run
    diverged: tuple[int, int, int] | None = None
    """The first request after which the model's reserved bytes differ from the recording's:
    ``(trace index, model's, recording's)``; None while they agree."""

    @property
    def placement_fidelity(self) -> float | None:
        """Share of blocks placed at their recorded address (None when none was checked)."""
        return placement_share(self.allocs_placed_same, self.allocs_checked)

    @property
    def fidelity(self) -> float | None:
        """Share of segment events reproduced exactly (None when neither side made any)."""
        total = max(self.real_segment_events, self.model_segment_events)
        return None if total == 0 else self.matched_segment_events / total


def run(  # noqa: PLR0912, PLR0915 - the hot loop over millions of events stays in one frame
    dump: Dump,
    settings: AllocatorSettings,
    start: AllocatorState,
    device: Device,
    *,
    exact: bool,
    stop_at_oom: bool,
    events: list[Event] | None = None,
    releases: frozenset[int] | None = None,
) -> RunResult:
    """Replay ``dump``'s trace from ``start`` under ``settings``.

    ``exact``: seed the start layout block for block and reuse the real segment addresses (the
    self-check); else allocate the blocks live at the start afresh, in address order, under
    ``settings`` (what-if). ``stop_at_oom``: stop at the first request the model cannot serve
    or at the trace's first ``oom`` entry, whichever comes first; without it the result's
    :attr:`~RunResult.at_first_stop` holds what such a run would report. ``events``: the
    trace as :func:`~memforensics.analysis.replay.runner.decode` reads it (runs over one dump
    share one). ``releases``: where the recorded allocator released its whole cache
    (:func:`~memforensics.analysis.replay.recorded.cache_releases`, read when not given).
    """
    result = RunResult(settings)
    real: list[tuple[str, int, int]] = []
    made: list[tuple[str, int, int]] = []

    def on_trace(action: str, addr: int, size: int, stream: int, kept: object) -> None:
        if action in SEGMENT_ACTIONS:
            made.append((action, addr, size))
            result.segment_events_made += 1

    def address_of(size: int, expandable: bool) -> int | None:
        """A recorded segment's address for the model's new one (the model refuses one it
        holds: a request the real allocator failed, served by the model, may meet a recorded
        address the model already uses)."""
        if not exact:
            return None
        wanted = "segment_map" if expandable else "segment_alloc"
        taken = {event[1] for event in made}
        for action, addr, event_size in real:
            if action == wanted and addr not in taken and (expandable or event_size == size):
                return addr
        return None

    model = DeviceCachingAllocator(
        settings,
        capacity=device.capacity,
        allowed=device.allowed,
        device_total=device.total,
        on_trace=on_trace,
        address_of=address_of,
        auto_events=False,
        trace_blocks=False,
        all_stats=False,  # a run reads allocated and reserved bytes only
    )
    result.model = model
    by_addr = seed_start(model, start, exact, dump.trace)
    made.clear()
    result.segment_events_made = 0
    recorded = start.reserved  # the recording's reserved bytes, event by event
    if events is None:
        events = decode(dump.trace)
    if releases is None:
        releases = cache_releases(events, start)
    reserved_stat, allocated_stat = model.reserved_bytes, model.allocated_bytes
    peak = reserved_stat.current
    top = allocated_stat.current  # the allocated peak so far, where free-at-peak is read
    result.fragmentation_at_peak = peak - top
    malloc, free = model.malloc, model.free
    watch = not stop_at_oom  # note the first stop a stop_at_oom run would make
    consumed = len(dump.trace)
    walk = iter(events)
    for code, addr, size, stream, position, extra in walk:
        if code == SEGMENT:
            real.append((extra, addr, size))  # type: ignore[arg-type]
            recorded += size if extra in GROWS else -size  # type: ignore[operator]
            continue
        if (
            real
            and real[0][0] in RELEASES
            and emptied(model, real, code, size, stream, position in releases)
        ):
            model.empty_cache()  # releases no request explains: the program emptied the cache
            cut = next((i for i, event in enumerate(real) if event[0] not in RELEASES), len(real))
            rest = real[cut:]
            del real[cut:]
            _compare(result, real, made, exact)
            real.extend(rest)
        if code == ALLOC:
            if size is None or addr is None:
                continue
            block = malloc(size, stream)
            if block is None:
                result.oom_index = position
                result.oom_request = model.last_oom.size if model.last_oom else None
                result.largest_free_at_oom = largest_free(model, size, stream)
                if stop_at_oom:
                    result.stopped_at = position
                    consumed = position + 1
                    break
                if watch:
                    watch = False
                    result.at_first_stop = _stopped(result, model, peak, position)
            else:
                by_addr[addr] = block
                if exact:
                    result.allocs_checked += 1
                    if block.address == addr:
                        result.allocs_placed_same += 1
                    elif len(result.misplaced) < 2:
                        result.misplaced.append(
                            f"event {position}: {size:,} B placed at {block.address:#x},"
                            f" recorded at {addr:#x}"
                        )
                if reserved_stat.current > peak:
                    peak, result.peak_index = reserved_stat.current, position
                if allocated_stat.current > top:
                    top = allocated_stat.current
                    result.fragmentation_at_peak = reserved_stat.current - top
        elif code in (FREE_REQUESTED, FREE):
            block = by_addr.get(addr) if addr is not None else None
            if block is None or not block.allocated:
                continue
            if code == FREE_REQUESTED and not extra:
                model.record_stream(block, STREAM_UNKNOWN)
            free(block)
            if block.event_count == 0:
                del by_addr[addr]  # type: ignore[arg-type]
                if extra:  # the next event completes this free: nothing is left for it to do
                    next(walk, None)
        elif code == FREE_COMPLETED:
            block = by_addr.pop(addr, None) if addr is not None else None
            if block is not None and block.event_count > 0:
                model.complete_free(block)
        elif code == OOM:
            first = result.oom_index is None  # a stop_at_oom run never gets past its first
            if size is not None:
                block = malloc(size, stream)
                if block is None:
                    if first:
                        result.oom_index, result.oom_request = position, size
                        result.largest_free_at_oom = largest_free(model, size, stream)
                else:
                    if not stop_at_oom:
                        result.mismatches.append(
                            f"event {position}: the model served the failed request"
                        )
                    undo_malloc(model, block)
            if stop_at_oom:
                result.stopped_at = position
                consumed = position + 1
                break
            if watch:
                watch = False
                result.at_first_stop = _stopped(result, model, peak, position)
        else:
            continue
        if result.diverged is None and reserved_stat.current != recorded:
            result.diverged = (position, reserved_stat.current, recorded)
        if real or made:
            _compare(result, real, made, exact)
    if real and result.stopped_at is None and all(event[0] in RELEASES for event in real):
        model.empty_cache()
    if real or made:
        _compare(result, real, made, exact)
    result.events = consumed
    result.peak_reserved = max(reserved_stat.peak, peak)
    return result


def _stopped(
    result: RunResult, model: DeviceCachingAllocator, peak: int, position: int
) -> RunResult:
    """What a ``stop_at_oom`` run reports when it stops at ``position`` (the model as it is
    now): its OOM and peak; its self-check counts are not kept."""
    return RunResult(
        result.settings,
        peak_index=result.peak_index,
        segment_events_made=result.segment_events_made,
        diverged=result.diverged,
        events=position + 1,
        oom_index=result.oom_index,
        oom_request=result.oom_request,
        stopped_at=position,
        peak_reserved=max(model.reserved_bytes.peak, peak),
        fragmentation_at_peak=result.fragmentation_at_peak,
        largest_free_at_oom=result.largest_free_at_oom,
    )


def _compare(
    result: RunResult,
    real: list[tuple[str, int, int]],
    made: list[tuple[str, int, int]],
    exact: bool,
) -> None:
    """Match the segment events the model made for one request with the recorded ones."""
    if exact:
        matched = sum((Counter(real) & Counter(made)).values())
        result.real_segment_events += len(real)
        result.model_segment_events += len(made)
        result.matched_segment_events += matched
        if matched < max(len(real), len(made)) and len(result.mismatches) < 5:
            result.mismatches.append(f"real {real[:3]} vs model {made[:3]}")
    real.clear()
    made.clear()
