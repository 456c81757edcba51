"""Values known in part: the extremes a script writes among unknown values, followed through a
sort and the tests of its result.

A metric-learning miner (pytorch-metric-learning's ``MultiSimilarityMiner``) writes its dtype's
largest value (``torch.finfo(dtype).max``) over the negative pairs of a batch's similarity
matrix (``mat[a2, n] = ...``, its indices the labels', known) and the smallest over the
positive ones, sorts each row, and takes ``torch.where(sorted - eps < row_max)``: a sorted
largest value never passes, so a GPU selects at most the positive pairs. The similarities are a
model's, unknown in a plan, so the matrix is known in part
(:meth:`~memforensics.plan.known.Known._piece`). Unknown values are finite
(:mod:`~memforensics.plan.known`), so each lies between its dtype's smallest and largest
value, which decides where the extremes go and what tests of them give:

- a sort along a dimension puts each slice's known values at or below the smallest finite
  value (``-inf`` too) first and those at or above the largest (``+inf``, and NaN, which torch
  orders above every number on the CPU and CUDA alike) last, the other elements, known or not,
  in between in an unknown order; ``topk`` with ``sorted=True`` likewise. The indices stay
  unknown;
- an elementwise operator is known where every input is; an order test (``<``, ``<=``, ``>``,
  ``>=``) also where one side is unknown and the test gives the same at that side's smallest
  and largest value (it is monotone in it), and ``==``, ``!=`` where the known side is
  infinite or NaN.

Each function takes an input's part as ``(done, values)``: where its values are known, and
those values (anything where not done), and gives the output's so.
"""

from __future__ import annotations

from typing import Any

import torch

_aten = torch.ops.aten
Part = tuple[torch.Tensor, torch.Tensor]
"""Where a tensor's values are known (``done``) and its values there."""

SORTS = frozenset((_aten.sort.default, _aten.sort.stable, _aten.topk.default))
"""Operators whose first output orders a slice's values: sorted or the ``k`` extreme ones."""
_ORDERS = frozenset(
    getattr(getattr(_aten, name), overload)
    for name in ("lt", "le", "gt", "ge")
    for overload in ("Tensor", "Scalar")
)
"""Order tests: monotone in either side."""
_EQUALITY = frozenset((_aten.eq.Tensor, _aten.eq.Scalar, _aten.ne.Tensor, _aten.ne.Scalar))
"""Equality tests: decided by an infinite or NaN side against any finite value."""


def _ends(dtype: torch.dtype) -> tuple[Any, Any]:
    """The smallest and largest finite value of ``dtype``."""
    if dtype == torch.bool:
        return False, True
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        return info.min, info.max
    whole = torch.iinfo(dtype)
    return whole.min, whole.max


def _extreme(values: torch.Tensor) -> torch.Tensor:
    """Where ``values`` lie at or beyond their dtype's finite ends, or are NaN: where a sort
    puts them before or after every finite value."""
    low, high = _ends(values.dtype)
    found: torch.Tensor = (values <= low) | (values >= high) | values.isnan()
    return found


def _sort_options(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A sort's or ``topk``'s options by name, as its schema gives them."""
    names = [argument.name for argument in func._schema.arguments]
    return {**dict(zip(names, args, strict=False)), **kwargs}


def sorted_part(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], part: Part
) -> Part | None:
    """The part of ``func``'s sorted values (its first output) that ``part`` of its input
    decides: each slice's known extremes at its ends; None where ``func`` is not a sort, or a
    ``topk`` that leaves its values unsorted."""
    done, values = part
    if func not in SORTS or not values.is_floating_point():
        return None
    if func is _aten.topk.default and not _sort_options(func, args, kwargs).get("sorted", True):
        return None
    at_ends = torch.where(done & _extreme(values), values, torch.zeros_like(values))
    ordered = func(at_ends, *args[1:], **kwargs)[0]
    return _extreme(ordered), ordered


def elementwise_part(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], parts: dict[int, Part]
) -> Part | None:
    """The part of an elementwise operator's output that its inputs' ``parts`` (by the ``id``
    of their tensor in ``args``) decide; other tensors in ``args`` are known whole (a host
    tensor). None where the CPU cannot run it so."""
    if any(isinstance(v, torch.Tensor) for v in kwargs.values()):
        return None
    sides = {
        i: parts.get(id(a), (torch.ones_like(a, dtype=torch.bool), a))
        for i, a in enumerate(args)
        if isinstance(a, torch.Tensor)
    }
    if not sides:
        return None
    exact = func(*_with(args, sides, 0), **kwargs)
    if not isinstance(exact, torch.Tensor):
        return None
    unknown = torch.zeros(exact.shape, dtype=torch.int64)
    for done, _ in sides.values():
        unknown = unknown + (~done).to(torch.int64)
    everywhere = unknown == 0
    if func not in _ORDERS and func not in _EQUALITY:
        return everywhere, exact
    low = func(*_with(args, sides, -1), **kwargs)
    high = func(*_with(args, sides, 1), **kwargs)
    if func in _ORDERS:
        decided = low == high
    else:
        decided = torch.zeros(exact.shape, dtype=torch.bool)
        for done, values in sides.values():
            if values.is_floating_point():
                decided = decided | (done & ~torch.isfinite(values))
    return everywhere | ((unknown == 1) & decided), torch.where(everywhere, exact, low)


def _with(args: tuple[Any, ...], sides: dict[int, Part], end: int) -> list[Any]:
    """``args`` with each tensor at a position of ``sides`` taken as its part, its unknown
    elements zero (``end`` 0), its dtype's smallest (-1) or largest (1) finite value."""
    found = list(args)
    for i, (done, values) in sides.items():
        fill = 0 if end == 0 else _ends(values.dtype)[end > 0]
        found[i] = torch.where(done, values, torch.full_like(values, fill))
    return found
