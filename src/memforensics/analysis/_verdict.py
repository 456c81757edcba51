"""The verdict: was the OOM fragmentation (memory there, but in pieces) or real exhaustion?

At the moment an OOM is raised the caching allocator has already released every wholly free
segment and retried, so what is left is (a) holes inside segments that still hold live blocks and
(b) whatever the device has free outside the allocator. The request failed because no single
hole and no fresh ``cudaMalloc`` could hold it. If the holes plus that free device memory
add up to the request, the bytes exist but not in one piece: fragmentation, which expandable
segments address. Otherwise live memory truly fills the device: exhaustion, fixed only by
holding less. The device's free memory is capped by ``device_total_bytes - reserved`` because a
per-process memory fraction makes that the real limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from memforensics.analysis._meta import OomRecord
from memforensics.analysis._units import format_bytes as fmt

FRAGMENTATION = "fragmentation"
EXHAUSTED = "exhausted"
NO_OOM = "no-oom"


@dataclass(frozen=True, slots=True)
class Verdict:
    """``name`` is one of ``fragmentation``, ``exhausted``, ``no-oom``; the rest is for people."""

    name: str
    explanation: str
    advice: str | None


def judge(
    *,
    oom: OomRecord | None,
    reserved: int,
    allocated: int,
    free_in_reserved: int,
    largest_free_block: int,
    top_sites: list[tuple[str, int]],
    expandable: bool,
) -> Verdict:
    """Decide the verdict from the OOM facts and the segment totals (see the module docstring)."""
    if oom is None:
        return Verdict(NO_OOM, "No out-of-memory error is recorded in this dump.", None)
    requested = oom.requested_bytes
    headroom = oom.device_free_bytes or 0
    if oom.device_total_bytes is not None:
        headroom = min(headroom, max(oom.device_total_bytes - reserved, 0))
    sites = ", ".join(f"{site} ({fmt(size)})" for site, size in top_sites) or "none recorded"
    if (
        requested is not None
        and largest_free_block < requested
        and free_in_reserved + headroom >= requested
    ):
        explanation = (
            f"{fmt(free_in_reserved)} is free inside reserved segments"
            f" (+{fmt(headroom)} free on the device), enough for the {fmt(requested)} request,"
            f" but the largest free block is only {fmt(largest_free_block)}."
        )
        advice = (
            "Expandable segments are already on: fragmentation remains, so lower the peak"
            " or release long-lived tensors that pin partly used segments."
            if expandable
            else "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (on Ascend:"
            " PYTORCH_NPU_ALLOC_CONF=expandable_segments:True) so segments can grow instead"
            " of needing one contiguous free block."
        )
        return Verdict(FRAGMENTATION, explanation, advice)
    wanted = fmt(requested) if requested is not None else "an unknown amount"
    explanation = (
        f"Live memory ({fmt(allocated)} of {fmt(reserved)} reserved) fills the device;"
        f" the request for {wanted} exceeds the {fmt(free_in_reserved)} free in reserved"
        f" segments plus {fmt(headroom)} free on the device. Biggest sites: {sites}."
    )
    advice = "Hold less at the peak in those sites: smaller batches or sequences, activation "
    advice += "checkpointing, or dropping references to tensors that are no longer needed."
    return Verdict(EXHAUSTED, explanation, advice)
