"""Block size of a trace allocation: the one unit every figure of live bytes is counted in.

A trace's ``alloc`` and free entries carry the caller's request; segments and blocks carry the
rounded block size, which is what occupies the device and what PyTorch's ``allocated_bytes``
counter counts. Kinds, the peak, the timeline and ``diff`` all count blocks, so a trace
allocation is counted at its block's size: the snapshot's own block where the snapshot still
holds it, else the allocator model's ``round_size`` under the recorded settings.

Rounding is a floor, not always the block: the allocator hands over a free block without
splitting it when the remainder would be too small to keep (at most 1 MiB in the large pool, or
``max_non_split_rounding_mb`` above ``max_split_size_mb``), so a block freed during the trace may
have been up to that much bigger than its rounded request.
"""

from __future__ import annotations

from memforensics.allocator import AllocatorSettings, round_size


def block_size(settings: AllocatorSettings, requested: int, known: int | None = None) -> int:
    """The block a trace allocation of ``requested`` bytes occupied.

    ``known``: the snapshot's block at the allocation's address, when it is still live there
    (it wins: it is what the allocator really handed over). Otherwise ``round_size`` under
    ``settings``; a request of 0 bytes (or none) occupies no block.
    """
    if known is not None and known > 0:
        return known
    if requested <= 0:
        return 0
    return round_size(settings, requested)
