"""How a given PyTorch release reads its allocator conf string: the rules that changed.

The keys and limits moved between releases; a dump is read by the rules of the torch that
wrote it (its sidecar's ``torch_version``), else by the newest ones known here (2.13). Each
rule names the release it first shipped in, from PyTorch's history of
``c10/cuda/CUDAAllocatorConfig.cpp`` and ``c10/core/AllocatorConfig.cpp``:

- up to 2.8 ``CUDAAllocatorConfig::parseMaxSplitSize`` (and ``max_non_split_rounding_mb``,
  added in 2.6) required a value ``> 20`` (kLargeBuffer in MiB); 2.9 moved parsing into
  ``AcceleratorAllocatorConfig`` (``c10/core/AllocatorConfig.cpp``), which accepts ``>= 20``.
- ``roundup_power2_divisions:[...,>:N]`` filled from the last interval named, overwriting it,
  up to 2.9; the fix of pytorch/pytorch#165304 (first in 2.10) fills from the interval after
  it.
- ``large_segment_size_mb`` (pytorch/pytorch#172056, first in 2.11) must be ``> 10``
  (kMinLargeAlloc in MiB); from then on ``max_split_size_mb`` and
  ``max_non_split_rounding_mb`` must be at least the large segment size, and the latter
  defaults to it.
- ``per_process_memory_fraction`` (in ``[0, 1]``), ``throw_on_cudamalloc_oom`` and
  ``pinned_free_catch_all`` are ``CUDAAllocatorConfig`` keys of 2.13.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NEWEST = (2, 13)
"""The newest release whose parser these rules were checked against."""


@dataclass(frozen=True, slots=True)
class ConfRules:
    """What one release's parser accepts where releases differ."""

    version: tuple[int, int] | None
    split_minimum_inclusive: bool  # ``max_split_size_mb:20`` is valid
    divisions_after_last: bool  # ``>`` fills from the interval after the last one named
    large_segment_key: bool  # ``large_segment_size_mb`` exists and bounds the split sizes

    def label(self) -> str:
        """``torch 2.9``, or ``torch 2.13 rules, version unknown``."""
        if self.version is None:
            return f"torch {NEWEST[0]}.{NEWEST[1]} rules, version unknown"
        return f"torch {self.version[0]}.{self.version[1]}"


def rules_for(torch_version: object) -> ConfRules:
    """The rules of the release named by ``torch_version`` (``"2.9.1+cu128"``); the newest
    known when it is absent or unreadable."""
    version = _major_minor(torch_version)
    at = version or NEWEST
    return ConfRules(
        version=version,
        split_minimum_inclusive=at >= (2, 9),
        divisions_after_last=at >= (2, 10),
        large_segment_key=at >= (2, 11),
    )


def _major_minor(torch_version: object) -> tuple[int, int] | None:
    if not isinstance(torch_version, str):
        return None
    found = re.match(r"\s*(\d+)\.(\d+)", torch_version)
    return (int(found[1]), int(found[2])) if found else None
