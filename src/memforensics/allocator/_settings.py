"""The caching allocator's settings: one frozen value, what ``CUDAAllocatorConfig`` holds.

Only the keys that decide *placement* are kept. The value prints back as the shortest conf
string that parses to it (:meth:`AllocatorSettings.to_conf`) and as the ``allocator_settings``
dict a snapshot reports (:meth:`AllocatorSettings.to_snapshot`); reading it from a conf string,
a ``--set`` assignment or a snapshot is :mod:`~memforensics.allocator._conf`'s work.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from memforensics.allocator._blocks import (
    K_LARGE_BUFFER,
    K_MIN_BLOCK_SIZE,
    K_MIN_LARGE_ALLOC,
    K_ROUND_LARGE,
    K_SMALL_BUFFER,
    K_SMALL_SIZE,
)

MiB = 1 << 20  # the unit of the conf string's ``*_mb`` options
NO_LIMIT = (1 << 64) - 1  # std::numeric_limits<size_t>::max(): max_split_size unset
ROUNDUP_INTERVALS = 16  # kRoundUpPowerOfTwoIntervals: 1 MiB .. 64 GiB


@dataclass(frozen=True, slots=True)
class AllocatorSettings:
    """The settings that decide where a request goes (``CUDAAllocatorConfig``'s fields).

    ``max_split_size`` is :data:`NO_LIMIT` unless set; ``roundup_power2_divisions`` holds one
    entry per power-of-two interval from 1 MiB (index 0) to 32 GiB and above (index 15);
    ``large_segment_size`` is the segment of a 1-10 MiB request (newer PyTorch's
    ``large_segment_size_mb``; torch_npu calls its counterpart ``segment_size_mb``);
    ``memory_fraction`` is the conf key ``per_process_memory_fraction`` (None: not set), the
    share of the device the process may reserve, as ``set_per_process_memory_fraction`` sets it.
    """

    max_split_size: int = NO_LIMIT
    max_non_split_rounding_size: int = K_LARGE_BUFFER
    garbage_collection_threshold: float = 0.0
    roundup_power2_divisions: tuple[int, ...] = field(default=(0,) * ROUNDUP_INTERVALS)
    expandable_segments: bool = False
    large_segment_size: int = K_LARGE_BUFFER
    memory_fraction: float | None = None  # per_process_memory_fraction in the conf string

    def divisions(self, size: int) -> int:
        """Divisions for ``size`` (mirrors ``CUDAAllocatorConfig::roundup_power2_divisions``)."""
        index = max(size.bit_length() - 1, 0) - 20
        return self.roundup_power2_divisions[min(max(index, 0), ROUNDUP_INTERVALS - 1)]

    def to_conf(self) -> str:
        """The shortest conf string that parses back to these settings."""
        parts: list[str] = []
        if self.max_split_size != NO_LIMIT:
            parts.append(f"max_split_size_mb:{self.max_split_size // MiB}")
        if self.max_non_split_rounding_size != K_LARGE_BUFFER:
            parts.append(f"max_non_split_rounding_mb:{self.max_non_split_rounding_size // MiB}")
        if self.garbage_collection_threshold:
            parts.append(f"garbage_collection_threshold:{self.garbage_collection_threshold:g}")
        if any(self.roundup_power2_divisions):
            first = self.roundup_power2_divisions[0]
            if all(value == first for value in self.roundup_power2_divisions):
                parts.append(f"roundup_power2_divisions:{first}")
            else:
                pairs = [f"{1 << i}:{v}" for i, v in enumerate(self.roundup_power2_divisions)]
                parts.append(f"roundup_power2_divisions:[{','.join(pairs)}]")
        if self.expandable_segments:
            parts.append("expandable_segments:True")
        if self.large_segment_size != K_LARGE_BUFFER:
            parts.append(f"large_segment_size_mb:{self.large_segment_size // MiB}")
        if self.memory_fraction is not None:
            parts.append(f"per_process_memory_fraction:{self.memory_fraction!r}")
        return ",".join(parts)

    def to_snapshot(self) -> dict[str, Any]:
        """The ``allocator_settings`` dict ``torch.cuda.memory._snapshot()`` reports."""
        return {
            "PYTORCH_CUDA_ALLOC_CONF": self.to_conf(),
            "max_split_size": -1 if self.max_split_size == NO_LIMIT else self.max_split_size,
            "garbage_collection_threshold": self.garbage_collection_threshold,
            "expandable_segments": self.expandable_segments,
            "pinned_num_register_threads": 1,
            "release_lock_on_cudamalloc": False,
            "pinned_use_cuda_host_register": False,
            "roundup_power2_divisions": {
                str(1 << i): value for i, value in enumerate(self.roundup_power2_divisions)
            },
        }


# Sizes: what block a request gets and what segment the device is asked for.


def round_size(settings: AllocatorSettings, size: int) -> int:
    """Mirrors ``round_size``: the block size a request of ``size`` bytes gets."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    divisions = settings.divisions(size)
    if divisions > 1 and size > K_MIN_BLOCK_SIZE * divisions:
        return roundup_power2_next_division(size, divisions)
    return -(-size // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE


def get_allocation_size(settings: AllocatorSettings, size: int) -> int:
    """Mirrors ``get_allocation_size``: what ``cudaMalloc`` is asked for a block of ``size``."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return settings.large_segment_size
    return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """Mirrors ``roundup_power2_next_division``: next of ``divisions`` steps per power of 2."""
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    rounded = size & ~(step - 1)
    return size if rounded == size else rounded + step


# Settings that cannot change a single decision of a run, and the settings a run decides by.
#
# Two what-if rows whose settings differ only in what cannot matter on a trace make the same
# decisions at every request, so one run answers both. Two such cases are proven here from the
# model's code:
#
# - ``garbage_collection_threshold`` without a memory fraction: every place that reads it
#   (``malloc``'s collection, ``get_free_block``'s age count) first checks ``allowed``;
# - ``max_split_size`` (with ``max_non_split_rounding_size``, read only beyond it) above every
#   block the run can hold: blocks never outgrow the segment they are cut from, and no segment
#   outgrows :func:`largest_block`, so every comparison with ``max_split_size`` in
#   ``get_free_block``, ``should_split`` and ``release_available_cached_blocks`` comes out as it
#   does with no limit. Expandable segments grow blocks past one request's segment: there the
#   limit is always kept.


def largest_block(settings: AllocatorSettings, largest_request: int) -> int:
    """No block or segment of a non-expandable run whose requests are at most
    ``largest_request`` bytes is larger than this (an upper bound over every rounded request
    and every size ``get_allocation_size`` can return for one)."""
    rounded = round_size(settings, max(largest_request, 0))
    own_segment = -(-rounded // K_ROUND_LARGE) * K_ROUND_LARGE
    return max(rounded, own_segment, K_SMALL_BUFFER, settings.large_segment_size)


def deciding_settings(
    settings: AllocatorSettings, *, fraction: bool, largest_request: int
) -> AllocatorSettings:
    """``settings`` with what cannot change a decision set to its default: a run under either
    makes the same decisions, when ``fraction`` says whether a memory fraction limits the
    device and no request of the run exceeds ``largest_request`` bytes."""
    if not fraction and settings.garbage_collection_threshold:
        settings = replace(settings, garbage_collection_threshold=0.0)
    if (
        not settings.expandable_segments
        and settings.max_split_size != NO_LIMIT
        and settings.max_split_size > largest_block(settings, largest_request)
    ):
        settings = replace(
            settings, max_split_size=NO_LIMIT, max_non_split_rounding_size=K_LARGE_BUFFER
        )
    return settings
