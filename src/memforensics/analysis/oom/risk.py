"""A near-OOM dump read: why memory counted as tight, with fragmentation and headroom then.

A ``near-oom`` snapshot is taken while training still runs (the allocator retried a failed
device malloc, or reserved plus outside-PyTorch bytes neared the limit), so it has no OOM to
judge. What it can say is how close the rank was: the retries so far, how much of the reserved
memory sat free in pieces (fragmentation), and how much of the limit was left (headroom). The
figures come from the sidecar's ``near_oom`` object (read at the step's end by capture) and
from the snapshot's own segments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memforensics import _layout
from memforensics._units import outside_pytorch_bytes
from memforensics.analysis.dump import Dump
from memforensics.analysis.dump.model import as_int


@dataclass(frozen=True, slots=True)
class AtRisk:
    """How close a near-OOM snapshot's rank was to failing; None where unrecorded."""

    reason: str | None
    """The sidecar's ``reason`` (``alloc_retries 0 → 1 at step 5``)."""
    trigger: str | None
    """``"alloc_retries"`` or ``"fraction"``."""
    alloc_retries: int | None
    """The allocator's ``num_alloc_retries`` when the snapshot was taken."""
    reserved_bytes: int
    """Reserved bytes in the snapshot's segments."""
    free_in_reserved_bytes: int
    """Reserved but unallocated bytes: what fragmentation can strand."""
    largest_free_block_bytes: int
    device_total_bytes: int | None
    outside_pytorch_bytes: int | None
    headroom_bytes: int | None
    """``limit - reserved - outside PyTorch``: what the allocator could still get."""

    @property
    def fragmentation(self) -> float | None:
        """Share of the free bytes inside reserved memory that lie outside its largest free
        block: 0 when all of it is one block, near 1 when it is scattered in small pieces."""
        if self.free_in_reserved_bytes <= 0:
            return None
        return 1.0 - self.largest_free_block_bytes / self.free_in_reserved_bytes


def at_risk(dump: Dump, *, free_in_reserved: int, largest_free_block: int) -> AtRisk | None:
    """What a near-OOM dump says about its rank; None for every other kind of dump."""
    if dump.meta.kind != _layout.NEAR_OOM:
        return None
    side = dump.meta.sidecar
    near = side.get("near_oom")
    figures: dict[str, Any] = near if isinstance(near, dict) else {}
    reserved = sum(segment.total_size for segment in dump.segments)
    limit = as_int(figures.get("device_total_bytes"))
    free = as_int(figures.get("device_free_bytes"))
    outside = outside_pytorch_bytes(limit, free, reserved)
    headroom = None
    if limit is not None:
        headroom = max(limit - reserved - (outside or 0), 0)
    reason = side.get("reason")
    trigger = figures.get("trigger")
    return AtRisk(
        reason=reason if isinstance(reason, str) else None,
        trigger=trigger if isinstance(trigger, str) else None,
        alloc_retries=as_int(figures.get("alloc_retries")),
        reserved_bytes=reserved,
        free_in_reserved_bytes=free_in_reserved,
        largest_free_block_bytes=largest_free_block,
        device_total_bytes=limit,
        outside_pytorch_bytes=outside,
        headroom_bytes=headroom,
    )
