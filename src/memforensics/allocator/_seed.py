"""Put a known layout into a fresh allocator: the state a replay starts from.

A trace rarely starts from an empty allocator (history is cleared when a step window opens), so
the replay first rebuilds the segments and live blocks that existed when recording began, block
for block, then lets the model take over. Nothing here decides placement; it only writes state.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from memforensics.allocator._blocks import (
    K_ROUND_LARGE,
    K_SMALL_BUFFER,
    Block,
    BlockPool,
    ExpandableSegment,
)
from memforensics.allocator._caching import DeviceCachingAllocator

SeedBlock = tuple[int, int, int, bool]
"""A live block to place: ``(address, size, requested, pending)``."""


def seed_segment(
    model: DeviceCachingAllocator,
    address: int,
    size: int,
    stream: int,
    is_small: bool,
    live: Sequence[SeedBlock],
) -> list[Block]:
    """Add one ``cudaMalloc`` segment holding ``live`` blocks; the gaps become free blocks."""
    pool = model.small_blocks if is_small else model.large_blocks
    blocks = _carve(model, pool, address, size, stream, live, None)
    _claim(model, address + size)
    model.total_allocated_memory += size
    model.segment.increase(1)
    model.hold_segment(address, size)
    model.reserved_bytes.increase(size)
    kind = model.small_pool if is_small else model.large_pool
    kind.segment.increase(1)
    kind.reserved_bytes.increase(size)
    if size >= model.settings.max_split_size:
        model.oversize_segments.increase(1)
    for block in blocks:
        if block.allocated and block.size >= model.settings.max_split_size:
            model.oversize_allocations.increase(1)
        if len(blocks) > 1 and not block.allocated and not block.event_count:
            for owner in (model, kind):  # a free block of a split segment: inactive split
                owner.inactive_split.increase(1)
                owner.inactive_split_bytes.increase(block.size)
    return [block for block in blocks if block.allocated or block.event_count]


def seed_expandable(
    model: DeviceCachingAllocator,
    stream: int,
    is_small: bool,
    ranges: Sequence[tuple[int, int, Sequence[SeedBlock]]],
    base: int | None = None,
) -> list[Block]:
    """Add one expandable segment whose mapped ranges are ``(address, size, live)``.

    The reserved address space starts at ``base`` (default: the first range) and spans 9/8 of
    the device, as PyTorch reserves it. The real one may start lower than anything the caller
    knows, with unmapped pages before the first mapped range; a replay that would map those
    (they are the lowest address with room) diverges from the recording, and its self-check
    says so.
    """
    page = K_SMALL_BUFFER if is_small else model.settings.large_segment_size
    pool = model.small_blocks if is_small else model.large_blocks
    ordered = sorted(ranges)
    first = ordered[0][0]
    base = first if base is None or base > first or (first - base) % page else base
    space = model.device_total + model.device_total // 8
    last_end = ordered[-1][0] + ordered[-1][1]
    space = max(space, last_end - base)
    segment = ExpandableSegment(base, stream, page, space)
    model.hold_address_space(segment)
    chain: list[Block] = []
    cursor = base
    live_blocks: list[Block] = []
    for start, size, live in ordered:
        if start > cursor:
            chain.append(_unmapped(pool, stream, cursor, start - cursor, segment))
        carved = _carve(model, pool, start, size, stream, live, segment)
        chain.extend(carved)
        live_blocks.extend(b for b in carved if b.allocated or b.event_count)
        model.total_allocated_memory += size
        model.reserved_bytes.increase(size)
        (model.small_pool if is_small else model.large_pool).reserved_bytes.increase(size)
        cursor = start + size
    end = base + segment.size()
    _claim(model, end)
    if end > cursor:
        chain.append(_unmapped(pool, stream, cursor, end - cursor, segment))
    for before, after in pairwise(chain):
        before.next, after.prev = after, before
    return live_blocks


def _claim(model: DeviceCachingAllocator, end: int) -> None:
    """Keep the model's own next segment address past a seeded range: a segment the model
    places itself must never land on one the recording already holds."""
    if end > model.next_address:
        model.next_address = -(-end // K_ROUND_LARGE) * K_ROUND_LARGE


def _unmapped(
    pool: BlockPool, stream: int, address: int, size: int, segment: ExpandableSegment
) -> Block:
    block = Block(stream, size, pool, address)
    block.mapped = False
    block.expandable = segment
    pool.insert_unmapped(block)
    return block


def _carve(
    model: DeviceCachingAllocator,
    pool: BlockPool,
    address: int,
    size: int,
    stream: int,
    live: Sequence[SeedBlock],
    segment: ExpandableSegment | None,
) -> list[Block]:
    """Blocks covering ``[address, address + size)``: ``live`` ones and free gaps, linked."""
    chain: list[Block] = []
    cursor = address
    end = address + size
    for block_address, block_size, requested, pending in sorted(live):
        if block_address < cursor or block_address + block_size > end or block_size <= 0:
            continue  # overlapping or outside: the layout was guessed wrong; skip the block
        if block_address > cursor:
            chain.append(_free(pool, stream, cursor, block_address - cursor, segment))
        block = Block(stream, block_size, pool, block_address)
        block.expandable = segment
        block.requested_size = requested
        kind = model.small_pool if pool.is_small else model.large_pool
        if pending:
            block.event_count = 1
            model.pending.append(block)
        else:
            block.allocated = True
            model.allocation.increase(1)
            model.allocated_bytes.increase(block_size)
            kind.allocation.increase(1)
            kind.allocated_bytes.increase(block_size)
        model.active.increase(1)
        model.active_bytes.increase(block_size)
        model.requested_bytes.increase(requested)
        kind.active.increase(1)
        kind.active_bytes.increase(block_size)
        kind.requested_bytes.increase(requested)
        model.active_blocks[block_address] = block
        chain.append(block)
        cursor = block_address + block_size
    if end > cursor:
        chain.append(_free(pool, stream, cursor, end - cursor, segment))
    for before, after in pairwise(chain):
        before.next, after.prev = after, before
    for block in chain:
        if not block.allocated and block.event_count == 0:
            pool.insert_into_blocks(block)
    return chain


def _free(
    pool: BlockPool, stream: int, address: int, size: int, segment: ExpandableSegment | None
) -> Block:
    block = Block(stream, size, pool, address)
    block.expandable = segment
    return block
