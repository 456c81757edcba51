"""Segment and block bookkeeping of the simulated caching allocator, in torch's formats.

This is the part of PyTorch's ``CUDACachingAllocator`` that decides *where* memory goes: sizes are
rounded, requests are served best-fit from cached inactive blocks of the right pool, blocks are
split, and freed blocks merge with inactive neighbours. Fragmentation therefore comes out as it
does on a GPU: reserved segments with free holes that a large request cannot use. The constants
are CUDA's. No locking and no tracing here: ``sim.SimDevice`` owns both.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable
from typing import Any

MIN_BLOCK_SIZE = 512  # kMinBlockSize: every block size is a multiple of this
SMALL_SIZE = 1 << 20  # kSmallSize: requests up to this size use the small pool
SMALL_BUFFER = 2 << 20  # kSmallBuffer: segment size of the small pool
LARGE_BUFFER = 20 << 20  # kLargeBuffer: segment size for large requests below MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: from here a request gets a segment of its own
ROUND_LARGE = 2 << 20  # kRoundLarge: own segments round up to this; also the address alignment
BASE_ADDRESS = 0x7F0000000000  # looks like the device addresses real CUDA snapshots show

Frame = tuple[str, int, str]
"""One Python frame as ``(filename, line, name)``: immutable so stacks can be shared."""
Stack = tuple[Frame, ...]
"""Frames innermost first, as torch stores them."""
Entry = tuple[str, int, int, int, Stack, str, "int | None"]
"""A trace event as stored: action, addr, size, time_us, stack, user_metadata, device_free."""
FrameLists = Callable[[Stack], list[dict[str, Any]]]
"""Turns a stored stack into the snapshot's list of frame dicts."""
SegmentHook = Callable[[str, "Segment"], None]
"""Told ``("segment_alloc" | "segment_free", segment)`` so the device can trace it."""


def round_size(nbytes: int) -> int:
    """Block size for a request: at least 512 bytes and a multiple of 512."""
    return max(MIN_BLOCK_SIZE, -(-nbytes // MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE)


def segment_size(size: int) -> int:
    """Bytes the allocator asks the device for when no cached block fits (``alloc_size``)."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


class Block:
    """A contiguous range inside one segment: allocated to a tensor, or an inactive hole."""

    __slots__ = (
        "address",
        "allocated",
        "metadata",
        "next",
        "prev",
        "requested",
        "segment",
        "size",
        "stack",
    )

    def __init__(self, segment: Segment, address: int, size: int) -> None:
        self.segment = segment
        self.address = address
        self.size = size
        self.requested = 0
        self.allocated = False
        self.stack: Stack = ()
        self.metadata = ""
        self.prev: Block | None = None
        self.next: Block | None = None


class Segment:
    """One device allocation (``cudaMalloc``) that the allocator carves into blocks."""

    __slots__ = ("address", "head", "pool", "size", "stack")

    def __init__(self, address: int, size: int, pool: str, stack: Stack) -> None:
        self.address = address
        self.size = size
        self.pool = pool
        self.stack = stack
        self.head = Block(self, address, size)

    def blocks(self) -> list[Block]:
        """The segment's blocks in address order."""
        found: list[Block] = []
        block: Block | None = self.head
        while block is not None:
            found.append(block)
            block = block.next
        return found


class Stat:
    """One torch-style statistic: current, peak, and cumulative allocated / freed."""

    __slots__ = ("allocated", "current", "freed", "peak")

    def __init__(self) -> None:
        self.current = self.peak = self.allocated = self.freed = 0

    def increase(self, amount: int) -> None:
        """Add ``amount`` and raise the peak if needed."""
        self.current += amount
        self.allocated += amount
        self.peak = max(self.peak, self.current)

    def decrease(self, amount: int) -> None:
        """Remove ``amount``."""
        self.current -= amount
        self.freed += amount


class Pool:
    """Inactive blocks of one pool, kept sorted by ``(size, address)`` for best-fit search."""

    __slots__ = ("by_address", "keys")

    def __init__(self) -> None:
        self.keys: list[tuple[int, int]] = []
        self.by_address: dict[int, Block] = {}

    def add(self, block: Block) -> None:
        """Make ``block`` available to later requests."""
        insort(self.keys, (block.size, block.address))
        self.by_address[block.address] = block

    def remove(self, block: Block) -> None:
        """Take ``block`` out of the free lists (it is being used or merged away)."""
        del self.keys[bisect_left(self.keys, (block.size, block.address))]
        del self.by_address[block.address]

    def best_fit(self, size: int) -> Block | None:
        """The smallest inactive block of at least ``size`` bytes (lowest address on ties)."""
        index = bisect_left(self.keys, (size, 0))
        return self.by_address[self.keys[index][1]] if index < len(self.keys) else None


class Allocator:
    """Placement and statistics of the simulated allocator (callers hold the device lock)."""

    def __init__(self, total_bytes: int, on_segment: SegmentHook) -> None:
        self.total_bytes = total_bytes
        self.on_segment = on_segment
        self.segments: dict[int, Segment] = {}
        self.pools = {"small": Pool(), "large": Pool()}
        self.next_address = BASE_ADDRESS
        self.allocated, self.requested, self.reserved = Stat(), Stat(), Stat()
        self.allocations, self.segment_count = Stat(), Stat()
        self.num_alloc_retries = self.num_ooms = 0

    def malloc(self, nbytes: int, stack: Stack, metadata: str) -> Block | None:
        """Allocate ``nbytes``; None when the device budget is exhausted even after a retry."""
        size = round_size(nbytes)
        pool = "small" if size <= SMALL_SIZE else "large"
        block = self.pools[pool].best_fit(size)
        if block is not None:
            self.pools[pool].remove(block)
        else:
            segment = self._new_segment(pool, segment_size(size), stack)
            if segment is None:
                return None
            block = segment.head
        self._split(block, size, pool)
        block.allocated, block.requested = True, nbytes
        block.stack, block.metadata = stack, metadata
        self.allocated.increase(block.size)
        self.requested.increase(nbytes)
        self.allocations.increase(1)
        return block

    def free(self, block: Block) -> None:
        """Return ``block`` to its pool, merged with inactive neighbours in the same segment."""
        self.allocated.decrease(block.size)
        self.requested.decrease(block.requested)
        self.allocations.decrease(1)
        block.allocated, block.requested, block.stack, block.metadata = False, 0, (), ""
        pool = self.pools[block.segment.pool]
        for neighbour in (block.prev, block.next):
            if neighbour is not None and not neighbour.allocated:
                pool.remove(neighbour)
                block = _merge(block, neighbour)
        pool.add(block)

    def release_cached(self) -> None:
        """Give every fully free segment back to the device, as ``empty_cache`` does."""
        for segment in sorted(self.segments.values(), key=lambda seg: seg.address):
            head = segment.head
            if head.allocated or head.next is not None:
                continue
            self.pools[segment.pool].remove(head)
            del self.segments[segment.address]
            self.reserved.decrease(segment.size)
            self.segment_count.decrease(1)
            self.on_segment("segment_free", segment)

    def inactive_split(self) -> tuple[int, int]:
        """Bytes and number of inactive blocks in split segments: torch's fragmentation figure."""
        holes = [
            block.size
            for pool in self.pools.values()
            for block in pool.by_address.values()
            if block.prev is not None or block.next is not None
        ]
        return sum(holes), len(holes)

    def _new_segment(self, pool: str, size: int, stack: Stack) -> Segment | None:
        """Reserve a segment, retrying once after releasing cached segments, as torch does."""
        if self.reserved.current + size > self.total_bytes:
            self.num_alloc_retries += 1
            self.release_cached()
            if self.reserved.current + size > self.total_bytes:
                return None
        segment = Segment(self.next_address, size, pool, stack)
        self.next_address += -(-size // ROUND_LARGE) * ROUND_LARGE
        self.segments[segment.address] = segment
        self.reserved.increase(size)
        self.segment_count.increase(1)
        self.on_segment("segment_alloc", segment)
        return segment

    def _split(self, block: Block, size: int, pool: str) -> None:
        """Cut ``block`` down to ``size`` when torch would; the remainder becomes inactive.

        torch splits a small-pool block whenever 512 bytes remain, a large-pool block only
        when more than 1 MiB would remain: otherwise the tail stays inside the block.
        """
        remaining = block.size - size
        if remaining < (MIN_BLOCK_SIZE if pool == "small" else SMALL_SIZE + 1):
            return
        rest = Block(block.segment, block.address + size, remaining)
        rest.prev, rest.next = block, block.next
        if block.next is not None:
            block.next.prev = rest
        block.next, block.size = rest, size
        self.pools[pool].add(rest)


def _merge(block: Block, neighbour: Block) -> Block:
    """Join two adjacent blocks of one segment; returns the survivor (the lower address)."""
    low, high = (block, neighbour) if block.address < neighbour.address else (neighbour, block)
    low.size += high.size
    low.next = high.next
    if high.next is not None:
        high.next.prev = low
    return low


# -- torch's formats


def memory_stats(allocator: Allocator) -> dict[str, int]:
    """The allocator's statistics under the key names of ``torch.cuda.memory_stats()``."""
    split_bytes, split_count = allocator.inactive_split()
    stats = {
        "inactive_split_bytes.all.current": split_bytes,
        "inactive_split.all.current": split_count,
        "num_alloc_retries": allocator.num_alloc_retries,
        "num_ooms": allocator.num_ooms,
        "num_device_alloc": allocator.segment_count.allocated,
        "num_device_free": allocator.segment_count.freed,
        "num_sync_all_streams": 0,
        "max_split_size": -1,
    }
    named = {
        "allocated_bytes": allocator.allocated,
        "active_bytes": allocator.allocated,  # one stream, no deferred frees: active = allocated
        "requested_bytes": allocator.requested,
        "reserved_bytes": allocator.reserved,
        "allocation": allocator.allocations,
        "active": allocator.allocations,
        "segment": allocator.segment_count,
    }
    for name, stat in named.items():
        for field in ("current", "peak", "allocated", "freed"):
            stats[f"{name}.all.{field}"] = getattr(stat, field)
    return dict(sorted(stats.items()))


def frame_dict(frame: Frame) -> dict[str, Any]:
    """One frame as torch writes it."""
    return {"filename": frame[0], "line": frame[1], "name": frame[2]}


def segment_dict(segment: Segment, device: int, frames: FrameLists) -> dict[str, Any]:
    """One segment and its blocks as ``torch.cuda.memory._snapshot()`` writes them."""
    blocks = [block_dict(block, frames) for block in segment.blocks()]
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    return {
        "device": device,
        "address": segment.address,
        "total_size": segment.size,
        "allocated_size": allocated,
        "active_size": allocated,
        "requested_size": sum(b["requested_size"] for b in blocks),
        "stream": 0,
        "segment_type": segment.pool,
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": frames(segment.stack),
        "blocks": blocks,
    }


def block_dict(block: Block, frames: FrameLists) -> dict[str, Any]:
    """One block; inactive ones have no frames and a zero ``requested_size``, as in torch."""
    found: dict[str, Any] = {
        "address": block.address,
        "size": block.size,
        "requested_size": block.requested,
        "state": "active_allocated" if block.allocated else "inactive",
        "frames": frames(block.stack),
    }
    if block.metadata:
        found["user_metadata"] = block.metadata
    return found


def entry_dict(entry: Entry, frames: FrameLists) -> dict[str, Any]:
    """One trace event; an ``oom`` event also carries ``device_free``."""
    action, addr, size, time_us, stack, metadata, device_free = entry
    found: dict[str, Any] = {
        "action": action,
        "addr": addr,
        "size": size,
        "stream": 0,
        "time_us": time_us,
        "frames": frames(stack),
        "user_metadata": metadata,
    }
    if device_free is not None:
        found["device_free"] = device_free
    return found


def allocator_settings() -> dict[str, Any]:
    """What torch reports as ``allocator_settings`` with ``PYTORCH_CUDA_ALLOC_CONF`` unset."""
    return {
        "PYTORCH_CUDA_ALLOC_CONF": "",
        "max_split_size": -1,
        "garbage_collection_threshold": 0.0,
        "expandable_segments": False,
        "pinned_num_register_threads": 1,
        "release_lock_on_cudamalloc": False,
        "pinned_use_cuda_host_register": False,
        "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)},
    }
