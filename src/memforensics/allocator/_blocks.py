"""Blocks and block pools: the data the caching allocator places requests in.

Each type mirrors the struct of the same name in ``c10/cuda/CUDACachingAllocator.cpp``. Pools keep
their free blocks ordered as ``BlockComparatorSize`` orders them (stream, size, address) so a
best-fit search is one bisection; unmapped expandable ranges are ordered by (stream, address) as
``BlockComparatorAddress`` orders them.
"""

from __future__ import annotations

from bisect import bisect_left, insort

# An expandable segment: one reserved range of address space, backed by device pages on demand.
#
# Mirrors ``struct ExpandableSegment`` in ``c10/cuda/CUDACachingAllocator.cpp``. Under
# ``expandable_segments:True`` the allocator reserves one such range per stream and pool (9/8 of
# the device, as PyTorch reserves it) and maps pages into it as requests need them: 2 MiB pages
# in the small pool, ``large_segment_size`` ones in the large pool. The segment knows only its
# address space and its pages; which blocks lie in it, and which of them are mapped, the
# allocator's blocks say (``Block.mapped``), as PyTorch keeps it.


class ExpandableSegment:
    """Mirrors ``struct ExpandableSegment``: reserved address space, mapped page by page.

    Mapping needs a page of device memory each; the allocator says how many bytes the device
    can still give (``cuMemCreate`` failing is an OOM).
    """

    __slots__ = ("address", "max_pages", "page_size", "stream")

    def __init__(self, address: int, stream: int, page_size: int, address_space: int) -> None:
        self.address = address
        self.stream = stream
        self.page_size = page_size
        self.max_pages = -(-address_space // page_size)

    def size(self) -> int:
        """Bytes of address space (``ExpandableSegment::size``)."""
        return self.max_pages * self.page_size

    def page_range(self, address: int, size: int, *, inner: bool) -> tuple[int, int]:
        """Pages covering ``[address, address + size)``; ``inner``: only pages wholly inside
        (``segmentLeft`` / ``segmentRight`` the other way round)."""
        start, end = address - self.address, address - self.address + size
        page = self.page_size
        if inner:
            return -(-start // page), end // page
        return start // page, -(-end // page)

    def map(self, address: int, size: int, available: int) -> int:
        """Mirrors ``ExpandableSegment::map``: back the pages covering the range with device
        memory; the bytes mapped from ``address``, 0 when they need more than the ``available``
        bytes the device can still give (``cuMemCreate`` fails: PyTorch releases the pages
        it made and maps none)."""
        begin, end = self.page_range(address, size, inner=False)
        mapped = (end - begin) * self.page_size
        if mapped == 0 or mapped > available:
            return 0
        return mapped

    def unmap(self, address: int, size: int) -> tuple[int, int]:
        """Mirrors ``ExpandableSegment::unmap``: give back the pages wholly inside the range;
        the ``(address, size)`` unmapped, size 0 when no whole page lies inside."""
        begin, end = self.page_range(address, size, inner=True)
        if begin >= end:
            return address, 0
        start = self.address + begin * self.page_size
        unmapped = (end - begin) * self.page_size
        return start, unmapped


K_MIN_BLOCK_SIZE = 512  # kMinBlockSize: every block size is a multiple of this
K_SMALL_SIZE = 1 << 20  # kSmallSize: requests up to this size use the small pool
K_SMALL_BUFFER = 2 << 20  # kSmallBuffer: segment (and expandable page) size of the small pool
K_LARGE_BUFFER = 20 << 20  # kLargeBuffer: segment of a 1-10 MiB request; large expandable page
K_MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: from here a request gets a segment of its own
K_ROUND_LARGE = 2 << 20  # kRoundLarge: own segments are rounded up to this


class Block:
    """A range of one segment: allocated to a tensor, pending its streams, free, or unmapped.

    Mirrors ``struct Block``. ``event_count`` > 0 means freed by the program but still in use
    by another stream (``active_pending_free``); ``context`` and ``segment_context`` are opaque
    to the model (the sim keeps stacks there, the replay the trace index).
    """

    __slots__ = (
        "address",
        "allocated",
        "context",
        "event_count",
        "expandable",
        "gc_count_base",
        "mapped",
        "next",
        "pool",
        "prev",
        "requested_size",
        "segment_context",
        "size",
        "stream",
        "stream_uses",
    )

    def __init__(self, stream: int, size: int, pool: BlockPool, address: int) -> None:
        self.stream = stream
        self.size = size
        self.pool = pool
        self.address = address
        self.requested_size = 0
        self.allocated = False
        self.mapped = True
        self.prev: Block | None = None
        self.next: Block | None = None
        self.event_count = 0
        self.stream_uses: set[int] = set()
        self.gc_count_base = 0
        self.context: object = None
        self.segment_context: object = None
        self.expandable: ExpandableSegment | None = None

    def is_split(self) -> bool:
        """Mirrors ``Block::is_split``."""
        return self.prev is not None or self.next is not None

    def splice(self, before: Block | None, after: Block | None) -> None:
        """Mirrors ``Block::splice``: put this block between ``before`` and ``after``."""
        if before is not None:
            before.next = self
        self.prev = before
        if after is not None:
            after.prev = self
        self.next = after

    def gc_count(self) -> int:
        """Mirrors ``Block::gc_count``: free-block searches since this block became free."""
        return self.pool.get_free_blocks_call_count - self.gc_count_base

    def __repr__(self) -> str:
        state = "allocated" if self.allocated else ("mapped" if self.mapped else "unmapped")
        return f"Block({self.address:#x}, {self.size}, stream={self.stream}, {state})"


class BlockPool:
    """Mirrors ``struct BlockPool``: the free blocks of one pool, best-fit ordered."""

    __slots__ = (
        "blocks",
        "get_free_blocks_call_count",
        "is_small",
        "keys",
        "owner",
        "ukeys",
        "unmapped",
    )

    def __init__(self, is_small: bool, owner: tuple[int, int] = (0, 0)) -> None:
        self.is_small = is_small
        self.owner = owner  # the private pool's id (``owner_MempoolId``); (0, 0): the device's
        self.keys: list[tuple[int, int, int]] = []  # (stream, size, address), sorted
        self.blocks: dict[int, Block] = {}  # address -> free mapped block
        self.ukeys: list[tuple[int, int]] = []  # (stream, address), sorted
        self.unmapped: dict[int, Block] = {}
        self.get_free_blocks_call_count = 0

    def insert_into_blocks(self, block: Block) -> None:
        """Mirrors ``BlockPool::insert_into_blocks`` (stamps the GC age base)."""
        block.gc_count_base = self.get_free_blocks_call_count
        insort(self.keys, (block.stream, block.size, block.address))
        self.blocks[block.address] = block

    def erase(self, block: Block) -> None:
        """Take a free block out of ``blocks`` (it is being used, merged or released)."""
        key = (block.stream, block.size, block.address)
        del self.keys[bisect_left(self.keys, key)]
        del self.blocks[block.address]

    def insert_unmapped(self, block: Block) -> None:
        """Add an unmapped expandable range."""
        insort(self.ukeys, (block.stream, block.address))
        self.unmapped[block.address] = block

    def erase_unmapped(self, block: Block) -> None:
        """Remove an unmapped expandable range."""
        del self.ukeys[bisect_left(self.ukeys, (block.stream, block.address))]
        del self.unmapped[block.address]


def segment_blocks(head: Block) -> list[Block]:
    """The blocks of the segment ``head`` starts, up to the first unmapped range."""
    found: list[Block] = []
    block: Block | None = head
    while block is not None and block.mapped:
        found.append(block)
        block = block.next
    return found


class PrivatePool:
    """Mirrors ``struct PrivatePool``: a CUDA graph's or ``MemPool``'s own pair of pools. Its
    segments serve only allocations made into it, and stay reserved until no graph or pool
    uses it (``use_count`` 0) and the cache is emptied."""

    __slots__ = ("id", "large_blocks", "small_blocks", "use_count")

    def __init__(self, pool_id: tuple[int, int]) -> None:
        self.id = pool_id
        self.large_blocks = BlockPool(is_small=False, owner=pool_id)
        self.small_blocks = BlockPool(is_small=True, owner=pool_id)
        self.use_count = 1
