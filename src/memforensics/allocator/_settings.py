"""The caching allocator's settings: one frozen value, parsed as PyTorch parses the conf string.

``PYTORCH_CUDA_ALLOC_CONF`` (Ascend: ``PYTORCH_NPU_ALLOC_CONF``) is lexed into tokens at ``,``
``:`` ``[`` ``]`` with spaces dropped, then read key by key, with the same limits PyTorch checks
(mirrors ``CUDAAllocatorConfig::lexArgs`` / ``parseArgs`` in ``c10/cuda/CUDAAllocatorConfig.cpp``).
Only the keys that decide *placement* are kept; pinned-memory and lock options are accepted and
ignored, like an unknown ``backend`` would be by a model that only knows the native allocator.
A snapshot's ``allocator_settings`` dict (what ``_snapshot()`` reports) converts back into this
value, so a replay runs under exactly the settings the dump was taken with. The lexer and
parser live in :mod:`~memforensics.allocator._conf`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from memforensics.allocator._conf import (
    K_LARGE_BUFFER,
    ROUNDUP_INTERVALS,
    MiB,
    SettingsError,
    apply_tokens,
    lex,
)

NO_LIMIT = (1 << 64) - 1  # std::numeric_limits<size_t>::max(): max_split_size unset


@dataclass(frozen=True, slots=True)
class AllocatorSettings:
    """The settings that decide where a request goes (``CUDAAllocatorConfig``'s fields).

    ``max_split_size`` is :data:`NO_LIMIT` unless set; ``roundup_power2_divisions`` holds one
    entry per power-of-two interval from 1 MiB (index 0) to 32 GiB and above (index 15);
    ``large_segment_size`` is the segment of a 1-10 MiB request (newer PyTorch's
    ``large_segment_size_mb``; torch_npu calls its counterpart ``segment_size_mb``).
    """

    max_split_size: int = NO_LIMIT
    max_non_split_rounding_size: int = K_LARGE_BUFFER
    garbage_collection_threshold: float = 0.0
    roundup_power2_divisions: tuple[int, ...] = field(default=(0,) * ROUNDUP_INTERVALS)
    expandable_segments: bool = False
    large_segment_size: int = K_LARGE_BUFFER

    def divisions(self, size: int) -> int:
        """Divisions for ``size`` (mirrors ``CUDAAllocatorConfig::roundup_power2_divisions``)."""
        index = max(size.bit_length() - 1, 0) - 20
        return self.roundup_power2_divisions[min(max(index, 0), ROUNDUP_INTERVALS - 1)]

    def with_option(self, key: str, value: str) -> AllocatorSettings:
        """These settings with one more ``key:value`` applied, as if appended to the conf."""
        return apply_tokens(self, lex(f"{key}:{value}"))

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


def parse_conf(conf: str | None) -> AllocatorSettings:
    """Settings from a ``PYTORCH_CUDA_ALLOC_CONF`` string (None or empty: the defaults)."""
    if not conf:
        return AllocatorSettings()
    return apply_tokens(AllocatorSettings(), lex(conf))


def from_snapshot(raw: object) -> AllocatorSettings | None:
    """Settings from a snapshot's ``allocator_settings``; None when absent or unreadable.

    The parsed fields win over the conf string (they are what the allocator used); the conf
    string fills what older PyTorch does not report (``max_non_split_rounding_mb``).
    """
    if not isinstance(raw, Mapping):
        return None
    conf = raw.get("PYTORCH_CUDA_ALLOC_CONF")
    try:
        settings = parse_conf(conf) if isinstance(conf, str) else AllocatorSettings()
    except SettingsError:
        settings = AllocatorSettings()
    split = raw.get("max_split_size")
    if isinstance(split, int) and not isinstance(split, bool):
        settings = replace(settings, max_split_size=NO_LIMIT if split < 0 else split)
    threshold = raw.get("garbage_collection_threshold")
    if isinstance(threshold, int | float) and not isinstance(threshold, bool):
        settings = replace(settings, garbage_collection_threshold=float(threshold))
    expandable = raw.get("expandable_segments")
    if isinstance(expandable, bool):
        settings = replace(settings, expandable_segments=expandable)
    divisions = _snapshot_divisions(raw.get("roundup_power2_divisions"))
    if divisions is not None:
        settings = replace(settings, roundup_power2_divisions=divisions)
    return settings


def _snapshot_divisions(raw: object) -> tuple[int, ...] | None:
    """``roundup_power2_divisions`` as a dict ``{"1": 0, ...}`` (newer) or list (older)."""
    values: list[object]
    if isinstance(raw, Mapping):
        values = [raw[key] for key in sorted(raw, key=lambda k: int(k) if str(k).isdigit() else 0)]
    elif isinstance(raw, list):
        values = list(raw)
    else:
        return None
    if len(values) != ROUNDUP_INTERVALS or not all(type(v) is int and v >= 0 for v in values):
        return None
    return tuple(int(str(v)) for v in values)


def apply_assignment(settings: AllocatorSettings, assignment: str) -> AllocatorSettings:
    """``settings`` with a ``key=value`` (or ``key:value``) from ``--set`` applied."""
    key, sep, value = assignment.partition("=")
    if not sep:
        key, sep, value = assignment.partition(":")
    if not sep or not key.strip() or not value.strip():
        raise SettingsError(f"expected KEY=VALUE, got {assignment!r}")
    return settings.with_option(key.strip(), value.strip())
