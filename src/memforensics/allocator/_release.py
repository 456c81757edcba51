"""Giving cached memory back to the device: on failure, on ``empty_cache()``, or by age.

Mirrors ``release_available_cached_blocks`` (with ``max_split_size_mb``: free oversize cached
blocks, just enough for the request), ``release_cached_blocks`` (sync pending frees, then free
every unsplit cached segment and unmap the whole free pages of expandable ones) and
``garbage_collect_cached_blocks`` (under a memory fraction and a ``garbage_collection_threshold``:
free the unsplit large blocks that have waited longest, before asking for a new segment).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

from memforensics.allocator._blocks import Block, BlockPool
from memforensics.allocator._settings import NO_LIMIT, AllocatorSettings
from memforensics.allocator._stats import Stat


class ReleaseCachedBlocks:
    """The release methods of ``DeviceCachingAllocator`` (which provides the state)."""

    settings: AllocatorSettings
    allowed: int | None
    total_allocated_memory: int
    reserved_bytes: Stat
    segment: Stat
    num_device_free: int
    large_blocks: BlockPool
    small_blocks: BlockPool
    on_trace: Callable[[str, int, int, int], None]

    # provided by the allocator and its expandable-segment methods (annotations only, so the
    # real methods are found whatever the order of the bases)
    synchronize_and_free_events: Callable[[], None]
    unmap_block: Callable[[Block], None]
    release_expandable_segment: Callable[[Block], None]

    def release_available_cached_blocks(self, size: int, stream: int, pool: BlockPool) -> bool:
        """Mirrors ``release_available_cached_blocks``: free oversize blocks, just enough."""
        max_split = self.settings.max_split_size
        if max_split == NO_LIMIT:
            return False
        key_size = max(size, max_split)
        keys = pool.keys
        i = bisect_left(keys, (stream, key_size, 0))
        if i < len(keys) and keys[i][0] == stream:
            return self._release_if_whole(pool.blocks[keys[i][2]])
        if i == 0:
            return False
        released = 0
        i -= 1
        while released < key_size and keys[i][1] >= max_split and keys[i][0] == stream:
            block = pool.blocks[keys[i][2]]
            released += block.size
            self._release_if_whole(block)
            if i == 0:
                break
            i -= 1
        return released >= key_size

    def _release_if_whole(self, block: Block) -> bool:
        """``release_block`` for a whole cudaMalloc'd block (PyTorch asserts it is one)."""
        if block.expandable is not None or block.is_split():
            return False
        self.release_block(block)
        return True

    def release_cached_blocks(self) -> bool:
        """Mirrors ``release_cached_blocks``: sync frees, then release every unsplit block."""
        self.synchronize_and_free_events()
        self.release_blocks(self.large_blocks)
        self.release_blocks(self.small_blocks)
        return True

    def release_blocks(self, pool: BlockPool) -> None:
        """Mirrors ``release_blocks``: unsplit segments go back; expandable pages are unmapped."""
        to_unmap: list[Block] = []
        for _stream, _size, address in list(pool.keys):
            block = pool.blocks[address]
            if block.expandable is not None:
                to_unmap.append(block)
            elif block.prev is None and block.next is None:
                self.release_block(block)
        for block in to_unmap:
            self.unmap_block(block)
            if block.prev is None and block.next is None and not block.mapped:
                self.release_expandable_segment(block)

    def release_block(self, block: Block) -> None:
        """Mirrors ``release_block``: ``cudaFree`` one whole segment."""
        self.num_device_free += 1
        self.on_trace("segment_free", block.address, block.size, block.stream)
        self.total_allocated_memory -= block.size
        self.segment.decrease(1)
        self.reserved_bytes.decrease(block.size)
        block.pool.erase(block)

    def garbage_collect_cached_blocks(self) -> None:
        """Mirrors ``garbage_collect_cached_blocks``: release aged unsplit large blocks."""
        assert self.allowed is not None  # only called under a memory fraction
        threshold = int(self.settings.garbage_collection_threshold * self.allowed)
        if self.total_allocated_memory <= threshold:
            return
        target = self.total_allocated_memory - threshold
        pool = self.large_blocks
        freeable = [pool.blocks[key[2]] for key in pool.keys]
        freeable = [b for b in freeable if not b.is_split() and b.expandable is None]
        total_age = sum(block.gc_count() for block in freeable)
        count = len(freeable)
        reclaimed, freed_one = 0, True
        while reclaimed < target and freed_one and count > 0:
            age_threshold = total_age / count
            freed_one = False
            for _stream, _size, address in list(pool.keys):
                block = pool.blocks.get(address)
                if block is None or block.is_split() or block.expandable is not None:
                    continue
                if block.gc_count() >= age_threshold:
                    freed_one = True
                    reclaimed += block.size
                    total_age -= block.gc_count()
                    count -= 1
                    self.release_block(block)
