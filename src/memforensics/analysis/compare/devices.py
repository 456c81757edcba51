"""``diff`` device to device: growth on device 1 is compared with device 1, never with device 0.

Two single-device dumps are compared as they are, whatever their device numbers (a rank may
run on ``cuda:3`` in one job and ``cuda:5`` in the next). When either dump covers several
devices, each device present in both is compared with itself, the default device first, and a
device present on one side only is named rather than silently dropped.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from memforensics.analysis.compare.diff import Diff, diff_sides
from memforensics.analysis.compare.kinds import KindChange, kinds_change
from memforensics.analysis.compare.sides import DiffSide, SideOf, diff_side
from memforensics.analysis.dump import Dump


def sides_of(dump: Dump | SideOf) -> SideOf:
    """``dump``'s sides by device, each worked out once: a dump's from :func:`diff_side`, a
    caller's own (kept ones, say) as they are."""
    side: SideOf = functools.partial(diff_side, dump) if isinstance(dump, Dump) else dump
    return functools.cache(side)


def diff_by_device(
    before: Dump | SideOf, after: Dump | SideOf, *, device: int | None = None
) -> Diff:
    """Compare ``before`` with ``after`` device by device (``device``: only that one, in both):
    the first pair's :class:`Diff` holding the other pairs, the devices only one side holds,
    and the live bytes per kind (on ``device``, else of the whole files).

    Either side may be a dump or a function giving its :class:`DiffSide` by device."""
    old, new = sides_of(before), sides_of(after)
    kinds = kinds_change(old(device), new(device))
    if device is not None:
        return _result([(old(device), new(device))], (), kinds)
    old_whole, new_whole = old(None), new(None)
    if len(old_whole.held) <= 1 and len(new_whole.held) <= 1:
        return _result([(old_whole, new_whole)], (), kinds)
    before_held, after_held = set(old_whole.held), set(new_whole.held)
    common = sorted(before_held & after_held, key=lambda d: (d != new_whole.device, d))
    sides = (("BEFORE", before_held - after_held), ("AFTER", after_held - before_held))
    unmatched = tuple(f"device {d} only in {side}" for side, only in sides for d in sorted(only))
    if not common:
        return _result([(old_whole, new_whole)], unmatched, kinds)
    return _result([(old(d), new(d)) for d in common], unmatched, kinds)


def _result(
    views: list[tuple[DiffSide, DiffSide]],
    unmatched: tuple[str, ...],
    kinds: tuple[KindChange, ...],
) -> Diff:
    first, *others = (diff_sides(b, a) for b, a in views)
    return replace(first, other_devices=tuple(others), unmatched_devices=unmatched, kinds=kinds)
