"""Questions the replay asks the allocator model without changing its state.

The trace records segment releases but not the ``empty_cache()`` calls that caused them, so
the replay has to infer them by asking the model what it would have done (would a cached block
serve this request? would a new segment fit?), and leaving it as it was. The replay's other
helpers that look into or restore the model are here too.
"""

from __future__ import annotations

from memforensics.allocator import Block, DeviceCachingAllocator
from memforensics.analysis.replay.events import OOM, REQUESTS

RELEASES = ("segment_free", "segment_unmap")


def emptied(
    model: DeviceCachingAllocator,
    real: list[tuple[str, int, int]],
    code: int,
    size: int | None,
    stream: int,
) -> bool:
    """Were the recorded releases before this event an ``empty_cache()`` call?

    A request's own retry releases cached blocks only when no cached block serves it, so if
    one would (the model checks without changing its state) the releases came first. Before a
    failed request they are otherwise its retry; before anything else, releases alone are
    ``empty_cache()``, and so is a release of every wholly free segment (then both orders give
    the same state). Before an ``alloc``'s new segment they are its retry only when the device
    had no room for that segment.
    """
    request = size if code in REQUESTS else None  # the requested bytes (None: no request)
    if request is not None and _cached_block_fits(model, request, stream):
        return True
    if code == OOM:
        return False
    if all(event[0] in RELEASES for event in real):
        return True
    freed = {event[1] for event in real if event[0] == "segment_free"}
    if freed and not any(event[0] == "segment_unmap" for event in real):
        whole = {
            block.address
            for pool in (model.small_blocks, model.large_blocks)
            for block in pool.blocks.values()
            if not block.is_split() and block.expandable is None
        }
        return whole <= freed
    if request is None:
        return False
    rounded = model.round_size(request)
    total = model.total_allocated_memory
    settings = model.settings
    threshold = settings.garbage_collection_threshold
    if model.allowed is not None and threshold > 0.0 and total > threshold * model.allowed:
        return False  # the releases were the garbage collection before a new segment
    alloc_size = model.get_allocation_size(rounded)
    if model.allowed is not None and total + alloc_size > model.allowed:
        return False
    need = rounded if settings.expandable_segments else alloc_size
    return total + need <= model.capacity


def _cached_block_fits(model: DeviceCachingAllocator, size: int, stream: int) -> bool:
    """Would ``get_free_block`` serve this request now? (The model's state is left as it was.)"""
    rounded = model.round_size(size)
    pool = model.small_blocks if rounded <= (1 << 20) else model.large_blocks
    calls = pool.get_free_blocks_call_count
    block = model.get_free_block(rounded, stream, pool)
    pool.get_free_blocks_call_count = calls
    if block is None:
        return False
    base = block.gc_count_base
    pool.insert_into_blocks(block)
    block.gc_count_base = base
    return True


def undo_malloc(model: DeviceCachingAllocator, block: Block) -> None:
    """Give back a block the model served where the real allocator failed."""
    hook = model.on_trace
    model.on_trace = _silent
    model.free(block)
    model.on_trace = hook


def _silent(action: str, addr: int, size: int, stream: int) -> None:
    """A trace hook that records nothing."""


def largest_free(model: DeviceCachingAllocator, size: int, stream: object) -> int:
    """Largest free block of the failing request's pool and stream."""
    pool = model.small_blocks if size <= (1 << 20) else model.large_blocks
    wanted = stream if type(stream) is int else 0
    sizes = [key[1] for key in pool.keys if key[0] == wanted]
    return max(sizes, default=0)
