"""The one model of PyTorch's caching allocator, shared by the ``sim`` device and the replay.

Pure Python, deterministic, no torch, no clock, no I/O: requests and frees in, placement out,
each decision named and made as ``c10/cuda/CUDACachingAllocator.cpp`` makes it.
"""

from memforensics.allocator._blocks import (
    K_LARGE_BUFFER,
    K_MIN_BLOCK_SIZE,
    K_MIN_LARGE_ALLOC,
    K_ROUND_LARGE,
    K_SMALL_BUFFER,
    K_SMALL_SIZE,
    Block,
    BlockPool,
    ExpandableSegment,
    segment_blocks,
)
from memforensics.allocator._caching import BASE_ADDRESS, DeviceCachingAllocator, OomInfo, Stat
from memforensics.allocator._conf import (
    ConfRules,
    RecordedSettings,
    SettingsError,
    apply_assignment,
    apply_conf,
    from_snapshot,
    parse_conf,
    read_snapshot_settings,
    rules_for,
)
from memforensics.allocator._seed import SeedBlock, seed_expandable, seed_segment
from memforensics.allocator._settings import (
    NO_LIMIT,
    AllocatorSettings,
    deciding_settings,
    get_allocation_size,
    largest_block,
    round_size,
    roundup_power2_next_division,
)

__all__ = [
    "BASE_ADDRESS",
    "K_LARGE_BUFFER",
    "K_MIN_BLOCK_SIZE",
    "K_MIN_LARGE_ALLOC",
    "K_ROUND_LARGE",
    "K_SMALL_BUFFER",
    "K_SMALL_SIZE",
    "NO_LIMIT",
    "AllocatorSettings",
    "Block",
    "BlockPool",
    "ConfRules",
    "DeviceCachingAllocator",
    "ExpandableSegment",
    "OomInfo",
    "RecordedSettings",
    "SeedBlock",
    "SettingsError",
    "Stat",
    "apply_assignment",
    "apply_conf",
    "deciding_settings",
    "from_snapshot",
    "get_allocation_size",
    "largest_block",
    "parse_conf",
    "read_snapshot_settings",
    "round_size",
    "roundup_power2_next_division",
    "rules_for",
    "seed_expandable",
    "seed_segment",
    "segment_blocks",
]
