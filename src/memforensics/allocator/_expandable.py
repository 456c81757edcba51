"""Expandable segments: one reserved address space per stream and pool, mapped page by page.

Mirrors the ``expandable_segments:True`` path of ``CUDACachingAllocator.cpp``: a request that no
cached block serves looks for the lowest address with enough free and unmapped room
(``find_expandable_block``), maps pages there (``map_block``: 2 MiB pages in the small pool,
20 MiB or ``large_segment_size`` in the large one), and releasing the cache unmaps the whole
pages of free blocks (``unmap_block``). A snapshot reports one segment per contiguous mapped
range; the trace records ``segment_map`` / ``segment_unmap``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

from memforensics.allocator._blocks import K_SMALL_BUFFER, Block, BlockPool, ExpandableSegment
from memforensics.allocator._settings import AllocatorSettings
from memforensics.allocator._stats import Stat


class ExpandableSegments:
    """The expandable-segment methods of ``DeviceCachingAllocator`` (which provides the state)."""

    settings: AllocatorSettings
    capacity: int
    device_total: int
    total_allocated_memory: int
    reserved_bytes: Stat
    num_device_alloc: int
    num_device_free: int
    expandable_segments: list[ExpandableSegment]
    on_trace: Callable[[str, int, int, int], None]

    # provided by the allocator (annotations only: the real methods are found by the MRO)
    try_merge_blocks: Callable[[Block, Block | None, BlockPool], int]
    _new_address: Callable[..., int]

    def find_expandable_block(self, stream: int, pool: BlockPool, size: int) -> Block:
        """Mirrors ``find_expandable_block``: lowest address with room, else a new segment."""
        keys = pool.ukeys
        i = bisect_left(keys, (stream, 0))
        while i < len(keys) and keys[i][0] == stream:
            candidate = pool.unmapped[keys[i][1]]
            if _allocatable(candidate.prev):
                assert candidate.prev is not None  # for mypy: checked just above
                candidate = candidate.prev
            if _has_room(candidate, size):
                return candidate
            i += 1
        page = K_SMALL_BUFFER if pool.is_small else self.settings.large_segment_size
        space = self.device_total + self.device_total // 8
        pages = -(-space // page)
        address = self._new_address(pages * page, expandable=True)
        segment = ExpandableSegment(address, stream, page, pages * page)
        self.expandable_segments.append(segment)
        candidate = Block(stream, segment.size(), pool, address)
        candidate.mapped = False
        candidate.expandable = segment
        pool.insert_unmapped(candidate)
        return candidate

    def map_block(self, to_map: Block, size: int, context: object) -> bool:
        """Mirrors ``map_block``: back ``size`` bytes of ``to_map`` with device pages."""
        segment = to_map.expandable
        assert segment is not None  # only unmapped expandable blocks get here
        begin, end = segment.page_range(to_map.address, size, inner=False)
        mapped = (end - begin) * segment.page_size
        if mapped == 0 or self.total_allocated_memory + mapped > self.capacity:
            return False  # cuMemCreate: out of memory (pages made so far are released)
        pool = to_map.pool
        address = to_map.address
        pool.erase_unmapped(to_map)
        to_map.mapped = True
        segment.mapped_bytes += mapped
        if mapped < to_map.size:
            remaining = Block(to_map.stream, to_map.size - mapped, pool, address + mapped)
            remaining.mapped = False
            remaining.expandable = segment
            remaining.splice(to_map, to_map.next)
            pool.insert_unmapped(remaining)
            to_map.size = mapped
        self.try_merge_blocks(to_map, to_map.prev, pool)
        self.try_merge_blocks(to_map, to_map.next, pool)
        pool.insert_into_blocks(to_map)
        self.total_allocated_memory += mapped
        self.reserved_bytes.increase(mapped)
        self.num_device_alloc += 1
        self.on_trace("segment_map", address, mapped, to_map.stream)
        if to_map.prev is None and to_map.segment_context is None:
            to_map.segment_context = context
        return True

    def try_allocate_expandable_block(
        self, stream: int, pool: BlockPool, size: int, context: object
    ) -> Block | None:
        """Mirrors ``try_allocate_expandable_block``: map pages until ``size`` fits."""
        candidate = self.find_expandable_block(stream, pool, size)
        if not candidate.mapped and not self.map_block(
            candidate, min(candidate.size, size), context
        ):
            return None
        while candidate.size < size:
            remaining = size - candidate.size
            following = candidate.next
            assert following is not None  # find_expandable_block checked room
            if not self.map_block(following, min(remaining, following.size), context):
                return None
            candidate = following
        pool.erase(candidate)
        return candidate

    def unmap_block(self, block: Block) -> None:
        """Mirrors ``unmap_block``: give back the whole pages inside a free block."""
        segment = block.expandable
        assert segment is not None  # only expandable blocks get here
        begin, end = segment.page_range(block.address, block.size, inner=True)
        if begin >= end:
            return
        pool = block.pool
        pool.erase(block)
        start = segment.address + begin * segment.page_size
        size = (end - begin) * segment.page_size
        before = start - block.address
        if before > 0:
            head = Block(block.stream, before, pool, block.address)
            head.expandable = segment
            head.splice(block.prev, block)
            pool.insert_into_blocks(head)
        after = block.size - (before + size)
        if after > 0:
            tail = Block(block.stream, after, pool, start + size)
            tail.expandable = segment
            tail.splice(block, block.next)
            pool.insert_into_blocks(tail)
        block.address, block.size, block.mapped = start, size, False
        block.segment_context = None
        segment.mapped_bytes -= size
        self.try_merge_blocks(block, block.prev, pool)
        self.try_merge_blocks(block, block.next, pool)
        pool.insert_unmapped(block)
        self.total_allocated_memory -= size
        self.reserved_bytes.decrease(size)
        self.num_device_free += 1
        self.on_trace("segment_unmap", start, size, block.stream)

    def release_expandable_segment(self, block: Block) -> None:
        """Mirrors ``release_expandable_segment``: drop a wholly unmapped address space."""
        block.pool.erase_unmapped(block)
        if block.expandable in self.expandable_segments:
            self.expandable_segments.remove(block.expandable)


def _allocatable(block: Block | None) -> bool:
    return (
        block is not None
        and not block.allocated
        and block.event_count == 0
        and not block.stream_uses
    )


def _has_room(block: Block | None, size: int) -> bool:
    """``has_available_address_space``: free and unmapped ranges from ``block`` cover ``size``."""
    total = 0
    while total < size and block is not None and _allocatable(block):
        total += block.size
        block = block.next
    return total >= size
