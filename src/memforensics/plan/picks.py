"""What positions taken from a test of unknown values are known to pick: the range each picked
value lies in, and how many can lie in each range.

A sampler picks positives from ``torch.where(labels >= 1)`` and negatives from
``torch.where(labels == 0)``, sets them in masks of zeros (``pos[pos_idx] = 1``), takes
``torch.where(pos | neg)`` and gathers ``labels[sampled]``. The labels are unknown in a plan,
but the gathered labels hold at most as many values ``>= 1`` as positives were set, and the
others are ``0``: ``torch.where(labels[sampled] > 0)`` selects at most the positives, as on a
GPU. Facts, by storage, all of one-dimensional tensors:

- a *mask*: its non-zero entries sit at positions of a source tensor whose values lie in one of
  its ranges, at most so many per range. A test ``t <op> c`` (``eq``, ``ge``, ``gt``, ``le``,
  ``lt`` with a number) is one, of ``t``, with one range; a mask of zeros (none) with positions
  set by ``index_put_`` adds their ranges; ``|`` joins two masks' ranges, ``&`` keeps the
  smaller side's, a copy or cast keeps its source's;
- *positions*: ``nonzero`` of a mask, each a position of its source in one of the mask's
  ranges; a view of them too, and a gather of them (which may repeat one: each range then
  counts every element);
- *values*: the source indexed by such positions (``t[positions]``), each value in one of the
  ranges, at most so many per range; a gather of them too, counted so. A source whose values
  the script's own code decides (a detector's class labels, ``arange(classes)`` expanded over
  its boxes) indexed by positions holds only those values: a point range for each distinct
  one, at most as many elements in it as the source holds, since ``nonzero``'s positions are
  distinct (*distinct* positions: ``nonzero`` of any one-dimensional mask, its values unknown);
  gathered by distinct positions, values keep their counts.

A test of such values against one unknown number (``idxs == class_id``, a class drawn from
their ``unique``) passes at most the largest count of one point, and ``unique`` of them makes at
most as many elements as they have points (:meth:`Picks.distinct`): torchvision's
``batched_nms`` over a detector's 90,000 class-scored boxes loops over at most its 90 classes,
each of at most its 1,000 boxes, as on a GPU, where every element distinct and selected would
loop 90,000 times over all of them.

A test of values then is a mask whose count is the sum of the counts of the ranges that meet
the test's (:meth:`Picks.at_most`). A range describes the source as it was when tested: a write
into it, or its storage's end, makes its positions describe nothing. Ranges are over the real
numbers (no integer rounding) and a NaN lies in none: a looser bound at worst, never a smaller
one.
"""

from __future__ import annotations

import enum
import itertools
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

_aten = torch.ops.aten


@dataclass(frozen=True)
class Range:
    """The real numbers between ``low`` and ``high``, each end in or out."""

    low: float
    high: float
    low_in: bool
    high_in: bool

    def meets(self, other: Range) -> bool:
        """Whether a number lies in both ranges."""
        low, low_out = max((self.low, not self.low_in), (other.low, not other.low_in))
        high, high_in = min((self.high, self.high_in), (other.high, other.high_in))
        return low < high or (low == high and not low_out and high_in)


_INF = math.inf
_TESTS: dict[Any, Callable[[float], Range]] = {
    _aten.eq.Scalar: lambda c: Range(c, c, True, True),
    _aten.ge.Scalar: lambda c: Range(c, _INF, True, False),
    _aten.gt.Scalar: lambda c: Range(c, _INF, False, False),
    _aten.le.Scalar: lambda c: Range(-_INF, c, False, True),
    _aten.lt.Scalar: lambda c: Range(-_INF, c, False, False),
}
"""Tests of a tensor against a number, and the range of the values that pass."""
_PUT = frozenset(
    (_aten.index_put_.default, _aten.index_put.default, _aten._index_put_impl_.default)
)
_OR = frozenset((_aten.bitwise_or.Tensor, _aten.logical_or.default, _aten.__or__.Tensor))
_AND = frozenset((_aten.bitwise_and.Tensor, _aten.logical_and.default, _aten.__and__.Tensor))
_COPIES = frozenset((_aten.clone.default, _aten._to_copy.default))
_NONZERO = _aten.nonzero.default
_INDEX = _aten.index.Tensor
_EQ = _aten.eq.Tensor
"""A test against a number held by a zero-dimensional tensor (``idxs == class_id``)."""
_POINTS = 1 << 12
"""Most distinct decided values a gather keeps a point range for; more keep none."""
ALL = frozenset((*_TESTS, *_PUT, *_OR, *_AND, *_COPIES, _NONZERO, _INDEX, _EQ))
"""Every operator that can leave a fact."""


class Kind(enum.Enum):
    """What a fact says of a tensor's elements."""

    MASK = "non-zero only at positions whose values lie in the ranges"
    POSITIONS = "positions whose values lie in the ranges"
    VALUES = "values in the ranges"
    DISTINCT = "distinct positions of a tensor whose values are unknown"


@dataclass(frozen=True)
class Part:
    """One range, and at most how many elements lie in it."""

    range: Range
    count: int


@dataclass(frozen=True)
class Source:
    """The tensor whose values a mask's or positions' ranges describe, as it was when tested:
    its storage, that storage's stamp then (a write gives it a new one), and its view."""

    key: int
    stamp: int
    offset: int
    size: int
    stride: int


@dataclass(frozen=True)
class Fact:
    """What is known of one storage's elements: every non-zero element (a mask) or every
    element lies in one of ``parts``' ranges, at most each part's count in it."""

    kind: Kind
    source: Source | None
    parts: tuple[Part, ...]

    def capped(self, most: int) -> Fact:
        """The same ranges, no count above ``most``."""
        return replace(self, parts=tuple(Part(p.range, min(p.count, most)) for p in self.parts))


def _line(tensor: Any) -> bool:
    """Whether ``tensor`` is a one-dimensional stand-in whose elements are distinct elements
    of its storage."""
    return (
        isinstance(tensor, torch.Tensor)
        and tensor.is_meta
        and tensor.dim() == 1
        and (tensor.stride(0) != 0 or tensor.numel() <= 1)
    )


def _spans(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is its whole storage, element ``i`` at ``i``."""
    return bool(
        tensor.storage_offset() == 0
        and tensor.is_contiguous()
        and tensor.numel() * tensor.element_size() == tensor.untyped_storage().nbytes()
    )


class Picks:
    """Facts of stand-ins' storages (masks, positions, values), kept as long as the storage
    lives; ``count`` gives at most how many elements of a tensor are non-zero, where known
    (a mask of zeros has none)."""

    def __init__(
        self,
        count: Callable[[torch.Tensor], int | None],
        decided: Callable[[torch.Tensor], torch.Tensor | None],
    ) -> None:
        self._count = count
        self._decided = decided
        self._facts: dict[int, Fact] = {}
        self._stamps: dict[int, int] = {}
        self._watched: set[int] = set()
        self._next = itertools.count()

    def __bool__(self) -> bool:
        """Whether any storage has a fact."""
        return bool(self._facts)

    def at_most(self, tensor: torch.Tensor) -> int | None:
        """At most how many of ``tensor``'s elements are non-zero, where it is a mask whose
        counts say."""
        fact = self._fact(tensor, Kind.MASK)
        return None if fact is None else min(tensor.numel(), sum(p.count for p in fact.parts))

    def distinct(self, tensor: torch.Tensor) -> int | None:
        """At most how many distinct values ``tensor`` holds, where each lies in one of a few
        points (values gathered from decided ones); None where that is not known."""
        fact = self._fact(tensor, Kind.VALUES)
        if fact is None or not all(_point(p.range) for p in fact.parts):
            return None
        points: int = sum(1 for p in fact.parts if p.count > 0)
        return min(int(tensor.numel()), points)

    def forget(self, tensors: list[torch.Tensor]) -> None:
        """``tensors``' values changed: what was known of them, and what their old values
        were, describe nothing now."""
        if self._facts:
            for tensor in tensors:
                key = tensor.untyped_storage()._cdata
                self._facts.pop(key, None)
                self._stamps.pop(key, None)

    def pick(self, func: Any, args: tuple[Any, ...], out: Any) -> tuple[torch.Tensor, Fact] | None:
        """The fact ``func`` leaves on what it made or wrote, from its inputs as they are
        before it is accounted for; None where it leaves none."""
        if func not in ALL or not args:
            return None
        made = args[0] if func._schema.name.endswith("_") else out
        if not isinstance(made, torch.Tensor) or not made.is_meta or not _spans(made):
            return None
        if made.dim() != 1 and not (func is _NONZERO and made.shape[1:] == (1,)):
            return None  # one position a row: ``nonzero`` of a one-dimensional mask
        fact = self._picked(func, args, made)
        return None if fact is None else (made, fact.capped(made.numel()))

    def keep(self, picked: tuple[torch.Tensor, Fact]) -> None:
        """A tensor's elements are known so (:meth:`pick`)."""
        made, fact = picked
        storage = made.untyped_storage()
        key = storage._cdata
        if key not in self._facts:
            weakref.finalize(storage, self._facts.pop, key, None)
        self._facts[key] = fact

    def _picked(self, func: Any, args: tuple[Any, ...], made: torch.Tensor) -> Fact | None:
        first = args[0]
        if func in _TESTS:
            return self._tested(func, first, args[1] if len(args) > 1 else None, made)
        if func is _NONZERO and not self._facts:
            return self._distinct(first)
        if not self._facts:
            return None
        if func is _EQ:
            return self._matched(first, args[1], made)
        if func in _PUT:
            return self._put(first, args[1])
        if func in _OR or func in _AND:
            masks = [self._mask(t) for t in args[:2]]
            if None in masks or not _line(args[1]) or args[1].shape != made.shape:
                return None
            return _joined(func in _OR, [m for m in masks if m is not None])
        if func in _COPIES:
            if not _line(first):
                return None
            mask = self._mask(first)
            if mask is not None:
                return mask
            values = self._fact(first, Kind.VALUES)
            return values if values is not None and made.dtype == first.dtype else None
        if func is _NONZERO:
            mask = self._mask(first)
            return self._distinct(first) if mask is None else replace(mask, kind=Kind.POSITIONS)
        return self._gathered(first, args[1], made)

    @staticmethod
    def _distinct(mask: Any) -> Fact | None:
        """``nonzero`` of a one-dimensional mask nothing is known of: distinct positions."""
        return Fact(Kind.DISTINCT, None, ()) if _line(mask) else None

    def _matched(self, tested: Any, other: Any, made: torch.Tensor) -> Fact | None:
        """``tested == other`` for ``other`` one number of unknown value, ``tested``'s values
        each one of a few points: non-zero at most as often as the most of one point."""
        if not isinstance(other, torch.Tensor) or other.dim() != 0:
            return None
        if not _line(tested) or tested.shape != made.shape:
            return None
        values = self._fact(tested, Kind.VALUES)
        if values is None or not values.parts or not all(_point(p.range) for p in values.parts):
            return None
        everywhere = Range(-_INF, _INF, False, False)
        most = max(p.count for p in values.parts)
        return Fact(Kind.MASK, self._source(tested), (Part(everywhere, most),))

    def _tested(self, func: Any, tested: Any, number: Any, made: torch.Tensor) -> Fact | None:
        """A test of ``tested`` against ``number``: a mask of ``tested``, non-zero at most as
        many times as its values can pass."""
        if not _line(tested) or tested.shape != made.shape:
            return None
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            return None
        passing = _TESTS[func](number)
        count = made.numel()
        values = self._fact(tested, Kind.VALUES)
        if values is not None:
            count = sum(p.count for p in values.parts if p.range.meets(passing))
        source = self._source(tested)
        return Fact(Kind.MASK, source, (Part(passing, count),))

    def _put(self, mask: torch.Tensor, indices: Any) -> Fact | None:
        """``mask[positions] = ...``: the mask's ranges and the positions'."""
        if not isinstance(indices, (list, tuple)) or len(indices) != 1:
            return None
        positions = self._fact(indices[0], Kind.POSITIONS)
        before = self._mask(mask)
        if positions is None or before is None or positions.source is None:
            return None
        if before.source not in (None, positions.source) or mask.numel() != positions.source.size:
            return None
        written = positions.capped(indices[0].numel()).parts
        return Fact(Kind.MASK, positions.source, before.parts + written)

    def _gathered(self, tensor: Any, indices: Any, made: torch.Tensor) -> Fact | None:
        """``tensor[index]``: values in the index's ranges where the index holds positions of
        ``tensor`` as it was tested; else ``tensor``'s own fact, each range counting every
        element (an index may repeat one)."""
        if not _line(tensor) or not isinstance(indices, (list, tuple)) or len(indices) != 1:
            return None
        index = indices[0]
        if not _line(index) or index.dtype in (torch.bool, torch.uint8):
            return None
        positions = self._fact(index, Kind.POSITIONS)
        if positions is not None and positions.source == self._source(tensor):
            return replace(positions, kind=Kind.VALUES, source=None)
        distinct = positions is not None or self._fact(index, Kind.DISTINCT) is not None
        own = self._fact(tensor, Kind.POSITIONS) or self._fact(tensor, Kind.VALUES)
        if own is None:
            return self._points(tensor) if distinct else None
        if distinct:
            return own
        return replace(own, parts=tuple(Part(p.range, made.numel()) for p in own.parts))

    def _points(self, tensor: torch.Tensor) -> Fact | None:
        """``tensor[positions]`` of decided values, no position twice: a point for each distinct
        value, at most as many elements in it as ``tensor`` holds."""
        found = self._decided(tensor)
        if found is None or found.is_floating_point() or found.is_complex():
            return None
        points, counts = torch.unique(found, return_counts=True)
        if points.numel() > _POINTS:
            return None
        return Fact(
            Kind.VALUES,
            None,
            tuple(
                Part(Range(v, v, True, True), c)
                for v, c in zip(points.tolist(), counts.tolist(), strict=True)
            ),
        )

    def _mask(self, tensor: Any) -> Fact | None:
        """``tensor``'s mask fact; an empty one where it is all zeros."""
        if not _line(tensor):
            return None
        fact = self._fact(tensor, Kind.MASK)
        if fact is not None:
            return fact
        return Fact(Kind.MASK, None, ()) if self._count(tensor) == 0 else None

    def _fact(self, tensor: Any, kind: Kind) -> Fact | None:
        """The fact of ``tensor``'s storage, where it is of ``kind`` and holds for ``tensor``
        (a mask only for its whole storage, positions and values for any view of theirs)."""
        if not self._facts or not _line(tensor):
            return None
        fact = self._facts.get(tensor.untyped_storage()._cdata)
        if fact is None or fact.kind is not kind or (kind is Kind.MASK and not _spans(tensor)):
            return None
        return fact

    def _source(self, tensor: torch.Tensor) -> Source:
        """``tensor`` as its values are now: its storage's stamp, given at first sight and
        again after each write."""
        storage = tensor.untyped_storage()
        key = storage._cdata
        stamp = self._stamps.get(key)
        if stamp is None:
            stamp = self._stamps[key] = next(self._next)
            if key not in self._watched:
                self._watched.add(key)
                weakref.finalize(storage, self._ended, key)
        return Source(key, stamp, int(tensor.storage_offset()), tensor.numel(), tensor.stride(0))

    def _ended(self, key: int) -> None:
        """A storage ended: a new one at its address is another tensor."""
        self._stamps.pop(key, None)
        self._watched.discard(key)


def _point(range_: Range) -> bool:
    """Whether ``range_`` holds one number."""
    return range_.low == range_.high and range_.low_in and range_.high_in


def _joined(either: bool, masks: list[Fact]) -> Fact | None:
    """``|`` of two masks (either's ranges) or ``&`` (the smaller side's)."""
    sources = {m.source for m in masks if m.source is not None}
    if len(sources) > 1:
        return None
    if not either:
        return min(masks, key=lambda m: sum(p.count for p in m.parts))
    source = next(iter(sources), None)
    return Fact(Kind.MASK, source, tuple(p for m in masks for p in m.parts))
