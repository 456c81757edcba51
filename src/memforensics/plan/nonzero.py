"""How many elements of a stand-in can be non-zero, where its values are unknown but the
script's own code bounds them: a mask of sampled entries.

A sampler (torchvision's ``BalancedPositiveNegativeSampler``) starts from a mask of zeros and
sets the entries it picks by index (``mask[idx] = 1``, ``idx`` of at most ``num_pos``
elements), then joins two such masks (``pos | neg``) and takes their indices
(``torch.where``). Which entries are set is unknown in a plan; how many can be is not. The
bound is carried by storage, beside the known values (:mod:`~memforensics.plan.known`):

- a fill of zeros (``zeros``, ``zeros_like``, ``new_zeros``, ``zero_``): none, at any size;
- an indexed write (``index_put_``, ``index_fill_``, ``scatter_``) of ``k`` positions: at most
  the count before plus ``k``, whatever it writes;
- a copy (``clone``, a cast): its source's;
- ``|``: the sum of its two sides'; ``&`` and ``*``: the smaller (a product is non-zero only
  where both factors are). A side broadcast to the result counts each of its elements as often
  as it is repeated; where both sides' values are known, ``&`` and ``*`` count the elements
  where both are non-zero, without making the result (pytorch-metric-learning's triplets,
  ``matches.unsqueeze(2) * diffs.unsqueeze(1)``: anchor, positive and negative of one batch's
  labels, the batch's size cubed).

A mask known in part (:mod:`~memforensics.plan.partly`: a test of sorted rows whose written
extremes decide it) can be non-zero only at its known non-zero elements and its unknown ones,
and its ``nonzero`` holds each index along a dimension at most as often as that slice can: a
broadcast ``==`` of two columns of such positions (a metric-learning loss pairing hard positive
and hard negative pairs by anchor, ``torch.where(a1.unsqueeze(1) == a2)``) holds at most, for
each index, the product of the two sides' counts.

``nonzero`` (``torch.where(mask)``), ``masked_select`` and indexing by the mask then make at
most that many elements (never more than the mask holds), where a mask of unknown values makes
as many as it holds. Each is an upper bound still: a GPU's count is the same where the sampled
entries do not overlap (``pos`` and ``neg`` never do). What is known of the values at the picked
positions (:mod:`~memforensics.plan.picks`) bounds a test of them the same way. Only operators
that can leave a bound look one up; the others pay one set lookup.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from memforensics.plan import picks
from memforensics.plan.picks import Fact, Picks

_ZEROS = frozenset(
    (
        torch.ops.aten.zeros.default,
        torch.ops.aten.zeros_like.default,
        torch.ops.aten.new_zeros.default,
        torch.ops.aten.zero_.default,
    )
)
"""Factories and fills whose every element is zero."""
_PUT = frozenset(
    (
        torch.ops.aten.index_put_.default,
        torch.ops.aten.index_put.default,
        torch.ops.aten._index_put_impl_.default,
    )
)
"""Writes at the positions a list of index tensors names (``mask[idx] = 1``)."""
_FILL = frozenset(
    (
        torch.ops.aten.index_fill_.int_Scalar,
        torch.ops.aten.index_fill_.int_Tensor,
        torch.ops.aten.index_fill.int_Scalar,
        torch.ops.aten.index_fill.int_Tensor,
    )
)
"""Fills of whole slices along one dimension at the indices named: ``(self, dim, index, value)``."""
_SCATTER = frozenset(
    (
        torch.ops.aten.scatter_.value,
        torch.ops.aten.scatter_.src,
        torch.ops.aten.scatter.value,
        torch.ops.aten.scatter.src,
    )
)
"""Writes of one element per element of the index: ``(self, dim, index, ...)``."""
_COPIES = frozenset(
    (
        torch.ops.aten.clone.default,
        torch.ops.aten._to_copy.default,
    )
)
"""Copies, casts included: a cast never makes a zero non-zero."""
OR = frozenset(
    (
        torch.ops.aten.bitwise_or.Tensor,
        torch.ops.aten.logical_or.default,
        torch.ops.aten.__or__.Tensor,
    )
)
"""Elementwise ``|`` of two tensors (flags or masks)."""
AND = frozenset(
    (
        torch.ops.aten.bitwise_and.Tensor,
        torch.ops.aten.logical_and.default,
        torch.ops.aten.__and__.Tensor,
    )
)
"""Elementwise ``&`` of two tensors (flags or masks)."""
_PRODUCTS = AND | {torch.ops.aten.mul.Tensor}
"""Elementwise operators whose result is non-zero only where both sides are."""
_HOST_COUNTED = 1 << 16
"""Largest host tensor, in bytes, whose non-zero elements are counted for a bound."""
_ALL = _ZEROS | _PUT | _FILL | _SCATTER | _COPIES | OR | _PRODUCTS
"""Every operator that can make a bound by count."""
_ANY = _ALL | picks.ALL
"""Every operator that can make a bound, by count or by what it picks."""
_NONZERO = torch.ops.aten.nonzero.default
_EQ = torch.ops.aten.eq.Tensor
"""A test of positions against positions (``a1.unsqueeze(1) == a2``): a broadcast ``==``."""


@dataclass(frozen=True)
class Columns:
    """What ``nonzero`` of a mask known in part leaves known of its positions: for each of
    the mask's dimensions, at most how many positions hold each index along it (a row's
    elements that can be non-zero)."""

    most: tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class Bounded:
    """What one operator leaves known of what it made or wrote: at most how many of its
    elements are non-zero, and what it picks (:mod:`~memforensics.plan.picks`)."""

    counted: tuple[torch.Tensor, int] | None
    picked: tuple[torch.Tensor, Fact] | None
    columns: tuple[torch.Tensor, Columns] | None = None


def _whole(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` repeats none of its storage's elements (no broadcast view), so it
    holds at most as many non-zero elements as its storage."""
    return all(
        stride != 0 or size == 1 for size, stride in zip(tensor.shape, tensor.stride(), strict=True)
    )


def _positions(target: torch.Tensor, indices: Any) -> int | None:
    """How many elements ``target[indices] = ...`` writes, for integer index tensors on its
    leading dimensions; None for another kind of index (a boolean mask, a gap)."""
    shapes = []
    for index in indices:
        if not isinstance(index, torch.Tensor) or index.is_floating_point():
            return None
        if index.dtype in (torch.bool, torch.uint8):
            return None
        shapes.append(index.shape)
    if not shapes:
        return None
    rest = math.prod(target.shape[len(shapes) :])
    indexed = torch.broadcast_shapes(*shapes)  # type: ignore[no-untyped-call, unused-ignore]  # torch's own
    return int(indexed.numel()) * int(rest)


def _possible(part: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Where a tensor known in part (``done``, ``values``) can be non-zero: its known non-zero
    elements and its unknown ones."""
    done, values = part
    return (values != 0) | ~done


def _column(tensor: torch.Tensor, width: int) -> int | None:
    """Which column of a ``(count, width)`` storage of positions ``tensor`` reads, each
    element of it once (``torch.where(mask)[0]``, unsqueezed or not); None where it reads
    another way."""
    if not _whole(tensor):
        return None
    if any(stride % width != 0 for size, stride in zip(tensor.shape, tensor.stride(), strict=True)
           if size > 1):  # fmt: skip
        return None
    return int(tensor.storage_offset()) % width


def both_nonzero(first: torch.Tensor, second: torch.Tensor, shape: tuple[int, ...]) -> int:
    """How many elements of ``shape`` are non-zero in both ``first`` and ``second`` broadcast to
    it, counted without making it: along a dimension where one side is repeated, the other's
    non-zero elements are summed first, so the work is the larger side's, not the result's."""
    sides = []
    for side in (first, second):
        flags = (side != 0).to(torch.int64)
        sides.append(flags.reshape((1,) * (len(shape) - flags.dim()) + tuple(flags.shape)))
    left, right = sides
    for dim in range(len(shape)):
        if left.shape[dim] == 1 and right.shape[dim] != 1:
            right = right.sum(dim, keepdim=True)
        elif right.shape[dim] == 1 and left.shape[dim] != 1:
            left = left.sum(dim, keepdim=True)
    return int((left * right).sum())


class NonzeroBounds:
    """Upper bounds on the non-zero elements of stand-ins' storages, by storage, kept as long
    as the storage lives; ``count`` gives a known tensor's exact count, None for an unknown
    one."""

    def __init__(
        self,
        count: Callable[[torch.Tensor], int | None],
        decided: Callable[[torch.Tensor], torch.Tensor | None],
        partly: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor] | None] | None = None,
    ) -> None:
        self._count = count
        self._decided = decided
        self._partly = partly
        self._bounds: dict[int, int] = {}
        self._columns: dict[int, Columns] = {}
        self.picks = Picks(self._of, decided)
        """What positions taken from tests of unknown values pick."""

    def at_most(self, tensor: torch.Tensor) -> int | None:
        """At most how many of ``tensor``'s elements are non-zero, where a bound is known: the
        smaller of its count's and its picks'."""
        if not tensor.is_meta or not _whole(tensor):
            return None
        found = []
        if self._bounds:
            bound = self._bounds.get(tensor.untyped_storage()._cdata)
            if bound is not None:
                found.append(min(bound, tensor.numel()))
        if self.picks:
            picked = self.picks.at_most(tensor)
            if picked is not None:
                found.append(picked)
        if self._partly is not None:
            part = self._partly(tensor)
            if part is not None:
                found.append(int(_possible(part).sum()))
        return min(found) if found else None

    def distinct(self, tensor: torch.Tensor) -> int | None:
        """At most how many distinct values ``tensor`` holds, where known
        (:meth:`~memforensics.plan.picks.Picks.distinct`)."""
        return self.picks.distinct(tensor) if self.picks else None

    def __bool__(self) -> bool:
        """Whether any storage has a bound."""
        return bool(self._bounds) or bool(self.picks) or bool(self._columns)

    def forget(self, tensors: list[torch.Tensor]) -> None:
        """``tensors``' values changed in a way no bound follows."""
        if self._bounds or self._columns:
            for tensor in tensors:
                self._bounds.pop(tensor.untyped_storage()._cdata, None)
                self._columns.pop(tensor.untyped_storage()._cdata, None)
        self.picks.forget(tensors)

    def bound(self, func: Any, args: tuple[Any, ...], out: Any) -> Bounded | None:
        """The bound ``func`` leaves on what it made or wrote, from its inputs as they are
        before it is accounted for; None where it leaves none."""
        if func not in _ANY and func is not _EQ:
            return None
        counted = self._counted(func, args, out) if func in _ALL or func is _EQ else None
        picked = self.picks.pick(func, args, out)
        columns = self._nonzero_columns(args, out) if func is _NONZERO else None
        if counted is None and picked is None and columns is None:
            return None
        return Bounded(counted, picked, columns)

    def _counted(
        self, func: Any, args: tuple[Any, ...], out: Any
    ) -> tuple[torch.Tensor, int] | None:
        bound = self._bound(func, args, out)
        if bound is None:
            return None
        made = args[0] if func._schema.name.endswith("_") else out
        if not isinstance(made, torch.Tensor) or not made.is_meta:
            return None
        return made, min(bound, made.numel())

    def keep(self, bounded: Bounded) -> None:
        """A tensor's values are bounded so (:meth:`bound`)."""
        if bounded.picked is not None:
            self.picks.keep(bounded.picked)
        if bounded.columns is not None:
            made, columns = bounded.columns
            storage = made.untyped_storage()
            if storage._cdata not in self._columns:
                weakref.finalize(storage, self._columns.pop, storage._cdata, None)
            self._columns[storage._cdata] = columns
        if bounded.counted is None:
            return
        made, bound = bounded.counted
        storage = made.untyped_storage()
        key = storage._cdata
        if key not in self._bounds:
            weakref.finalize(storage, self._bounds.pop, key, None)
        self._bounds[key] = bound

    def _bound(self, func: Any, args: tuple[Any, ...], out: Any) -> int | None:
        if func in _ZEROS:
            return 0
        if func is _EQ:
            return self._matched(args) if self._columns else None
        first = args[0] if args else None
        if not isinstance(first, torch.Tensor):
            return None
        if func in _COPIES:
            return self._of(first)
        if func in OR or func in _PRODUCTS:
            second = args[1] if len(args) > 1 else None
            if not isinstance(second, torch.Tensor) or not isinstance(out, torch.Tensor):
                return None
            return self._joined(func in OR, first, second, out)
        before = self._of(first)
        if before is None:
            return None
        if func in _PUT:
            written = _positions(first, args[1])
        elif isinstance(args[2], torch.Tensor):
            written = args[2].numel()
            if func in _FILL:
                written *= first.numel() // max(1, first.shape[args[1]])
        else:
            return None
        return None if written is None else before + written

    def _nonzero_columns(
        self, args: tuple[Any, ...], out: Any
    ) -> tuple[torch.Tensor, Columns] | None:
        """``nonzero`` of a mask known in part: at most how many positions hold each index
        along each of its dimensions."""
        mask = args[0] if args else None
        if self._partly is None or not isinstance(mask, torch.Tensor) or mask.dim() < 2:
            return None
        if not isinstance(out, torch.Tensor) or not out.is_meta or not out.is_contiguous():
            return None
        part = self._partly(mask)
        if part is None:
            return None
        possible = _possible(part).to(torch.int64)
        dims = range(possible.dim())
        most = tuple(possible.sum([d for d in dims if d != kept]) for kept in dims)
        return out, Columns(most)

    def _matched(self, args: tuple[Any, ...]) -> int | None:
        """At most how many of ``first == second`` hold, each side a column of ``nonzero``'s
        positions of a mask known in part, broadcast against the other (pytorch-metric-
        learning's ``torch.where(a1.unsqueeze(1) == a2)``, the anchors of hard positive and
        hard negative pairs): for each index, the most positions of one side holding it times
        the other's."""
        if len(args) < 2 or not all(isinstance(a, torch.Tensor) and a.is_meta for a in args[:2]):
            return None
        counts = []
        for side in args[:2]:
            columns = self._columns.get(side.untyped_storage()._cdata)
            if columns is None:
                return None
            column = _column(side, len(columns.most))
            if column is None:
                return None
            counts.append(columns.most[column])
        if counts[0].shape != counts[1].shape:
            return None
        return int((counts[0] * counts[1]).sum())

    def _joined(
        self, union: bool, first: torch.Tensor, second: torch.Tensor, out: torch.Tensor
    ) -> int | None:
        """At most how many of ``out``'s elements are non-zero where it joins two sides:
        ``union`` (``|``) the sum of the sides', else (``&``, ``*``) the count of both where
        their values are known, the smaller side's where not."""
        if not union:
            both = self._both(first, second, out)
            if both is not None:
                return both
        sides = [self._spread(t, out) for t in (first, second)]
        if union:
            return None if None in sides else sum(s for s in sides if s is not None)
        found = [s for s in sides if s is not None]
        return min(found) if found else None

    def _spread(self, side: torch.Tensor, out: torch.Tensor) -> int | None:
        """At most how many of ``out``'s elements ``side``, broadcast to its shape, makes
        non-zero: each of its own as many times as broadcasting repeats it."""
        if side.numel() == 0:
            return None
        found = self._of(side)
        return None if found is None else found * (out.numel() // side.numel())

    def _both(self, first: torch.Tensor, second: torch.Tensor, out: torch.Tensor) -> int | None:
        """How many of ``out``'s elements both sides, broadcast to its shape, make non-zero,
        where both sides' values are known; None otherwise."""
        if first.shape == out.shape and second.shape == out.shape:
            return None  # a known result of known sides is counted from its own values
        values = [self._values(t) for t in (first, second)]
        if values[0] is None or values[1] is None:
            return None
        return both_nonzero(values[0], values[1], tuple(out.shape))

    def _values(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """``tensor``'s values on the CPU: a small host tensor's own, a stand-in's where the
        script's values decide them."""
        if not tensor.is_meta:
            small = tensor.numel() * tensor.element_size() <= _HOST_COUNTED
            return tensor if small and tensor.device.type == "cpu" else None
        return self._decided(tensor)

    def _of(self, tensor: torch.Tensor) -> int | None:
        """At most how many of ``tensor``'s elements are non-zero: its exact count where its
        values are known, its bound where it has one."""
        if not tensor.is_meta:  # a host tensor: counted only where small (a batch moved to
            # the device is never read for it: a checkpoint's mmap pages stay on disk)
            small = tensor.numel() * tensor.element_size() <= _HOST_COUNTED
            return int(torch.count_nonzero(tensor)) if small else None
        if not _whole(tensor):
            return None
        found = self._count(tensor)
        return found if found is not None else self.at_most(tensor)
