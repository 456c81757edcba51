"""Segment layouts at chosen moments, for the report's "click a moment, see the segments" view.

The snapshot gives the layout at its own moment; earlier ones are rebuilt from the lifetimes:
the segments then are today's with the trace's later ``segment_*`` entries undone, and the
blocks then are the allocations live at that position, placed by address. One forward sweep
over the trace serves every moment. Each segment becomes a row of runs (offset, size, kind),
neighbouring runs of one kind merged at 1/512 of the segment; identical rows are grouped with a
count, and rows with free holes come first, because holes are what fragmentation is made of.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from memforensics.analysis.dump import PENDING_FREE, Segment
from memforensics.analysis.filled import BEFORE, KINDS, Allocation, Lifetimes

MAX_ROWS = 120
MAX_RUNS = 32
PENDING = len(KINDS)  # kind index of a block freed but waiting for its stream
Row = tuple[int, list[list[int]], int]  # segment size, runs, free bytes


def layouts(
    lt: Lifetimes, segments: tuple[Segment, ...], positions: list[int]
) -> list[dict[str, Any]]:
    """Layouts at each trace position in ``positions`` (the trace length = the snapshot)."""
    wanted = sorted(set(positions))
    seg_now = {segment.address: segment.total_size for segment in segments}
    seg_at = _segments_at(lt, seg_now, wanted)
    kind_of = {kind: index for index, kind in enumerate(KINDS)}
    live: dict[int, Allocation] = {a.addr: a for a in lt.allocations if a.start == BEFORE}
    result: list[dict[str, Any]] = []
    cursor = 0
    for position in wanted:
        if position >= lt.length:
            result.append(_snapshot_layout(lt, segments, kind_of, position))
            continue
        while cursor <= position:
            item = lt.by_event[cursor]
            if item is not None:
                if item.start == cursor:
                    live[item.addr] = item
                elif live.get(item.addr) is item:
                    del live[item.addr]
            cursor += 1
        rows = _place(seg_at[position], list(live.values()), kind_of)
        result.append(_grouped(position, rows))
    return result


def _segments_at(
    lt: Lifetimes, now: dict[int, int], wanted: list[int]
) -> dict[int, dict[int, int]]:
    """Segments (address -> size) at each wanted position, undoing later segment entries.

    An expandable segment is reported as one segment per mapped range, so undoing a
    ``segment_map`` takes its range out of the segment holding it (an empty one is gone), and
    undoing a ``segment_unmap`` puts it back, joined to the ranges beside it.
    """
    current = dict(now)
    events = lt.segment_events
    index = len(events)
    found: dict[int, dict[int, int]] = {}
    for position in reversed(wanted):
        while index > 0 and events[index - 1].position > position:
            index -= 1
            event = events[index]
            if event.mapping and event.sign > 0:
                _take_range(current, event.addr, event.size)
            elif event.mapping:
                _put_range(current, event.addr, event.size)
            elif event.sign > 0:
                current.pop(event.addr, None)
            else:
                current[event.addr] = event.size
        found[position] = dict(current)
    return found


def _take_range(ranges: dict[int, int], addr: int, size: int) -> None:
    """Remove ``[addr, addr + size)`` from the mapped range that holds it."""
    starts = sorted(ranges)
    index = bisect_right(starts, addr) - 1
    if index < 0:
        return
    start = starts[index]
    end = start + ranges[start]
    if addr >= end:
        return
    del ranges[start]
    if addr > start:
        ranges[start] = addr - start
    if addr + size < end:
        ranges[addr + size] = end - addr - size


def _put_range(ranges: dict[int, int], addr: int, size: int) -> None:
    """Add ``[addr, addr + size)`` as mapped, joined to a range ending at ``addr`` and one
    starting where it ends."""
    after = ranges.pop(addr + size, 0)
    before = next((s for s, length in ranges.items() if s + length == addr), None)
    if before is not None:
        ranges[before] += size + after
    else:
        ranges[addr] = size + after


def _place(segments: dict[int, int], live: list[Allocation], kind_of: dict[str, int]) -> list[Row]:
    starts = sorted(segments)
    blocks: dict[int, list[tuple[int, int, int]]] = {start: [] for start in starts}
    for item in live:
        index = bisect_right(starts, item.addr) - 1
        if index < 0:
            continue
        start = starts[index]
        if item.addr < start + segments[start]:
            blocks[start].append((item.addr - start, item.size, kind_of[item.kind]))
    return [_row(segments[start], blocks[start]) for start in starts]


def _snapshot_layout(
    lt: Lifetimes, segments: tuple[Segment, ...], kind_of: dict[str, int], position: int
) -> dict[str, Any]:
    """The snapshot's own blocks, exact (pending frees included), coloured by kind."""
    by_addr = {a.addr: a for a in lt.allocations if a.end >= lt.length}
    rows = []
    for segment in sorted(segments, key=lambda s: s.address):
        blocks = []
        for block in segment.blocks:
            if block.state == PENDING_FREE:
                kind = PENDING
            else:
                item = by_addr.get(block.address)
                if item is None:
                    continue
                kind = kind_of[item.kind]
            blocks.append((block.address - segment.address, block.size, kind))
        rows.append(_row(segment.total_size, blocks))
    return _grouped(position, rows)


def _row(total: int, blocks: list[tuple[int, int, int]]) -> Row:
    return total, _runs(total, blocks), max(total - sum(size for _, size, _ in blocks), 0)


def _runs(total: int, blocks: list[tuple[int, int, int]]) -> list[list[int]]:
    """[offset, size, kind] runs, neighbours of one kind merged within 1/512 of the segment.

    A segment cut into thousands of blocks of mixed kinds would still give thousands of runs;
    past :data:`MAX_RUNS` the segment is drawn in that many cells, each of its main kind.
    """
    slack = max(total // 512, 1)
    runs: list[list[int]] = []
    for offset, size, kind in sorted(blocks):
        if runs and runs[-1][2] == kind and offset - (runs[-1][0] + runs[-1][1]) <= slack:
            runs[-1][1] = offset + size - runs[-1][0]
        else:
            runs.append([offset, size, kind])
    if len(runs) <= MAX_RUNS:
        return runs
    cell = -(-total // MAX_RUNS)
    weights: list[dict[int, int]] = [{} for _ in range(MAX_RUNS)]
    for offset, size, kind in blocks:
        index = min(max(offset, 0) // cell, MAX_RUNS - 1)
        weights[index][kind] = weights[index].get(kind, 0) + size
    coarse: list[list[int]] = []
    for index, weight in enumerate(weights):
        if not weight:
            continue
        kind = max(weight, key=lambda k: (weight[k], -k))
        if coarse and coarse[-1][2] == kind and coarse[-1][0] + coarse[-1][1] == index * cell:
            coarse[-1][1] += cell
        else:
            coarse.append([index * cell, cell, kind])
    return coarse


def _grouped(position: int, rows: list[Row]) -> dict[str, Any]:
    """Identical rows become one with a count; rows with the most free bytes first."""
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for total, runs, free in rows:
        key = (total, free, tuple(tuple(run) for run in runs))
        entry = groups.get(key)
        if entry is None:
            groups[key] = [total, runs, 1, free]
        else:
            entry[2] += 1
    ordered = sorted(groups.values(), key=lambda g: (-g[3], -g[2], -g[0]))
    shown = ordered[:MAX_ROWS]
    return {
        "position": position,
        "segments": len(rows),
        "reserved": sum(row[0] for row in rows),
        "rows": [{"size": g[0], "runs": g[1], "count": g[2], "free": g[3]} for g in shown],
        "hidden_rows": len(ordered) - len(shown),
        "hidden_segments": sum(g[2] for g in ordered[MAX_ROWS:]),
    }
