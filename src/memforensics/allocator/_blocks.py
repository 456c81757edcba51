"""Blocks and block pools: the data the caching allocator places requests in.

Each type mirrors the struct of the same name in ``c10/cuda/CUDACachingAllocator.cpp``. Pools keep
their free blocks ordered as ``BlockComparatorSize`` orders them (stream, size, address) so a
best-fit search is one bisection; unmapped expandable ranges are ordered by (stream, address) as
``BlockComparatorAddress`` orders them.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from memforensics.allocator._expandable import ExpandableSegment

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

    __slots__ = ("blocks", "get_free_blocks_call_count", "is_small", "keys", "ukeys", "unmapped")

    def __init__(self, is_small: bool) -> None:
        self.is_small = is_small
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
