"""The journal's allocator figures, from ``memory_stats()`` and ``mem_get_info()`` results.

One mapping for every backend that speaks PyTorch's statistic names (cuda, npu and the sim), so
a journal line means the same on each. Only the ``all`` pool and the counters are read; the
peaks are the allocator's own since start (``reset_peak_memory_stats`` belongs to the user).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

JOURNAL_STATS: tuple[str, ...] = (
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "alloc_retries",
    "ooms",
    "device_free_bytes",
    "device_total_bytes",
)
"""The keys ``DeviceBackend.journal_stats()`` returns, each an int or None."""

_FROM_STATS = (
    ("allocated_bytes", "allocated_bytes.all.current"),
    ("reserved_bytes", "reserved_bytes.all.current"),
    ("active_bytes", "active_bytes.all.current"),
    ("peak_allocated_bytes", "allocated_bytes.all.peak"),
    ("peak_reserved_bytes", "reserved_bytes.all.peak"),
    ("alloc_retries", "num_alloc_retries"),
    ("ooms", "num_ooms"),
)

EMPTY_STATS: dict[str, int | None] = dict.fromkeys(JOURNAL_STATS)


def journal_stats_from(
    stats: Mapping[str, Any] | None, info: tuple[int, int] | None
) -> dict[str, int | None]:
    """Pick the journal's figures out of ``memory_stats()`` and ``(free, total)``.

    Values are passed through as the framework gave them (ints); the journal writes them with
    ``int()``, so this runs once per line with no per-value check.
    """
    get = (stats or EMPTY_STATS).get
    out: dict[str, int | None] = {key: get(name) for key, name in _FROM_STATS}
    if info is None:
        out["device_free_bytes"] = out["device_total_bytes"] = None
    else:
        out["device_free_bytes"], out["device_total_bytes"] = info
    return out


def pressure_from_nested(stats: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(num_alloc_retries, reserved_bytes.all.current)`` of ``memory_stats_as_nested_dict()``;
    None when the allocator reports neither (an uninitialized device gives an empty dict)."""
    try:
        return int(stats["num_alloc_retries"]), int(stats["reserved_bytes"]["all"]["current"])
    except (KeyError, TypeError, ValueError):
        return None
