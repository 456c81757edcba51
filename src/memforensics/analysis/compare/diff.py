"""``diff``: which sites grew between two dumps, and which live blocks look leaked.

Comparing two windows of the same run (say steps 4-7 and 100-103) by live bytes per site shows
where memory went. With step metadata it can say more: a block still alive in the later window
but allocated in a step before that window began outlived its step. Blocks already alive (same
address, size and step) in the earlier dump are steady state, such as optimizer state made at
step 0, and are left out so the suspects are what accumulated in between.

Rows are (site, caller) pairs, as in ``summary``; growth is ordered by the size of the change,
so a big release shows up beside a big growth instead of at the bottom.
"""

from __future__ import annotations

from dataclasses import dataclass

from memforensics.analysis.compare.kinds import KindChange
from memforensics.analysis.compare.sides import DiffSide, LiveRow, live_side
from memforensics.analysis.dump import UNKNOWN_SITE, Dump

DIFF_SCHEMA = 2
"""``diff --json``'s ``schema`` (docs/json.md: adding keys keeps it; renaming or removing one
bumps it)."""


@dataclass(frozen=True, slots=True)
class SiteGrowth:
    """Live bytes of one site (reached from one caller) in both dumps."""

    site: str
    before_bytes: int
    after_bytes: int
    delta_bytes: int
    caller: str = UNKNOWN_SITE


@dataclass(frozen=True, slots=True)
class LeakSuspect:
    """Live bytes in AFTER, from one site, allocated in steps before AFTER's window."""

    site: str
    bytes: int
    blocks: int
    steps: tuple[int, ...]
    caller: str = UNKNOWN_SITE


@dataclass(frozen=True)
class Diff:
    """What ``memforensics diff`` prints; its ``--json`` object is derived from the fields
    (:func:`~memforensics.analysis.schema.document`, see docs/json.md).

    One comparison, ``before_device_index`` of BEFORE against ``after_device_index`` of AFTER.
    ``diff``'s answer about two files is the first device pair's, holding the other pairs in
    ``other_devices`` (each with empty ``other_devices``, ``unmatched_devices`` and ``kinds``),
    the devices only one file holds, and the live bytes per kind of the files compared.
    """

    before: str
    after: str
    before_allocated_bytes: int
    after_allocated_bytes: int
    total_delta_bytes: int  # after_allocated_bytes - before_allocated_bytes
    growth: tuple[SiteGrowth, ...]
    after_window: tuple[int, int] | None
    leak_suspects: tuple[LeakSuspect, ...]
    before_device_index: int | None = None
    after_device_index: int | None = None
    other_devices: tuple[Diff, ...] = ()
    unmatched_devices: tuple[str, ...] = ()  # "device 2 only in AFTER"
    kinds: tuple[KindChange, ...] = ()


def diff_dumps(before: Dump, after: Dump) -> Diff:
    """Compare live bytes per (site, caller); largest change first (growth or release alike);
    sites that did not change are left out."""
    return diff_sides(live_side(before), live_side(after))


def diff_sides(before: DiffSide, after: DiffSide) -> Diff:
    """:func:`diff_dumps` of two views already reduced to what ``diff`` reads of them."""
    totals: dict[tuple[str, str], list[int]] = {}
    for index, side in enumerate((before, after)):
        for row in side.live:
            totals.setdefault((row.site, row.caller), [0, 0])[index] += row.size
    growth = sorted(
        (
            SiteGrowth(site, old, new, new - old, caller)
            for (site, caller), (old, new) in totals.items()
            if new != old
        ),
        key=lambda item: (-abs(item.delta_bytes), -item.delta_bytes, item.site, item.caller),
    )
    window = after.window
    suspects: tuple[LeakSuspect, ...] = ()
    if window is not None:
        steady = {(row.address, row.size, row.step) for row in before.live}
        suspects = _suspects(after.live, window[0], steady)
    old_bytes, new_bytes = before.allocated_bytes, after.allocated_bytes
    return Diff(
        before=before.name,
        after=after.name,
        before_allocated_bytes=old_bytes,
        after_allocated_bytes=new_bytes,
        total_delta_bytes=new_bytes - old_bytes,
        growth=tuple(growth),
        after_window=window,
        leak_suspects=suspects,
        before_device_index=before.device,
        after_device_index=after.device,
    )


def _suspects(
    live: tuple[LiveRow, ...], first_step: int, steady: set[tuple[int, int, int | None]]
) -> tuple[LeakSuspect, ...]:
    grouped: dict[tuple[str, str], tuple[int, int, set[int]]] = {}
    for row in live:
        step = row.step
        if step is None or step >= first_step or (row.address, row.size, step) in steady:
            continue
        size, count, seen = grouped.get((row.site, row.caller), (0, 0, set()))
        seen.add(step)
        grouped[(row.site, row.caller)] = (size + row.size, count + 1, seen)
    ordered = sorted(grouped.items(), key=lambda item: (-item[1][0], item[0]))
    return tuple(
        LeakSuspect(site, size, count, tuple(sorted(seen)), caller)
        for (site, caller), (size, count, seen) in ordered
    )
