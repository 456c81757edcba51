"""The caching allocator's decisions, method by method as ``DeviceCachingAllocator`` makes them.

Every method carries the name of the C++ function it mirrors in
``c10/cuda/CUDACachingAllocator.cpp``; read them side by side. Private pools (a CUDA graph's,
a ``MemPool``'s) are kept as PyTorch keeps them. What the model leaves out, on purpose: IPC,
the free-memory callbacks registry (no effect on placement), and timing (a freed block used
by another stream completes its free at the next ``process_events`` here, which in PyTorch
happens whenever its event has fired). The device is
two numbers: ``capacity`` (bytes ``cudaMalloc`` / ``cuMemCreate`` can still get for this process,
i.e. the limit less memory outside PyTorch) and ``allowed`` (``set_per_process_memory_fraction``'s
limit, None when unset, which also leaves ``garbage_collection_threshold`` inert, as in PyTorch).

The allocator holds its pools (:class:`~memforensics.allocator._blocks.BlockPool`) and, under
``expandable_segments:True``, one :class:`~memforensics.allocator._blocks.ExpandableSegment`
per reserved address space; the blocks and the decisions are its own, as in PyTorch.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass

from memforensics.allocator._blocks import (
    K_MIN_BLOCK_SIZE,
    K_ROUND_LARGE,
    K_SMALL_BUFFER,
    K_SMALL_SIZE,
    Block,
    BlockPool,
    ExpandableSegment,
    PrivatePool,
)
from memforensics.allocator._settings import (
    NO_LIMIT,
    AllocatorSettings,
    get_allocation_size,
    round_size,
)

# The allocator's statistics and the record of its last failure (``struct Stat``).


class Stat:
    """Mirrors ``struct Stat``: current, peak, and cumulative allocated / freed."""

    __slots__ = ("allocated", "current", "freed", "peak")

    def __init__(self) -> None:
        self.current = self.peak = self.allocated = self.freed = 0

    def increase(self, amount: int) -> None:
        """Mirrors ``increase_stat``."""
        self.current += amount
        self.allocated += amount
        if self.current > self.peak:  # noqa: PLR1730  # max() costs a call on every allocation
            self.peak = self.current

    def decrease(self, amount: int) -> None:
        """Mirrors ``decrease_stat``."""
        self.current -= amount
        self.freed += amount


class PoolStats:
    """The statistics ``memory_stats()`` keeps for one kind of pool, small or large
    (``StatType::SMALL_POOL``, ``LARGE_POOL``): each block and segment counts toward its pool's
    kind as well as toward the aggregate, as ``get_stat_types_for_pool`` selects them."""

    __slots__ = (
        "active",
        "active_bytes",
        "allocated_bytes",
        "allocation",
        "inactive_split",
        "inactive_split_bytes",
        "requested_bytes",
        "reserved_bytes",
        "segment",
    )

    def __init__(self) -> None:
        self.allocation, self.allocated_bytes = Stat(), Stat()
        self.active, self.active_bytes, self.requested_bytes = Stat(), Stat(), Stat()
        self.reserved_bytes, self.segment = Stat(), Stat()
        self.inactive_split, self.inactive_split_bytes = Stat(), Stat()


@dataclass(frozen=True, slots=True)
class OomInfo:
    """The last failed request: rounded size, what was asked of the device, device free."""

    size: int
    alloc_size: int
    device_free: int


_ROUNDED_KEPT = 1 << 16  # distinct request sizes whose rounding one allocator remembers
BASE_ADDRESS = 0x7F0000000000  # looks like the device addresses real CUDA snapshots show
TraceHook = Callable[[str, int, int, int, object], None]
"""Told ``(action, addr, size, stream, kept)`` for every trace entry PyTorch would record
(``oom`` passes the device's free bytes as ``addr``, as ``record_trace`` does). ``kept``: the
context PyTorch records where the operation gathered none (``context ? context :
block->...``): a free event's block's allocation context, a ``segment_free`` or
``segment_unmap``'s segment's; None for the other events, which take the operation's."""
AddressHook = Callable[[int, bool], "int | None"]
"""Chooses the address of a new segment (``size``, ``expandable``); None: the model picks."""


def _no_trace(action: str, addr: int, size: int, stream: int, kept: object) -> None:
    """The default trace hook: record nothing."""


class DeviceCachingAllocator:
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
        all_stats: bool = True,
    ) -> None:
        self.settings = settings
        self.capacity = capacity
        self.allowed = allowed
        self.device_total = device_total if device_total is not None else capacity
        self.on_trace = on_trace
        self.address_of = address_of
        self.auto_events = auto_events
        self.trace_blocks = trace_blocks  # False: only segment and oom events reach on_trace
        # False: of the per-block stats only allocated_bytes is kept (a replay reads no other;
        # the four it skips cost a fifth of each malloc/free); segment stats are always kept
        self.all_stats = all_stats
        self._plain_rounding = not any(settings.roundup_power2_divisions)
        self._rounded: dict[int, int] = {}  # round_size per request size, for these settings
        self.large_blocks = BlockPool(is_small=False)
        self.small_blocks = BlockPool(is_small=True)
        self.graph_pools: dict[tuple[int, int], PrivatePool] = {}
        self.graph_pools_freeable: dict[tuple[int, int], PrivatePool] = {}
        # (pool id, which streams' allocations go to it), as ``beginAllocateToPool`` adds them
        self.captures_underway: list[tuple[tuple[int, int], Callable[[int], bool]]] = []
        self.active_blocks: dict[int, Block] = {}
        self.pending: list[Block] = []  # freed, waiting for other streams (cuda_events)
        self.expandable_segments: list[ExpandableSegment] = []
        self.total_allocated_memory = 0
        self.next_address = BASE_ADDRESS
        self.segments_held: dict[int, int] = {}  # address -> size of each cudaMalloc segment
        self.held_top = 0  # no segment or address space the model has held ends above this
        self.allocation, self.allocated_bytes = Stat(), Stat()
        self.active, self.active_bytes, self.requested_bytes = Stat(), Stat(), Stat()
        self.reserved_bytes, self.segment = Stat(), Stat()
        # free blocks of split segments (not expandable ones): memory no empty_cache returns
        self.inactive_split, self.inactive_split_bytes = Stat(), Stat()
        # blocks and segments of at least max_split_size (none while it is unlimited)
        self.oversize_allocations, self.oversize_segments = Stat(), Stat()
        self.small_pool, self.large_pool = PoolStats(), PoolStats()
        self.num_alloc_retries = self.num_ooms = self.num_sync_all_streams = 0
        self.num_device_alloc = self.num_device_free = 0
        self.last_oom: OomInfo | None = None

    # -- public operations (malloc, free, recordStream, emptyCache)

    def configure(self, settings: AllocatorSettings) -> None:
        """New settings from now on, as ``_set_allocator_settings`` gives PyTorch's allocator:
        later requests are rounded, split and placed by them; segments made keep their kind."""
        self.settings = settings
        self._plain_rounding = not any(settings.roundup_power2_divisions)
        self._rounded = {}

    def malloc(self, orig_size: int, stream: int = 0, context: object = None) -> Block | None:
        """Mirrors ``malloc``: a block for ``orig_size`` bytes, or None for an OOM."""
        if self.pending and self.auto_events:
            self.process_events()
        if self._plain_rounding:  # round_size without roundup_power2_divisions, inlined
            size = -(-orig_size // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE
            if size < K_MIN_BLOCK_SIZE:  # noqa: PLR1730 - max() costs a call on every request
                size = K_MIN_BLOCK_SIZE
        else:  # requests repeat their sizes: each is rounded once (up to _ROUNDED_KEPT)
            size = self._rounded.get(orig_size, 0)
            if not size:
                size = self.round_size(orig_size)
                if len(self._rounded) < _ROUNDED_KEPT:
                    self._rounded[orig_size] = size
        pool = (
            self.get_pool(size, stream)
            if self.captures_underway  # a private pool's, while a capture is underway
            else self.small_blocks
            if size <= K_SMALL_SIZE
            else self.large_blocks
        )
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
            self.on_trace("oom", device_free, size, stream, None)
            self.num_ooms += 1
            self.last_oom = OomInfo(size, alloc_size, device_free)
            return None
        split = self.should_split(block, size)
        return self.alloc_found_block(block, size, orig_size, split, context)

    def free(self, block: Block) -> None:
        """Mirrors ``free``: deferred while other streams use the block, else ``free_block``."""
        block.allocated = False
        allocated = self.allocated_bytes  # decrease_stat, inlined
        allocated.current -= block.size
        allocated.freed += block.size
        if self.all_stats:
            allocation = self.allocation
            allocation.current -= 1
            allocation.freed += 1
            kind = self.small_pool if block.pool.is_small else self.large_pool
            stat = kind.allocated_bytes
            stat.current -= block.size
            stat.freed += block.size
            stat = kind.allocation
            stat.current -= 1
            stat.freed += 1
        if self.trace_blocks:
            self.on_trace(
                "free_requested", block.address, block.requested_size, block.stream, block.context
            )
        if block.size >= self.settings.max_split_size:
            self.oversize_allocations.decrease(1)
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

    # -- private pools (CUDA graphs, ``MemPool``)

    def get_pool(self, size: int, stream: int) -> BlockPool:
        """Mirrors ``get_pool``: a private pool's while an allocation to it is underway on
        ``stream``, else the device's."""
        for pool_id, accepts in self.captures_underway:
            if accepts(stream):
                private = self.graph_pools[pool_id]
                return private.small_blocks if size <= K_SMALL_SIZE else private.large_blocks
        return self.small_blocks if size <= K_SMALL_SIZE else self.large_blocks

    def create_or_incref_pool(self, pool_id: tuple[int, int]) -> None:
        """Mirrors ``create_or_incref_pool``: a new pool used once, or one more use of it."""
        private = self.graph_pools.get(pool_id)
        if private is None:
            self.graph_pools[pool_id] = PrivatePool(pool_id)
        else:
            private.use_count += 1

    def begin_allocate_to_pool(
        self, pool_id: tuple[int, int], accepts: Callable[[int], bool]
    ) -> None:
        """Mirrors ``beginAllocateToPool`` (a graph's capture, ``use_mem_pool``): allocations
        on the streams ``accepts`` go to the pool until :meth:`end_allocate_to_pool`."""
        self.create_or_incref_pool(pool_id)
        if any(found == pool_id for found, _ in self.captures_underway):
            raise ValueError("beginAllocateToPool: already recording to mempool_id")
        self.captures_underway.append((pool_id, accepts))

    def end_allocate_to_pool(self, pool_id: tuple[int, int]) -> None:
        """Mirrors ``endAllocateToPool``."""
        for i, (found, _) in enumerate(self.captures_underway):
            if found == pool_id:
                del self.captures_underway[i]
                return
        raise ValueError("endAllocatePool: not currently recording to mempool_id")

    def release_pool(self, pool_id: tuple[int, int]) -> None:
        """Mirrors ``releasePool`` (a graph reset or deleted, a ``MemPool`` gone): one use
        less; unused, the pool's free segments go back at the next ``release_cached_blocks``."""
        private = self.graph_pools.get(pool_id)
        if private is None:
            return
        private.use_count -= 1
        if private.use_count == 0:
            self.graph_pools_freeable[pool_id] = private

    def pool_use_count(self, pool_id: tuple[int, int]) -> int:
        """Mirrors ``getPoolUseCount`` (0 for a pool never used)."""
        private = self.graph_pools.get(pool_id)
        return private.use_count if private is not None else 0

    def _pools(self) -> list[BlockPool]:
        """The device's pools and every private pool's."""
        pools = [self.small_blocks, self.large_blocks]
        for private in self.graph_pools.values():
            pools += [private.small_blocks, private.large_blocks]
        return pools

    # -- sizes

    def round_size(self, size: int) -> int:
        """Mirrors ``round_size`` (with ``roundup_power2_next_division``)."""
        return round_size(self.settings, size)

    def get_allocation_size(self, size: int) -> int:
        """Mirrors ``get_allocation_size``: what ``cudaMalloc`` is asked for."""
        return get_allocation_size(self.settings, size)

    # -- finding a cached block and splitting off what the request does not need

    def get_free_block(self, size: int, stream: int, pool: BlockPool) -> Block | None:
        """Mirrors ``get_free_block``: best fit on (stream, size), then the oversize rules."""
        settings = self.settings
        if self.allowed is not None and settings.garbage_collection_threshold > 0.0:
            pool.get_free_blocks_call_count += 1
        keys, blocks = pool.keys, pool.blocks
        i = bisect_left(keys, (stream, size, 0))
        if i == len(keys) or keys[i][0] != stream:
            return None
        block = blocks[keys[i][2]]
        if block.expandable is not None:
            if settings.expandable_segments:
                j = i + 1
                while (
                    block.expandable is not None
                    and j < len(keys)
                    and keys[j][0] == stream
                    and _expandable_size(blocks[keys[j][2]]) < _expandable_size(block)
                ):
                    block = blocks[keys[j][2]]
                    i = j
                    j += 1
            else:
                i += 1
                while i < len(keys) and keys[i][0] == stream and blocks[keys[i][2]].expandable:
                    i += 1
                if i == len(keys) or keys[i][0] != stream:
                    return None
                block = blocks[keys[i][2]]
        max_split = settings.max_split_size
        if size < max_split and block.size >= max_split:
            return None  # do not return an oversized block for a smaller request
        if size >= max_split and block.size >= size + settings.max_non_split_rounding_size:
            return None  # an oversized block may be rounded up only so far
        del keys[i]  # pool.erase(block), its key's index known
        del blocks[block.address]
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
        # which change to the inactive split blocks this makes, as alloc_found_block reckons it
        already_split = block.expandable is None and (
            block.prev is not None or block.next is not None
        )
        remaining = block
        if split:
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
        # increase_stat on each stat, unrolled: this runs on every allocation
        stat = self.allocated_bytes
        stat.current += size
        stat.allocated += size
        if stat.current > stat.peak:  # noqa: PLR1730  # see Stat.increase
            stat.peak = stat.current
        if self.all_stats:
            self._count_allocation(size, orig_size)
            kind = self.small_pool if pool.is_small else self.large_pool
            self._count_allocation_in(kind, size, orig_size)
            if block.expandable is None and (split or already_split):
                self._count_inactive_split(kind, split, already_split, block, remaining)
        if size >= self.settings.max_split_size:
            self.oversize_allocations.increase(1)
        if self.trace_blocks:
            self.on_trace("alloc", block.address, orig_size, block.stream, None)
        return block

    def _count_inactive_split(
        self, kind: PoolStats, split: bool, already_split: bool, block: Block, remaining: Block
    ) -> None:
        """``alloc_found_block``'s inactive split statistics: a split free block shrinks by the
        allocation; an unsplit one split leaves a new inactive remainder; a split free block
        taken whole is active again."""
        for owner in (self, kind):
            if split and already_split:
                owner.inactive_split_bytes.decrease(block.size)
            elif split:
                owner.inactive_split_bytes.increase(remaining.size)
                owner.inactive_split.increase(1)
            else:
                owner.inactive_split_bytes.decrease(block.size)
                owner.inactive_split.decrease(1)

    def _count_allocation(self, size: int, orig_size: int) -> None:
        """``increase_stat`` on the allocation count, active and requested stats."""
        stat = self.allocation
        stat.current += 1
        stat.allocated += 1
        if stat.current > stat.peak:  # noqa: PLR1730  # see Stat.increase
            stat.peak = stat.current
        stat = self.active
        stat.current += 1
        stat.allocated += 1
        if stat.current > stat.peak:  # noqa: PLR1730  # see Stat.increase
            stat.peak = stat.current
        stat = self.active_bytes
        stat.current += size
        stat.allocated += size
        if stat.current > stat.peak:  # noqa: PLR1730  # see Stat.increase
            stat.peak = stat.current
        stat = self.requested_bytes
        stat.current += orig_size
        stat.allocated += orig_size
        if stat.current > stat.peak:  # noqa: PLR1730  # see Stat.increase
            stat.peak = stat.current

    @staticmethod
    def _count_allocation_in(kind: PoolStats, size: int, orig_size: int) -> None:
        """``increase_stat`` on the per-block stats of the allocation's kind of pool."""
        for stat, amount in (
            (kind.allocated_bytes, size),
            (kind.allocation, 1),
            (kind.active, 1),
            (kind.active_bytes, size),
            (kind.requested_bytes, orig_size),
        ):
            stat.current += amount
            stat.allocated += amount
            if stat.current > stat.peak:  # noqa: PLR1730  # see Stat.increase
                stat.peak = stat.current

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
        self.hold_segment(address, alloc_size)
        self.reserved_bytes.increase(alloc_size)
        kind = self.small_pool if pool.is_small else self.large_pool
        kind.segment.increase(1)
        kind.reserved_bytes.increase(alloc_size)
        if alloc_size >= self.settings.max_split_size:
            self.oversize_segments.increase(1)
        self.num_device_alloc += 1
        self.on_trace("segment_alloc", address, alloc_size, stream, None)
        return block

    def _new_address(self, size: int, *, expandable: bool) -> int:
        """Where the device puts a new segment: the hook's choice, else the next free range;
        never over a segment or address space the model holds (the device would not)."""
        span = -(-size // K_ROUND_LARGE) * K_ROUND_LARGE
        chosen = self.address_of(size, expandable) if self.address_of is not None else None
        if chosen is not None and self._held_until(chosen, span) is None:
            return chosen
        address = self.next_address
        while (end := self._held_until(address, span)) is not None:
            address = -(-end // K_ROUND_LARGE) * K_ROUND_LARGE
        self.next_address = address + span
        return address

    def hold_segment(self, address: int, size: int) -> None:
        """Note a ``cudaMalloc`` segment the model now holds (no new one goes over it)."""
        self.segments_held[address] = size
        self.held_top = max(self.held_top, address + size)

    def hold_address_space(self, segment: ExpandableSegment) -> None:
        """Note an expandable segment's reserved address space (no new one goes over it)."""
        self.expandable_segments.append(segment)
        self.held_top = max(self.held_top, segment.address + segment.size())

    def _held_until(self, address: int, span: int) -> int | None:
        """The end of a segment or address space the model holds that ``span`` bytes at
        ``address`` would overlap; None when they are free."""
        if address >= self.held_top:  # the model's own next range: above all it ever held
            return None
        for start, size in self.segments_held.items():
            if start < address + span and address < start + size:
                return start + size
        for space in self.expandable_segments:
            if space.address < address + span and address < space.address + space.size():
                return space.address + space.size()
        return None

    # -- expandable segments: map pages on demand, unmap the whole free ones

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
        self.hold_address_space(segment)
        candidate = Block(stream, segment.size(), pool, address)
        candidate.mapped = False
        candidate.expandable = segment
        pool.insert_unmapped(candidate)
        return candidate

    def map_block(self, to_map: Block, size: int, context: object) -> bool:
        """Mirrors ``map_block``: back ``size`` bytes of ``to_map`` with device pages."""
        segment = to_map.expandable
        assert segment is not None  # only unmapped expandable blocks get here
        address = to_map.address
        mapped = segment.map(address, size, self.capacity - self.total_allocated_memory)
        if mapped == 0:
            return False  # cuMemCreate: out of memory
        pool = to_map.pool
        pool.erase_unmapped(to_map)
        to_map.mapped = True
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
        (self.small_pool if pool.is_small else self.large_pool).reserved_bytes.increase(mapped)
        self.num_device_alloc += 1
        self.on_trace("segment_map", address, mapped, to_map.stream, None)
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
        start, size = segment.unmap(block.address, block.size)
        if size == 0:
            return
        pool = block.pool
        pool.erase(block)
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
        kept, block.segment_context = block.segment_context, None
        self.try_merge_blocks(block, block.prev, pool)
        self.try_merge_blocks(block, block.next, pool)
        pool.insert_unmapped(block)
        self.total_allocated_memory -= size
        self.reserved_bytes.decrease(size)
        (self.small_pool if pool.is_small else self.large_pool).reserved_bytes.decrease(size)
        self.num_device_free += 1
        self.on_trace("segment_unmap", start, size, block.stream, kept)

    def release_expandable_segment(self, block: Block) -> None:
        """Mirrors ``release_expandable_segment``: drop a wholly unmapped address space."""
        block.pool.erase_unmapped(block)
        if block.expandable in self.expandable_segments:
            self.expandable_segments.remove(block.expandable)

    # -- freeing: merge with free neighbours, wait for other streams

    def free_block(self, block: Block) -> None:
        """Mirrors ``free_block``: merge with free neighbours and return to the pool."""
        if self.trace_blocks:
            self.on_trace(
                "free_completed", block.address, block.requested_size, block.stream, block.context
            )
        del self.active_blocks[block.address]
        block.context = None
        original_size, requested = block.size, block.requested_size
        pool = block.pool
        merged = merged_bytes = 0
        neighbour = block.prev
        if neighbour is not None and not neighbour.allocated:  # else try_merge_blocks does nothing
            subsumed = self.try_merge_blocks(block, neighbour, pool)
            merged, merged_bytes = merged + (subsumed > 0), merged_bytes + subsumed
        neighbour = block.next
        if neighbour is not None and not neighbour.allocated:
            subsumed = self.try_merge_blocks(block, neighbour, pool)
            merged, merged_bytes = merged + (subsumed > 0), merged_bytes + subsumed
        pool.insert_into_blocks(block)
        if not self.all_stats:
            return
        if block.expandable is None:
            # the inactive split blocks: those merged in are gone, this one is one if split
            count, size = -merged, -merged_bytes
            if block.prev is not None or block.next is not None:
                count, size = count + 1, size + block.size
            if count or size:
                kind = self.small_pool if pool.is_small else self.large_pool
                for owner in (self, kind):
                    _change(owner.inactive_split, count)
                    _change(owner.inactive_split_bytes, size)
        # decrease_stat on each stat of the aggregate and of the pool's kind, unrolled within
        # each: this runs on every free
        owners: tuple[DeviceCachingAllocator | PoolStats, ...] = (
            self, self.small_pool if pool.is_small else self.large_pool,
        )  # fmt: skip
        for owner in owners:
            stat = owner.active
            stat.current -= 1
            stat.freed += 1
            stat = owner.active_bytes
            stat.current -= original_size
            stat.freed += original_size
            stat = owner.requested_bytes
            stat.current -= requested
            stat.freed += requested

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

    # -- releasing cached memory: on failure, on ``empty_cache()``, or by age

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

    def release_cached_blocks(self, pool_id: tuple[int, int] | None = None) -> bool:
        """Mirrors ``release_cached_blocks``: sync frees, then release every unsplit block of
        the device's pools and of the private pools no graph or pool uses any more; with
        ``pool_id`` (``emptyCache(mempool_id)``), only that private pool's."""
        if pool_id is not None:
            private = self.graph_pools.get(pool_id)
            if private is not None:
                self.release_blocks(private.small_blocks)
                self.release_blocks(private.large_blocks)
                if pool_id in self.graph_pools_freeable and not self._holds_segments(private):
                    del self.graph_pools[pool_id]
                    del self.graph_pools_freeable[pool_id]
            return True
        self.synchronize_and_free_events()
        self.release_blocks(self.large_blocks)
        self.release_blocks(self.small_blocks)
        for freeable, private in list(self.graph_pools_freeable.items()):
            self.release_blocks(private.small_blocks)
            self.release_blocks(private.large_blocks)
            if not self._holds_segments(private):
                del self.graph_pools[freeable]
                del self.graph_pools_freeable[freeable]
        return True

    def _holds_segments(self, private: PrivatePool) -> bool:
        """Whether any segment of the device is the private pool's (its ``cudaMalloc_count``)."""
        pools = (private.small_blocks, private.large_blocks)
        return any(pool.blocks or pool.unmapped for pool in pools) or any(
            block.pool in pools for block in self.active_blocks.values()
        )

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
        if block.size >= self.settings.max_split_size:
            self.oversize_segments.decrease(1)
        self.num_device_free += 1
        self.on_trace(
            "segment_free", block.address, block.size, block.stream, block.segment_context
        )
        self.total_allocated_memory -= block.size
        self.segment.decrease(1)
        self.segments_held.pop(block.address, None)
        self.reserved_bytes.decrease(block.size)
        kind = self.small_pool if block.pool.is_small else self.large_pool
        kind.segment.decrease(1)
        kind.reserved_bytes.decrease(block.size)
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

    # -- reading the state

    def segment_heads(self) -> list[Block]:
        """First block of each segment, by address; an expandable segment reports one per
        contiguous mapped range, as ``snapshot()`` does."""
        heads = [
            block
            for pool in self._pools()
            for block in pool.blocks.values()
            if block.prev is None or not block.prev.mapped
        ]
        heads += [
            block
            for block in self.active_blocks.values()
            if block.prev is None or not block.prev.mapped
        ]
        return sorted(heads, key=lambda block: block.address)

    def split_holes(self, is_small: bool | None = None) -> tuple[int, int]:
        """Bytes and count of free blocks in split, non-expandable segments, counted afresh:
        of every pool, or of the small or the large ones alone (what the ``inactive_split``
        statistics hold now)."""
        holes = [
            block.size
            for pool in self._pools()
            if is_small is None or pool.is_small == is_small
            for block in pool.blocks.values()
            if block.is_split() and block.expandable is None
        ]
        return sum(holes), len(holes)


def _change(stat: Stat, amount: int) -> None:
    """``free_block``'s net change to a statistic: an increase or a decrease, as its sign says."""
    if amount > 0:
        stat.increase(amount)
    elif amount < 0:
        stat.decrease(-amount)


def _expandable_size(block: Block) -> int:
    """``get_free_block``'s ``expandable_size``: a free expandable block and the unmapped range
    after it, the size it can grow to."""
    following = block.next
    return block.size + (following.size if following is not None and not following.mapped else 0)


def _allocatable(block: Block | None) -> bool:
    """``find_expandable_block``'s ``allocatable``: free, and no stream still uses it."""
    return (
        block is not None
        and not block.allocated
        and block.event_count == 0
        and not block.stream_uses
    )


def _has_room(block: Block | None, size: int) -> bool:
    """``find_expandable_block``'s ``has_available_address_space``: the free and unmapped
    ranges from ``block`` on cover ``size``."""
    total = 0
    while total < size and block is not None and _allocatable(block):
        total += block.size
        block = block.next
    return total >= size
