"""The report's timeline and segment view, pre-aggregated so a 1 GB dump makes a small page.

Live bytes by kind (and by the biggest sites) are followed over the whole trace, and the trace
is cut into at most :data:`FINEST` equal buckets of entries. Each bucket keeps the state at its
own highest moment, so no peak disappears. Coarser levels (each a quarter of the one below, the
same rule) let the page draw the level that matches the zoom: the whole run at a glance from a
few hundred points, a zoomed band from the finest level. The page never sees the raw trace.
"""

from __future__ import annotations

from typing import Any

from memforensics.analysis.dump import (
    NATIVE_ONLY_MEANING,
    frame_text,
    per_recorded_stack,
    site_fast,
)
from memforensics.analysis.filled import BEFORE, KINDS, Allocation, Lifetimes, live_at
from memforensics.analysis.report.layout import layouts
from memforensics.analysis.report.model import DumpContext, Section

LAYOUT_MOMENTS = 16
STACK_LINES = 40
FINEST = 4096
BAND_BUCKETS = 2048
COARSEST = 64
TOP_SITES = 8
OTHER = "other sites"


def site_index(allocations: list[Allocation], top: list[str]) -> dict[int, int]:
    """Index into ``top`` (or ``len(top)`` for the rest) per allocation id; each distinct
    stack's site is found once (lifetimes shares one frames list per stack)."""
    where = {site: index for index, site in enumerate(top)}
    index_of = per_recorded_stack(
        lambda frames, recorded: where.get(site_fast(frames, recorded), len(top))
    )
    return {id(item): index_of(item.frames, item.recorded) for item in allocations}


def _bands(count: int, moments: list[int]) -> list[tuple[int, int]]:
    """Ranges around the peak and the OOMs that get their own, finer buckets."""
    half = max(count // 128, BAND_BUCKETS // 2)
    if count <= FINEST:
        return []  # the finest level already has every entry
    found: list[tuple[int, int]] = []
    for moment in sorted(set(moments)):
        lo, hi = max(moment - half, 0), min(moment + half, count)
        if found and lo <= found[-1][1]:
            found[-1] = (found[-1][0], hi)
        else:
            found.append((lo, hi))
    return found[:4]


def timeline_levels(
    lt: Lifetimes,
    trace: list[Any],
    top_sites: list[str],
    reserved_now: int,
    moments: tuple[int, ...] = (),
) -> dict[str, Any]:
    """Levels of buckets: position, time, reserved bytes, bytes per kind and per top site.

    Besides the levels over the whole trace, each band around a moment in ``moments`` (the
    peak, the OOMs) gets :data:`BAND_BUCKETS` buckets of its own: the detail a zoom there needs.
    """
    kind_of = {kind: index for index, kind in enumerate(KINDS)}
    sites = site_index(lt.allocations, top_sites)
    kinds = [0] * len(KINDS)
    by_site = [0] * (len(top_sites) + 1)
    for item in lt.allocations:
        if item.start == BEFORE:
            kinds[kind_of[item.kind]] += item.size
            by_site[sites[id(item)]] += item.size
    reserved = lt.reserved_at(-1, reserved_now)
    segment_at = _segment_changes(lt)
    count = lt.length
    buckets = max(1, min(FINEST, count))
    best: list[list[int | None] | None] = [None] * buckets
    bands = _bands(count, list(moments))
    band_best: list[list[list[int | None] | None]] = [[None] * BAND_BUCKETS for _ in bands]
    for position in range(count):
        event = lt.by_event[position]
        change = segment_at.get(position)
        if event is None and change is None:
            continue
        if event is not None:
            sign = 1 if event.start == position else -1
            kinds[kind_of[event.kind]] += sign * event.size
            by_site[sites[id(event)]] += sign * event.size
        if change is not None:
            reserved += change
        bucket = position * buckets // count
        total = sum(kinds)
        held = best[bucket]
        row: list[int | None] | None = None
        if held is None or total > (held[3] or 0):
            row = [position, _time(trace, position), reserved, total, *kinds, *by_site]
            best[bucket] = row
        for index, (lo, hi) in enumerate(bands):
            if lo <= position < hi:
                slot = (position - lo) * BAND_BUCKETS // (hi - lo)
                mine = band_best[index][slot]
                if mine is None or total > (mine[3] or 0):
                    if row is None:
                        row = [position, _time(trace, position), reserved, total, *kinds, *by_site]
                    band_best[index][slot] = row
    fine = [row for row in best if row is not None]
    levels = [fine]
    while len(levels[-1]) > COARSEST * 4:
        below = levels[-1]
        levels.append(
            [max(below[i : i + 4], key=lambda row: row[3] or 0) for i in range(0, len(below), 4)]
        )
    return {
        "columns": ["position", "time_us", "reserved", "total"]
        + [f"kind:{kind}" for kind in KINDS]
        + [f"site:{site}" for site in [*top_sites, OTHER]],
        "levels": list(reversed(levels)),  # coarsest first
        "bands": [
            {"from": lo, "to": hi, "rows": [row for row in rows if row is not None]}
            for (lo, hi), rows in zip(bands, band_best, strict=True)
        ],
        "events": count,
    }


def _segment_changes(lt: Lifetimes) -> dict[int, int]:
    """Reserved bytes each trace position with ``segment_*`` entries adds (or takes away)."""
    found: dict[int, int] = {}
    for event in lt.segment_events:
        found[event.position] = found.get(event.position, 0) + event.sign * event.size
    return found


def _time(trace: list[Any], position: int) -> int | None:
    entry = trace[position]
    if type(entry) is dict:
        stamp = entry.get("time_us")
        if type(stamp) is int:
            return stamp
    return None


def timeline_section(ctx: DumpContext) -> Section:
    """Live memory by kind and by site over the trace, with the moments the page can open."""
    lt = ctx.filled.lifetimes
    peak = ctx.filled.peak
    at_peak = live_at(lt, peak.position)
    sites, stacks = _sites_and_stacks(at_peak)
    top_sites = [site for site, _ in sites[:TOP_SITES]]
    kind_stack = {}
    for kind in KINDS:
        of_kind = [(site, size) for site, size in _by_site(at_peak, kind)]
        if of_kind:
            kind_stack[kind] = of_kind[0][0]
    oom = ctx.summary.oom
    markers: list[dict[str, Any]] = [{"position": peak.position, "label": "peak"}]
    markers += [{"position": position, "label": "OOM"} for position in lt.oom_positions]
    data: dict[str, Any] = {
        "kinds": list(KINDS),
        "sites": top_sites,
        "stacks": stacks,
        "kind_site": kind_stack,
        "markers": markers,
        "limit": oom.device_total_bytes if oom else None,
        "segments_id": f"{ctx.key}-segments",
        "moments": [layout["position"] for layout in _layouts(ctx)],
    }
    if not lt.has_trace:
        return Section(
            "timeline",
            "Memory over time",
            "timeline",
            data,
            "No allocator history in this dump: it was taken with history recording off, so "
            "only the snapshot's own moment is known (memforensics records history inside step "
            "windows and, by default, state for OOM dumps; start it before the model is built).",
        )
    moments = (peak.position, *lt.oom_positions)
    data.update(timeline_levels(lt, ctx.dump.trace, top_sites, ctx.summary.reserved_bytes, moments))
    return Section("timeline", "Memory over time", "timeline", data)


def _layouts(ctx: DumpContext) -> list[dict[str, Any]]:
    """Segment layouts at the chosen moments, built once per device whichever section asks."""
    found = ctx.cache.get("layouts")
    if found is None:
        lt = ctx.filled.lifetimes
        positions = _moments(lt.length, [ctx.filled.peak.position, *lt.oom_positions])
        found = ctx.cache["layouts"] = layouts(lt, ctx.dump.segments, positions)
    return found


def _moments(length: int, marked: list[int]) -> list[int]:
    if length <= 0:
        return [0]
    spaced = [length * index // LAYOUT_MOMENTS for index in range(LAYOUT_MOMENTS)]
    return sorted({*spaced, *marked, length})


def _by_site(live: list[Any], kind: str | None = None) -> list[tuple[str, int]]:
    totals: dict[str, int] = {}
    for item in live:
        if kind is None or item.kind == kind:
            site = site_fast(item.frames, item.recorded)
            totals[site] = totals.get(site, 0) + item.size
    return sorted(totals.items(), key=lambda pair: (-pair[1], pair[0]))


def _sites_and_stacks(live: list[Any]) -> tuple[list[tuple[str, int]], dict[str, list[str]]]:
    """Sites at the peak, biggest first, and one full stack (innermost first) per site."""
    sites = _by_site(live)
    stacks: dict[str, list[str]] = {}
    wanted = {site for site, _ in sites[: TOP_SITES * 4]}
    for item in sorted(live, key=lambda a: -a.size):
        site = site_fast(item.frames, item.recorded)
        if site in wanted and site not in stacks:
            stacks[site] = _stack_lines(item.frames, item.recorded)
    return sites, stacks


def _stack_lines(frames: object, recorded: bool) -> list[str]:
    if not isinstance(frames, list) or not frames:
        if recorded:
            return [f"(no frames: {NATIVE_ONLY_MEANING})"]
        return ["(no frames: allocated before recording started, or while it was off)"]
    lines = []
    for frame in frames:
        if isinstance(frame, dict):
            lines.append(frame_text(frame))
        if len(lines) >= STACK_LINES:
            lines.append(f"… {len(frames) - STACK_LINES} more frames")
            break
    return lines


def segments_section(ctx: DumpContext) -> Section:
    """Segment layout at the moment chosen on the timeline (the snapshot's at first)."""
    found = _layouts(ctx)
    empty = None if ctx.dump.segments else "No segments: nothing was reserved on this device."
    data = {"kinds": [*KINDS, "pending free"], "layouts": found}
    return Section(
        f"{ctx.key}-segments", "Segments at the selected moment", "segments", data, empty
    )
