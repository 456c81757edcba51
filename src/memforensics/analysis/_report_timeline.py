"""The report's timeline, pre-aggregated in Python so a 1 GB dump still makes a small page.

Live bytes by kind (and by the biggest sites) are followed over the whole trace, and the trace
is cut into at most :data:`FINEST` equal buckets of entries. Each bucket keeps the state at its
own highest moment, so no peak disappears. Coarser levels (each a quarter of the one below, the
same rule) let the page draw the level that matches the zoom: the whole run at a glance from a
few hundred points, a zoomed band from the finest level. The page never sees the raw trace.
"""

from __future__ import annotations

from typing import Any

from memforensics.analysis._kinds import KINDS
from memforensics.analysis._lifetimes import BEFORE, Allocation, Lifetimes
from memforensics.analysis._peak import site_fast

FINEST = 4096
BAND_BUCKETS = 2048
COARSEST = 64
TOP_SITES = 8
OTHER = "other sites"


def site_index(allocations: list[Allocation], top: list[str]) -> dict[int, int]:
    """Index into ``top`` (or ``len(top)`` for the rest) per allocation id."""
    where = {site: index for index, site in enumerate(top)}
    return {id(item): where.get(site_fast(item.frames), len(top)) for item in allocations}


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
    reserved = reserved_now - sum(sign * size for _, sign, _, size in lt.segment_events)
    segment_at = {position: sign * size for position, sign, _, size in lt.segment_events}
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


def _time(trace: list[Any], position: int) -> int | None:
    entry = trace[position]
    if type(entry) is dict:
        stamp = entry.get("time_us")
        if type(stamp) is int:
            return stamp
    return None
