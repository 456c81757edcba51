"""Finding a cached block for a request and splitting off what it does not need.

Mirrors ``get_free_block`` (best fit on ``(stream, size)`` in the pool, then the oversize rules
of ``max_split_size_mb`` and ``max_non_split_rounding_mb``), ``should_split`` and
``alloc_found_block``. Split from :mod:`memforensics.allocator._caching` so the placement
decision reads on its own, beside the C++ it mirrors.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

from memforensics.allocator._blocks import K_MIN_BLOCK_SIZE, K_SMALL_SIZE, Block, BlockPool
from memforensics.allocator._settings import AllocatorSettings
from memforensics.allocator._stats import Stat


class FindCachedBlock:
    """The placement methods of ``DeviceCachingAllocator`` (which provides the state)."""

    settings: AllocatorSettings
    allowed: int | None
    trace_blocks: bool
    active_blocks: dict[int, Block]
    allocation: Stat
    allocated_bytes: Stat
    active: Stat
    active_bytes: Stat
    requested_bytes: Stat
    on_trace: Callable[[str, int, int, int], None]

    def get_free_block(self, size: int, stream: int, pool: BlockPool) -> Block | None:
        """Mirrors ``get_free_block``: best fit on (stream, size), then the oversize rules."""
        settings = self.settings
        if self.allowed is not None and settings.garbage_collection_threshold > 0.0:
            pool.get_free_blocks_call_count += 1
        keys = pool.keys
        i = bisect_left(keys, (stream, size, 0))
        if i == len(keys) or keys[i][0] != stream:
            return None
        block = pool.blocks[keys[i][2]]
        if block.expandable is not None:
            if settings.expandable_segments:
                j = i + 1
                while (
                    block.expandable is not None
                    and j < len(keys)
                    and keys[j][0] == stream
                    and _expandable_size(pool.blocks[keys[j][2]]) < _expandable_size(block)
                ):
                    block = pool.blocks[keys[j][2]]
                    j += 1
            else:
                i += 1
                while i < len(keys) and keys[i][0] == stream and pool.blocks[keys[i][2]].expandable:
                    i += 1
                if i == len(keys) or keys[i][0] != stream:
                    return None
                block = pool.blocks[keys[i][2]]
        max_split = settings.max_split_size
        if size < max_split and block.size >= max_split:
            return None  # do not return an oversized block for a smaller request
        if size >= max_split and block.size >= size + settings.max_non_split_rounding_size:
            return None  # an oversized block may be rounded up only so far
        pool.erase(block)
        return block

    def should_split(self, block: Block, size: int) -> bool:
        """Mirrors ``should_split``."""
        remaining = block.size - size
        if block.pool.is_small or self.settings.expandable_segments:
            return remaining >= K_MIN_BLOCK_SIZE
        return size < self.settings.max_split_size and remaining > K_SMALL_SIZE

    def alloc_found_block(
        self, block: Block, size: int, orig_size: int, split: bool, context: object
    ) -> Block:
        """Mirrors ``alloc_found_block``: split off the remainder, mark allocated, trace."""
        pool = block.pool
        if split:
            remaining = block
            block = Block(remaining.stream, size, pool, remaining.address)
            block.expandable = remaining.expandable
            block.prev = remaining.prev
            if block.prev is not None:
                block.prev.next = block
            else:  # the new block heads the segment: it carries the segment's context
                block.segment_context, remaining.segment_context = remaining.segment_context, None
            block.next = remaining
            remaining.prev = block
            remaining.address += size
            remaining.size -= size
            pool.insert_into_blocks(remaining)
        block.allocated = True
        block.requested_size = orig_size
        block.context = context
        self.active_blocks[block.address] = block
        size = block.size
        for stat, amount in (
            (self.allocation, 1),
            (self.allocated_bytes, size),
            (self.active, 1),
            (self.active_bytes, size),
            (self.requested_bytes, orig_size),
        ):  # increase_stat, inlined: this runs on every allocation
            stat.current += amount
            stat.allocated += amount
            if stat.current > stat.peak:  # noqa: PLR1730  # see Stat.increase
                stat.peak = stat.current
        if self.trace_blocks:
            self.on_trace("alloc", block.address, orig_size, block.stream)
        return block


def _expandable_size(block: Block) -> int:
    """Size a free expandable block can grow to (it and the unmapped range after it)."""
    following = block.next
    return block.size + (following.size if following is not None and not following.mapped else 0)
