"""Could a recorded allocator state serve a request? The allocator model answers, not a guess.

Whether a request fits is the allocator's decision: the pool by size (small up to 1 MiB), the
stream, the rounding, the oversize rule of ``max_split_size_mb`` (and
``max_non_split_rounding_mb``), expandable segments, and a fresh segment from the device's free
memory. Comparing the request with the largest free block gets those wrong both ways, so the
state is put into :class:`~memforensics.allocator.DeviceCachingAllocator` block for block and
the request asked of it. Seeding reads the state alone (no trace): the replay's self-check
seeds its start layout with the same :func:`seed_state`.
"""

from __future__ import annotations

from collections.abc import Callable

from memforensics.allocator import (
    AllocatorSettings,
    Block,
    DeviceCachingAllocator,
    seed_expandable,
    seed_segment,
)
from memforensics.analysis.oom.state import AllocatorState

ExpandableBase = Callable[[int, bool, int], "int | None"]
"""``(stream, is_small, first mapped address) -> where the address space begins`` (None: at
that first range)."""


def seed_state(
    model: DeviceCachingAllocator,
    state: AllocatorState,
    base_of: ExpandableBase | None = None,
) -> dict[int, Block]:
    """Put ``state`` into ``model`` block for block at the real addresses; real address ->
    model block for its live blocks. Each stream's and pool's expandable ranges form one
    address space, starting where ``base_of`` says."""
    by_addr: dict[int, Block] = {}
    groups: dict[tuple[int, bool], list[tuple[int, int, list[tuple[int, int, int, bool]]]]] = {}
    for segment in state.segments:
        live = [(b.address, b.size or 0, b.requested, b.pending) for b in segment.blocks]
        if segment.expandable:
            key = (segment.stream, segment.is_small)
            groups.setdefault(key, []).append((segment.address, segment.size, live))
            continue
        placed = seed_segment(
            model, segment.address, segment.size, segment.stream, segment.is_small, live
        )
        by_addr.update((block.address, block) for block in placed)
    for (stream, is_small), ranges in sorted(groups.items()):
        first = min(address for address, _size, _live in ranges)
        base = base_of(stream, is_small, first) if base_of is not None else None
        placed = seed_expandable(model, stream, is_small, ranges, base)
        by_addr.update((block.address, block) for block in placed)
    return by_addr


def could_serve(
    state: AllocatorState,
    settings: AllocatorSettings,
    requested: int,
    stream: int,
    *,
    headroom: int | None,
    device_total: int | None,
) -> bool:
    """True when the allocator, in ``state`` under ``settings``, serves ``requested`` bytes on
    ``stream``: from a cached block, or a fresh segment out of ``headroom`` (the device memory
    it could still reserve; None: unknown, so no fresh segment is counted on)."""
    capacity = state.reserved + (headroom or 0)
    model = DeviceCachingAllocator(
        settings,
        capacity=capacity,
        device_total=device_total if device_total is not None else capacity,
        auto_events=False,
        trace_blocks=False,
    )
    seed_state(model, state)
    return model.malloc(requested, stream) is not None
