"""The caching allocator's settings: one frozen value, what ``CUDAAllocatorConfig`` holds.

Only the keys that decide *placement* are kept. The value prints back as the shortest conf
string that parses to it (:meth:`AllocatorSettings.to_conf`) and as the ``allocator_settings``
dict a snapshot reports (:meth:`AllocatorSettings.to_snapshot`); reading it from a conf string,
a ``--set`` assignment or a snapshot is :mod:`~memforensics.allocator._conf`'s work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memforensics.allocator._blocks import K_LARGE_BUFFER

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
