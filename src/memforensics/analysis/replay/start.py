"""Put a dump's start state into the allocator model before a replay runs.

Seeding happens once per run, before :mod:`~memforensics.analysis.replay.run`'s hot loop feeds
the events. The self-check seeds the reconstructed layout block for block at the real
addresses (expandable address spaces placed where the trace maps them); a what-if run allocates
the blocks live at the start afresh under its own settings.
"""

from __future__ import annotations

from memforensics.allocator import Block, DeviceCachingAllocator
from memforensics.analysis.oom import AllocatorState, seed_state

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
