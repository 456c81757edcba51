"""Drive the allocator model with a dump's trace: the self-check and every what-if run.

The requests and frees of the trace go into :class:`~memforensics.allocator.DeviceCachingAllocator`
in order. Run ``exact`` (the recorded settings, the reconstructed start layout, the real segment
addresses) the model should do what the real allocator did: every ``segment_alloc`` /
``segment_free`` / ``segment_map`` / ``segment_unmap`` it makes is compared with the ones the
trace recorded around the same request, and every block address with the real one. Run under
other settings, the same requests show whether and where memory would have run out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from memforensics.allocator import (
    AllocatorSettings,
    Block,
    DeviceCachingAllocator,
    seed_expandable,
    seed_segment,
)
from memforensics.analysis._history import SEGMENT_ACTIONS, AllocatorState
from memforensics.analysis._load import Dump

_RELEASES = ("segment_free", "segment_unmap")
_STREAM_UNKNOWN = -1  # a stream standing for "some other stream used this block"


@dataclass(frozen=True, slots=True)
class Device:
    """What the device could give: ``capacity`` for reserved bytes; ``allowed`` a fraction's
    limit (None: no fraction set); ``total`` sizes expandable address spaces."""

    capacity: int
    allowed: int | None
    total: int


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
    peak_allocated: int = 0
    fragmentation_at_peak: int = 0  # reserved minus allocated when reserved peaked
    reserved_at_stop: int = 0
    allocated_at_stop: int = 0
    largest_free_at_oom: int | None = None
    mismatches: list[str] = field(default_factory=list)
    model: DeviceCachingAllocator | None = None

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
) -> RunResult:
    """Replay ``dump``'s trace from ``start`` under ``settings``.

    ``exact``: seed the start layout block for block and reuse the real segment addresses (the
    self-check); else allocate the blocks live at the start afresh, in address order, under
    ``settings`` (what-if). ``stop_at_oom``: stop at the first request the model cannot serve
    or at the trace's first ``oom`` entry, whichever comes first.
    """
    result = RunResult(settings)
    real: list[tuple[str, int, int]] = []
    made: list[tuple[str, int, int]] = []

    def on_trace(action: str, addr: int, size: int, stream: int) -> None:
        if action in SEGMENT_ACTIONS:
            made.append((action, addr, size))

    def address_of(size: int, expandable: bool) -> int | None:
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
    )
    result.model = model
    by_addr = _start(model, start, exact, dump.trace)
    made.clear()
    trace = dump.trace
    count = len(trace)
    reserved_stat, allocated_stat = model.reserved_bytes, model.allocated_bytes
    peak = reserved_stat.current
    result.fragmentation_at_peak = peak - allocated_stat.current
    malloc, free = model.malloc, model.free
    index = 0
    while index < count:
        entry = trace[index]
        index += 1
        if type(entry) is not dict:
            continue
        action = entry.get("action")
        if action in SEGMENT_ACTIONS:
            addr, size = entry.get("addr"), entry.get("size")
            if type(addr) is int and type(size) is int:
                real.append((action, addr, size))
            continue
        if real and real[0][0] in _RELEASES and _emptied(model, real, entry):
            model.empty_cache()  # releases no request explains: the program emptied the cache
            cut = next((i for i, event in enumerate(real) if event[0] not in _RELEASES), len(real))
            rest = real[cut:]
            del real[cut:]
            _compare(result, real, made, exact)
            real.extend(rest)
        addr = entry.get("addr")
        if action == "alloc":
            size = entry.get("size")
            if type(size) is not int or type(addr) is not int:
                continue
            stream = entry.get("stream")
            block = malloc(size, stream if type(stream) is int else 0)
            if block is None:
                result.oom_index = index - 1
                result.oom_request = model.last_oom.size if model.last_oom else None
                result.largest_free_at_oom = _largest_free(model, size, stream)
                if stop_at_oom:
                    result.stopped_at = index - 1
                    break
            else:
                by_addr[addr] = block
                if exact:
                    result.allocs_checked += 1
                    if block.address == addr:
                        result.allocs_placed_same += 1
                if reserved_stat.current > peak:
                    peak = reserved_stat.current
                    result.fragmentation_at_peak = peak - allocated_stat.current
        elif action in ("free_requested", "free"):
            block = by_addr.get(addr) if type(addr) is int else None
            if block is None or not block.allocated:
                continue
            if action == "free_requested" and not _completes_next(trace, index, addr):
                model.record_stream(block, _STREAM_UNKNOWN)
            free(block)
            if block.event_count == 0:
                del by_addr[addr]  # type: ignore[arg-type]
        elif action == "free_completed":
            block = by_addr.pop(addr, None) if type(addr) is int else None
            if block is not None and block.event_count > 0:
                model.complete_free(block)
        elif action == "oom":
            if stop_at_oom and result.oom_index is None:
                result.stopped_at = index - 1
                size = entry.get("size")
                if type(size) is int:
                    stream = entry.get("stream")
                    block = malloc(size, stream if type(stream) is int else 0)
                    if block is None:
                        result.oom_index, result.oom_request = index - 1, size
                        result.largest_free_at_oom = _largest_free(model, size, stream)
                    else:
                        _undo_malloc(model, block)
                break
            size = entry.get("size")
            if type(size) is int:
                stream = entry.get("stream")
                block = malloc(size, stream if type(stream) is int else 0)
                if block is None:
                    if result.oom_index is None:
                        result.oom_index, result.oom_request = index - 1, size
                        result.largest_free_at_oom = _largest_free(model, size, stream)
                else:
                    result.mismatches.append(
                        f"event {index - 1}: the model served the failed request"
                    )
                    _undo_malloc(model, block)
        else:
            continue
        if real or made:
            _compare(result, real, made, exact)
    if real and result.stopped_at is None and all(event[0] in _RELEASES for event in real):
        model.empty_cache()
    if real or made:
        _compare(result, real, made, exact)
    result.events = index
    result.peak_reserved = max(reserved_stat.peak, peak)
    result.peak_allocated = allocated_stat.peak
    result.reserved_at_stop = reserved_stat.current
    result.allocated_at_stop = allocated_stat.current
    return result


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


def _emptied(
    model: DeviceCachingAllocator, real: list[tuple[str, int, int]], entry: dict[str, object]
) -> bool:
    """Were the recorded releases before this event an ``empty_cache()`` call?

    A request's own retry releases cached blocks only when no cached block serves it, so if
    one would (the model checks without changing its state) the releases came first. Before a
    failed request they are otherwise its retry; before anything else, releases alone are
    ``empty_cache()``, and so is a release of every wholly free segment (then both orders give
    the same state). Before an ``alloc``'s new segment they are its retry only when the device
    had no room for that segment.
    """
    size, stream = entry.get("size"), entry.get("stream")
    action = entry.get("action")
    request = action in ("alloc", "oom") and type(size) is int
    if request and _cached_block_fits(model, int(str(size)), stream):
        return True
    if action == "oom":
        return False
    if all(event[0] in _RELEASES for event in real):
        return True
    freed = {event[1] for event in real if event[0] == "segment_free"}
    if freed and not any(event[0] == "segment_unmap" for event in real):
        whole = {
            block.address
            for pool in (model.small_blocks, model.large_blocks)
            for block in pool.blocks.values()
            if not block.is_split() and block.expandable is None
        }
        return whole <= freed
    if not request:
        return False
    rounded = model.round_size(int(str(size)))
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


def _cached_block_fits(model: DeviceCachingAllocator, size: int, stream: object) -> bool:
    """Would ``get_free_block`` serve this request now? (The model's state is left as it was.)"""
    rounded = model.round_size(size)
    pool = model.small_blocks if rounded <= (1 << 20) else model.large_blocks
    calls = pool.get_free_blocks_call_count
    block = model.get_free_block(rounded, stream if type(stream) is int else 0, pool)
    pool.get_free_blocks_call_count = calls
    if block is None:
        return False
    base = block.gc_count_base
    pool.insert_into_blocks(block)
    block.gc_count_base = base
    return True


def _completes_next(trace: list[object], index: int, addr: object) -> bool:
    """True when the next event completes this free (no other stream held the block)."""
    if index >= len(trace):
        return False  # the snapshot was taken before the free completed
    entry = trace[index]
    return (
        type(entry) is dict
        and entry.get("action") == "free_completed"
        and entry.get("addr") == addr
    )


def _undo_malloc(model: DeviceCachingAllocator, block: Block) -> None:
    """Give back a block the model served where the real allocator failed."""
    hook = model.on_trace
    model.on_trace = _silent
    model.free(block)
    model.on_trace = hook


def _silent(action: str, addr: int, size: int, stream: int) -> None:
    """A trace hook that records nothing."""


def _largest_free(model: DeviceCachingAllocator, size: int, stream: object) -> int:
    """Largest free block of the failing request's pool and stream."""
    pool = model.small_blocks if size <= (1 << 20) else model.large_blocks
    wanted = stream if type(stream) is int else 0
    sizes = [key[1] for key in pool.keys if key[0] == wanted]
    return max(sizes, default=0)


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


def _start(
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
        groups: dict[tuple[int, bool], list[tuple[int, int, list[tuple[int, int, int, bool]]]]] = {}
        for segment in start.segments:
            live = [(b.address, b.size or 0, b.requested, b.pending) for b in segment.blocks]
            if segment.expandable:
                key = (segment.stream, segment.is_small)
                groups.setdefault(key, []).append((segment.address, segment.size, live))
                continue
            placed = seed_segment(
                model, segment.address, segment.size, segment.stream, segment.is_small, live
            )
            by_addr.update((block.address, block) for block in placed)
        reach = model.device_total + model.device_total // 8
        large_page = model.settings.large_segment_size
        mapped = _mapped_addresses(trace, large_page) if groups else {}
        for (stream, is_small), ranges in sorted(groups.items()):
            first = min(address for address, _size, _live in ranges)
            below = [a for a in mapped.get((stream, is_small), []) if first - reach < a < first]
            placed = seed_expandable(model, stream, is_small, ranges, min(below, default=None))
            by_addr.update((block.address, block) for block in placed)
        return by_addr
    for segment in start.segments:
        for held in segment.blocks:
            block = model.malloc(held.requested, segment.stream)
            if block is None:
                continue
            by_addr[held.address] = block
            if held.pending:
                model.record_stream(block, _STREAM_UNKNOWN)
                model.free(block)
    return by_addr
