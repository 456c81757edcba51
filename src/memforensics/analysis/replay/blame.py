"""Blame the pinners: the live blocks that split the free memory a failed request needed.

At a fragmentation OOM the bytes exist but in pieces, and the pieces are separated by live
blocks. Of every segment of the failing request's pool and stream that is big enough, the
window of the request's size holding the fewest live blocks is found; its blocks are the
pinners: freeing these tensors lets the request fit there. Their sites and ages (how long
before the OOM they were allocated) say which tensors they are and why they were still alive.
"""

from __future__ import annotations

from dataclasses import dataclass

from memforensics.allocator import K_SMALL_SIZE, AllocatorSettings
from memforensics.analysis.dump import UNKNOWN_SITE, Dump, as_int, parse_step, site_of
from memforensics.analysis.oom import (
    LiveBlock,
    OomMoment,
    SegmentState,
    changes_after,
    state_before,
)

Window = tuple[int, int, list[LiveBlock]]
"""A candidate window: how many live blocks, their bytes, the blocks."""


@dataclass(frozen=True, slots=True)
class Pinner:
    """A live block inside the cheapest window that would hold the failed request."""

    address: int
    size: int
    site: str
    step: int | None
    age_us: int | None  # None: allocated before history recording started


def pinners(dump: Dump, moment: OomMoment | None, settings: AllocatorSettings) -> list[Pinner]:
    """The blocks to free so the failed request fits in one piece (empty when none would)."""
    if moment is None or moment.requested_bytes is None:
        return []
    trace = dump.trace
    index = moment.index
    until = index + 1 if index is not None and changes_after(trace, index) else len(trace)
    state = state_before(dump, until, settings)
    if state.problem_count:
        return []
    request = moment.requested_bytes
    small = request <= K_SMALL_SIZE
    best: Window | None = None
    for segment in state.segments:
        if segment.is_small != small or segment.stream != moment.stream:
            continue
        found = _cheapest_window(segment, request)
        if found is not None and (best is None or found[:2] < best[:2]):
            best = found
    if best is None or not best[2]:
        return []
    return [_describe(dump, block, index) for block in best[2]]


def _cheapest_window(
    segment: SegmentState, request: int
) -> tuple[int, int, list[LiveBlock]] | None:
    """``(blocks, bytes, blocks)`` of the window of ``request`` bytes with the fewest blocks."""
    if segment.size < request:
        return None
    starts = [segment.address] + [b.address + (b.size or 0) for b in segment.blocks]
    best: Window | None = None
    for start in starts:
        end = start + request
        if end > segment.end:
            continue
        inside = [
            b for b in segment.blocks if b.address < end and b.address + (b.size or 0) > start
        ]
        key = (len(inside), sum(b.size or 0 for b in inside), inside)
        if best is None or key[:2] < best[:2]:
            best = key
    return best


def _describe(dump: Dump, block: LiveBlock, oom_index: int | None) -> Pinner:
    """Site, step and age of a pinner, from the trace's ``alloc`` entry or the final block."""
    trace = dump.trace
    stop = oom_index if oom_index is not None else len(trace)
    oom_time = None
    if oom_index is not None and type(trace[oom_index]) is dict:
        oom_time = as_int(trace[oom_index].get("time_us"))
    for position in range(stop - 1, -1, -1):
        entry = trace[position]
        if (
            type(entry) is dict
            and entry.get("action") == "alloc"
            and entry.get("addr") == block.address
        ):
            frames = entry.get("frames")
            stamp = as_int(entry.get("time_us"))
            age = oom_time - stamp if oom_time is not None and stamp is not None else None
            site = (
                site_of(frames, dump.records_stacks) if isinstance(frames, list) else UNKNOWN_SITE
            )
            return Pinner(
                block.address, block.size or 0, site, parse_step(entry.get("user_metadata")), age
            )
    for segment in dump.segments:
        for final in segment.blocks:
            if final.address == block.address and final.state == "active_allocated":
                site = site_of(final.frames) if isinstance(final.frames, list) else UNKNOWN_SITE
                return Pinner(
                    block.address, block.size or 0, site, parse_step(final.user_metadata), None
                )
    return Pinner(block.address, block.size or 0, UNKNOWN_SITE, None, None)
