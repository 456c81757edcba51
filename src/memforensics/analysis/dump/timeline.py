"""Memory over time from the trace, downsampled to a fixed number of points.

A 1 GB snapshot can hold millions of events; a browser chokes on a plot of all of them, and a
person needs the shape and the peaks, not every step. The trace is cut into ``points`` equal
buckets of events and each bucket keeps its *maximum*, so a peak (the moment of an OOM) never
disappears. The trace only records changes, so absolute levels come from anchoring the last
value to the snapshot's own totals, which are exact.
"""

from __future__ import annotations

from dataclasses import dataclass

_ALLOC = "alloc"
_RESERVE = ("segment_alloc", "segment_map")
_RELEASE = ("segment_free", "segment_unmap")


@dataclass(frozen=True)
class Timeline:
    """Bucketed series: ``x`` (seconds from the first event, or event number), bytes per series."""

    x: tuple[float, ...]
    allocated: tuple[int, ...]
    reserved: tuple[int, ...]
    oom_x: tuple[float, ...]
    x_is_time: bool
    events: int


def memory_timeline(  # noqa: PLR0912, PLR0915 - one hot loop over millions of events
    trace: list[object], *, active_bytes: int, reserved_bytes: int, points: int = 1000
) -> Timeline:
    """Allocated (allocs minus completed frees) and reserved bytes, at most ``points`` long."""
    count = len(trace)
    buckets = max(1, min(points, count))
    peak_done = [0] * buckets  # allocated, subtracting at free_completed
    peak_asked = [0] * buckets  # allocated, subtracting at free_requested (old traces)
    peak_reserved = [0] * buckets
    first_time: list[int | None] = [None] * buckets
    first_index = [0.0] * buckets
    seen = [False] * buckets
    oom_buckets: list[int] = []
    done = asked = reserved = 0
    completed_seen = False
    all_timed = True
    for index, entry in enumerate(trace):
        if type(entry) is not dict:
            continue
        bucket = index * buckets // count
        action = entry.get("action")
        size = entry.get("size")
        size = size if type(size) is int else 0
        if action == _ALLOC:
            done += size
            asked += size
        elif action == "free_completed":
            done -= size
            completed_seen = True
        elif action == "free_requested":
            asked -= size
        elif action == "free":
            done -= size
            asked -= size
        elif action in _RESERVE:
            reserved += size
        elif action in _RELEASE:
            reserved -= size
        elif action == "oom":
            oom_buckets.append(bucket)
        if not seen[bucket]:
            seen[bucket] = True
            peak_done[bucket], peak_asked[bucket], peak_reserved[bucket] = done, asked, reserved
            first_index[bucket] = float(index)
            stamp = entry.get("time_us")
            first_time[bucket] = stamp if type(stamp) is int else None
            all_timed = all_timed and first_time[bucket] is not None
        else:
            peak_done[bucket] = max(peak_done[bucket], done)
            peak_asked[bucket] = max(peak_asked[bucket], asked)
            peak_reserved[bucket] = max(peak_reserved[bucket], reserved)
    series, final = (peak_done, done) if completed_seen else (peak_asked, asked)
    alloc_offset = active_bytes - final
    reserve_offset = reserved_bytes - reserved
    keep = [bucket for bucket in range(buckets) if seen[bucket]]
    if all_timed and keep:
        origin = first_time[keep[0]] or 0
        x_of = {b: ((first_time[b] or 0) - origin) / 1e6 for b in keep}
    else:
        x_of = {b: first_index[b] for b in keep}
    return Timeline(
        x=tuple(x_of[b] for b in keep),
        allocated=tuple(max(series[b] + alloc_offset, 0) for b in keep),
        reserved=tuple(max(peak_reserved[b] + reserve_offset, 0) for b in keep),
        oom_x=tuple(x_of[b] for b in oom_buckets if b in x_of),
        x_is_time=all_timed and bool(keep),
        events=count,
    )
