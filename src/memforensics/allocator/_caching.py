"""The caching allocator's decisions, method by method as ``DeviceCachingAllocator`` makes them.

Every method carries the name of the C++ function it mirrors in
``c10/cuda/CUDACachingAllocator.cpp``; read them side by side. What the model leaves out, on
purpose: CUDA graph private pools, IPC, the free-memory callbacks registry (no effect on
placement), and timing (a freed block used by another stream completes its free at the next
``process_events`` here, which in PyTorch happens whenever its event has fired). The device is
two numbers: ``capacity`` (bytes ``cudaMalloc`` / ``cuMemCreate`` can still get for this process,
i.e. the limit less memory outside PyTorch) and ``allowed`` (``set_per_process_memory_fraction``'s
limit, None when unset, which also leaves ``garbage_collection_threshold`` inert, as in PyTorch).

The methods live beside the part of the C++ they mirror: finding and splitting cached blocks in
:mod:`~memforensics.allocator._find`, freeing and merging in :mod:`~memforensics.allocator._free`,
releasing the cache in :mod:`~memforensics.allocator._release`, expandable segments in
:mod:`~memforensics.allocator._expandable`; the pools themselves in
:mod:`~memforensics.allocator._blocks`. This module keeps the entry points and the device.
"""

from __future__ import annotations

from collections.abc import Callable

from memforensics.allocator._blocks import (
    K_MIN_BLOCK_SIZE,
    K_ROUND_LARGE,
    K_SMALL_SIZE,
    Block,
    BlockPool,
    ExpandableSegment,
)
from memforensics.allocator._expandable import ExpandableSegments
from memforensics.allocator._find import FindCachedBlock
from memforensics.allocator._free import FreeBlocks
from memforensics.allocator._release import ReleaseCachedBlocks
from memforensics.allocator._settings import AllocatorSettings
from memforensics.allocator._sizes import get_allocation_size, round_size
from memforensics.allocator._stats import OomInfo, Stat

BASE_ADDRESS = 0x7F0000000000  # looks like the device addresses real CUDA snapshots show
TraceHook = Callable[[str, int, int, int], None]
"""Told ``(action, addr, size, stream)`` for every trace entry PyTorch would record
(``oom`` passes the device's free bytes as ``addr``, as ``record_trace`` does)."""
AddressHook = Callable[[int, bool], "int | None"]
"""Chooses the address of a new segment (``size``, ``expandable``); None: the model picks."""


def _no_trace(action: str, addr: int, size: int, stream: int) -> None:
    """The default trace hook: record nothing."""


class DeviceCachingAllocator(FindCachedBlock, FreeBlocks, ReleaseCachedBlocks, ExpandableSegments):
    """One device's caching allocator (mirrors ``class DeviceCachingAllocator``).

    Pure and deterministic: requests and frees in, placement and trace hook calls out.
    ``auto_events`` completes a cross-stream free at the next ``malloc`` (the sim's clock);
    the replay turns it off and completes frees where the trace says ``free_completed``.
    """

    def __init__(
        self,
        settings: AllocatorSettings,
        *,
        capacity: int,
        allowed: int | None = None,
        device_total: int | None = None,
        on_trace: TraceHook = _no_trace,
        address_of: AddressHook | None = None,
        auto_events: bool = True,
        trace_blocks: bool = True,
    ) -> None:
        self.settings = settings
        self.capacity = capacity
        self.allowed = allowed
        self.device_total = device_total if device_total is not None else capacity
        self.on_trace = on_trace
        self.address_of = address_of
        self.auto_events = auto_events
        self.trace_blocks = trace_blocks  # False: only segment and oom events reach on_trace
        self._plain_rounding = not any(settings.roundup_power2_divisions)
        self.large_blocks = BlockPool(is_small=False)
        self.small_blocks = BlockPool(is_small=True)
        self.active_blocks: dict[int, Block] = {}
        self.pending: list[Block] = []  # freed, waiting for other streams (cuda_events)
        self.expandable_segments: list[ExpandableSegment] = []
        self.total_allocated_memory = 0
        self.next_address = BASE_ADDRESS
        self.allocation, self.allocated_bytes = Stat(), Stat()
        self.active, self.active_bytes, self.requested_bytes = Stat(), Stat(), Stat()
        self.reserved_bytes, self.segment = Stat(), Stat()
        self.num_alloc_retries = self.num_ooms = self.num_sync_all_streams = 0
        self.num_device_alloc = self.num_device_free = 0
        self.last_oom: OomInfo | None = None

    # -- public operations (malloc, free, recordStream, emptyCache)

    def malloc(self, orig_size: int, stream: int = 0, context: object = None) -> Block | None:
        """Mirrors ``malloc``: a block for ``orig_size`` bytes, or None for an OOM."""
        if self.pending and self.auto_events:
            self.process_events()
        if self._plain_rounding:  # round_size without roundup_power2_divisions, inlined
            size = max(-(-orig_size // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE, K_MIN_BLOCK_SIZE)
        else:
            size = self.round_size(orig_size)
        pool = self.small_blocks if size <= K_SMALL_SIZE else self.large_blocks
        block = self.get_free_block(size, stream, pool)
        alloc_size = 0
        if block is None:
            alloc_size = self.get_allocation_size(size)
            if self.allowed is not None and self.settings.garbage_collection_threshold > 0.0:
                self.garbage_collect_cached_blocks()
            block = self.alloc_block(size, alloc_size, stream, pool, False, context)
            if block is None and self.release_available_cached_blocks(size, stream, pool):
                block = self.alloc_block(size, alloc_size, stream, pool, False, context)
            if block is None and self.release_cached_blocks():
                block = self.alloc_block(size, alloc_size, stream, pool, True, context)
        if block is None:
            alloc_size = alloc_size or self.get_allocation_size(size)
            device_free = max(self.capacity - self.total_allocated_memory, 0)
            self.on_trace("oom", device_free, size, stream)
            self.num_ooms += 1
            self.last_oom = OomInfo(size, alloc_size, device_free)
            return None
        split = self.should_split(block, size)
        return self.alloc_found_block(block, size, orig_size, split, context)

    def free(self, block: Block) -> None:
        """Mirrors ``free``: deferred while other streams use the block, else ``free_block``."""
        block.allocated = False
        allocation, allocated = self.allocation, self.allocated_bytes  # decrease_stat, inlined
        allocation.current -= 1
        allocation.freed += 1
        allocated.current -= block.size
        allocated.freed += block.size
        if self.trace_blocks:
            self.on_trace("free_requested", block.address, block.requested_size, block.stream)
        if block.stream_uses:
            self.insert_events(block)
        else:
            self.free_block(block)

    def record_stream(self, block: Block, stream: int) -> None:
        """Mirrors ``recordStream``: uses on the allocation stream need no event."""
        if stream != block.stream:
            block.stream_uses.add(stream)

    def empty_cache(self) -> None:
        """Mirrors ``emptyCache``."""
        self.release_cached_blocks()

    def complete_free(self, block: Block) -> None:
        """A cross-stream free's events fired (the replay's ``free_completed``)."""
        if block.event_count > 0 and not block.allocated:
            block.event_count = 0
            self.pending.remove(block)
            self.free_block(block)

    # -- sizes

    def round_size(self, size: int) -> int:
        """Mirrors ``round_size`` (with ``roundup_power2_next_division``)."""
        return round_size(self.settings, size)

    def get_allocation_size(self, size: int) -> int:
        """Mirrors ``get_allocation_size``: what ``cudaMalloc`` is asked for."""
        return get_allocation_size(self.settings, size)

    # -- getting memory from the device and giving it back

    def alloc_block(
        self,
        size: int,
        alloc_size: int,
        stream: int,
        pool: BlockPool,
        is_retry: bool,
        context: object,
    ) -> Block | None:
        """Mirrors ``alloc_block``: a new segment (or mapped pages) for the request."""
        if is_retry:
            self.num_alloc_retries += 1
        if self.allowed is not None and self.total_allocated_memory + alloc_size > self.allowed:
            return None
        if self.settings.expandable_segments:
            return self.try_allocate_expandable_block(stream, pool, size, context)
        if self.total_allocated_memory + alloc_size > self.capacity:
            return None  # cudaMalloc: out of memory
        address = self._new_address(alloc_size, expandable=False)
        block = Block(stream, alloc_size, pool, address)
        block.segment_context = context
        self.total_allocated_memory += alloc_size
        self.segment.increase(1)
        self.reserved_bytes.increase(alloc_size)
        self.num_device_alloc += 1
        self.on_trace("segment_alloc", address, alloc_size, stream)
        return block

    def _new_address(self, size: int, *, expandable: bool) -> int:
        """Where the device puts a new segment: the hook's choice, else the next free range."""
        chosen = self.address_of(size, expandable) if self.address_of is not None else None
        if chosen is not None:
            return chosen
        address = self.next_address
        self.next_address += -(-size // K_ROUND_LARGE) * K_ROUND_LARGE
        return address

    # -- reading the state

    def segment_heads(self) -> list[Block]:
        """First block of each segment, by address; an expandable segment reports one per
        contiguous mapped range, as ``snapshot()`` does."""
        heads = [
            block
            for pool in (self.small_blocks, self.large_blocks)
            for block in pool.blocks.values()
            if block.prev is None or not block.prev.mapped
        ]
        heads += [
            block
            for block in self.active_blocks.values()
            if block.prev is None or not block.prev.mapped
        ]
        return sorted(heads, key=lambda block: block.address)

    def inactive_split(self) -> tuple[int, int]:
        """Bytes and count of free blocks in split, non-expandable segments (PyTorch's stat)."""
        holes = [
            block.size
            for pool in (self.small_blocks, self.large_blocks)
            for block in pool.blocks.values()
            if block.is_split() and block.expandable is None
        ]
        return sum(holes), len(holes)
