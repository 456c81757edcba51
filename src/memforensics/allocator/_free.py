"""Freeing a block: merging it with free neighbours and waiting for other streams.

Mirrors ``free_block``, ``try_merge_blocks``, ``insert_events``, ``process_events`` and
``synchronize_and_free_events``. Split from :mod:`memforensics.allocator._caching`: what
happens to a block after ``free`` is a seam of its own in ``CUDACachingAllocator.cpp`` too.
"""

from __future__ import annotations

from collections.abc import Callable

from memforensics.allocator._blocks import Block, BlockPool
from memforensics.allocator._stats import Stat


class FreeBlocks:
    """The free and merge methods of ``DeviceCachingAllocator`` (which provides the state)."""

    trace_blocks: bool
    active_blocks: dict[int, Block]
    pending: list[Block]
    active: Stat
    active_bytes: Stat
    requested_bytes: Stat
    num_sync_all_streams: int
    on_trace: Callable[[str, int, int, int], None]

    def free_block(self, block: Block) -> None:
        """Mirrors ``free_block``: merge with free neighbours and return to the pool."""
        if self.trace_blocks:
            self.on_trace("free_completed", block.address, block.requested_size, block.stream)
        del self.active_blocks[block.address]
        block.context = None
        original_size, requested = block.size, block.requested_size
        pool = block.pool
        self.try_merge_blocks(block, block.prev, pool)
        self.try_merge_blocks(block, block.next, pool)
        pool.insert_into_blocks(block)
        for stat, amount in (
            (self.active, 1),
            (self.active_bytes, original_size),
            (self.requested_bytes, requested),
        ):  # decrease_stat, inlined: this runs on every free
            stat.current -= amount
            stat.freed += amount

    def try_merge_blocks(self, dst: Block, src: Block | None, pool: BlockPool) -> int:
        """Mirrors ``try_merge_blocks``: absorb ``src`` into ``dst``; the bytes absorbed."""
        if (
            src is None
            or src.allocated
            or src.event_count > 0
            or src.stream_uses
            or dst.mapped != src.mapped
        ):
            return 0
        if src.mapped:
            pool.erase(src)
        else:
            pool.erase_unmapped(src)
        if dst.prev is src:
            dst.address = src.address
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
            dst.segment_context = src.segment_context
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    def insert_events(self, block: Block) -> None:
        """Mirrors ``insert_events``: one pending event per stream that used the block."""
        block.event_count += len(block.stream_uses)
        block.stream_uses = set()
        self.pending.append(block)

    def process_events(self) -> None:
        """Mirrors ``process_events``; here every recorded event has fired."""
        pending, self.pending = self.pending, []
        for block in pending:
            block.event_count = 0
            self.free_block(block)

    def synchronize_and_free_events(self) -> None:
        """Mirrors ``synchronize_and_free_events``."""
        self.num_sync_all_streams += 1
        self.process_events()
