"""Drive the allocator model with a dump's trace: the self-check and every what-if run.

The requests and frees of the trace go into :class:`~memforensics.allocator.DeviceCachingAllocator`
in order. Run ``exact`` (the recorded settings, the reconstructed start layout, the real segment
addresses) the model should do what the real allocator did: every ``segment_alloc`` /
``segment_free`` / ``segment_map`` / ``segment_unmap`` it makes is compared with the ones the
trace recorded around the same request, and every block address with the real one. Run under
other settings, the same requests show whether and where memory would have run out.

Seeding the start state lives in :mod:`~memforensics.analysis.replay.start`, the model probes
(was that release an ``empty_cache()``?) in :mod:`~memforensics.analysis.replay.probe`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from memforensics.allocator import (
    AllocatorSettings,
    DeviceCachingAllocator,
)
from memforensics.analysis.dump import Dump
from memforensics.analysis.oom import SEGMENT_ACTIONS, AllocatorState
from memforensics.analysis.replay.events import (
    ALLOC,
    FREE,
    FREE_COMPLETED,
    FREE_REQUESTED,
    OOM,
    SEGMENT,
    Event,
    decode,
)
from memforensics.analysis.replay.probe import RELEASES, emptied, largest_free, undo_malloc
from memforensics.analysis.replay.start import STREAM_UNKNOWN, seed_start

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
    fragmentation_at_peak: int = 0  # reserved minus allocated when reserved peaked
    largest_free_at_oom: int | None = None
    mismatches: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)  # the first blocks placed elsewhere
    model: DeviceCachingAllocator | None = None
    at_first_stop: RunResult | None = None  # run without stop_at_oom: what one with it reports

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
) -> RunResult:
    """Replay ``dump``'s trace from ``start`` under ``settings``.

    ``exact``: seed the start layout block for block and reuse the real segment addresses (the
    self-check); else allocate the blocks live at the start afresh, in address order, under
    ``settings`` (what-if). ``stop_at_oom``: stop at the first request the model cannot serve
    or at the trace's first ``oom`` entry, whichever comes first; without it the result's
    :attr:`~RunResult.at_first_stop` holds what such a run would report. ``events``: the
    trace as :func:`~memforensics.analysis.replay.events.decode` reads it (runs over one dump
    share one).
    """
    result = RunResult(settings)
    real: list[tuple[str, int, int]] = []
    made: list[tuple[str, int, int]] = []

    def on_trace(action: str, addr: int, size: int, stream: int) -> None:
        if action in SEGMENT_ACTIONS:
            made.append((action, addr, size))

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
    if events is None:
        events = decode(dump.trace)
    reserved_stat, allocated_stat = model.reserved_bytes, model.allocated_bytes
    peak = reserved_stat.current
    result.fragmentation_at_peak = peak - allocated_stat.current
    malloc, free = model.malloc, model.free
    watch = not stop_at_oom  # note the first stop a stop_at_oom run would make
    consumed = len(dump.trace)
    walk = iter(events)
    for code, addr, size, stream, position, extra in walk:
        if code == SEGMENT:
            real.append((extra, addr, size))  # type: ignore[arg-type]
            continue
        if real and real[0][0] in RELEASES and emptied(model, real, code, size, stream):
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
                    peak = reserved_stat.current
                    result.fragmentation_at_peak = peak - allocated_stat.current
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
