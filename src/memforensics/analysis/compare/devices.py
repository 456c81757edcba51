"""``diff`` device to device: growth on device 1 is compared with device 1, never with device 0.

Two single-device dumps are compared as they are, whatever their device numbers (a rank may
run on ``cuda:3`` in one job and ``cuda:5`` in the next). When either dump covers several
devices, each device present in both is compared with itself, the default device first, and a
device present on one side only is named rather than silently dropped.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from memforensics.analysis.compare.diff import Diff, diff_sides
from memforensics.analysis.compare.sides import DiffSide, SideOf, diff_side
from memforensics.analysis.dump import Dump


@dataclass(frozen=True)
class DeviceDiff:
    """One comparison: ``before_device`` of BEFORE against ``after_device`` of AFTER."""

    before_device: int | None
    after_device: int | None
    diff: Diff

    def to_dict(self) -> dict[str, Any]:
        """The ``diff --json`` object with the two device numbers added."""
        data = self.diff.to_dict()
        data["before_device_index"] = self.before_device
        data["after_device_index"] = self.after_device
        return data


@dataclass(frozen=True)
class DeviceDiffs:
    """Every device-to-device comparison of two dumps, and devices only one of them holds."""

    pairs: tuple[DeviceDiff, ...]
    unmatched: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The first pair's object, with the other pairs and the unmatched devices beside it."""
        data = self.pairs[0].to_dict()
        data["other_devices"] = [pair.to_dict() for pair in self.pairs[1:]]
        data["unmatched_devices"] = list(self.unmatched)
        return data


def sides_of(dump: Dump | SideOf) -> SideOf:
    """``dump``'s sides by device, each worked out once: a dump's from :func:`diff_side`, a
    caller's own (kept ones, say) as they are."""
    side: SideOf = functools.partial(diff_side, dump) if isinstance(dump, Dump) else dump
    return functools.cache(side)


def diff_by_device(
    before: Dump | SideOf, after: Dump | SideOf, *, device: int | None = None
) -> DeviceDiffs:
    """Compare ``before`` with ``after`` device by device (``device``: only that one, in both).

    Either side may be a dump or a function giving its :class:`DiffSide` by device."""
    old, new = sides_of(before), sides_of(after)
    if device is not None:
        return _result([(old(device), new(device))], ())
    old_whole, new_whole = old(None), new(None)
    if len(old_whole.held) <= 1 and len(new_whole.held) <= 1:
        return _result([(old_whole, new_whole)], ())
    before_held, after_held = set(old_whole.held), set(new_whole.held)
    common = sorted(before_held & after_held, key=lambda d: (d != new_whole.device, d))
    sides = (("BEFORE", before_held - after_held), ("AFTER", after_held - before_held))
    unmatched = tuple(f"device {d} only in {side}" for side, only in sides for d in sorted(only))
    if not common:
        return _result([(old_whole, new_whole)], unmatched)
    return _result([(old(d), new(d)) for d in common], unmatched)


def _result(views: list[tuple[DiffSide, DiffSide]], unmatched: tuple[str, ...]) -> DeviceDiffs:
    pairs = tuple(DeviceDiff(b.device, a.device, diff_sides(b, a)) for b, a in views)
    return DeviceDiffs(pairs, unmatched)
