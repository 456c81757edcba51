"""Operators whose result does not read one input's values, so it is known where the rest are.

A factory from a tensor's shape, dtype and device (``ones_like``, ``zeros_like``,
``full_like``, ``new_zeros``, ``new_ones``, ``new_full``) reads none of its values, and an
operator that writes every element of its destination reads none of the destination's: ``fill_``
and ``zero_``, and ``copy_``, whose source is broadcast to the destination's shape. On a GPU
``torch.empty(n, device="cuda").copy_(host)`` holds the host's values whatever the memory held,
as the NVIDIA ImageNet example's ``data_prefetcher`` and a double-buffered loader rely on, and
``torch.ones_like(logits)`` holds ones whatever the model computed.

The unread input is the first (:data:`UNREAD`). A result of one value everywhere
(:func:`one_value`) is known at any size, as the one value, so a large ``new_zeros`` a mixture of
experts counts its router's choices into is known too.
"""

from __future__ import annotations

from typing import Any

import torch

_aten = torch.ops.aten

FACTORIES = frozenset(
    (
        _aten.ones_like.default,
        _aten.zeros_like.default,
        _aten.full_like.default,
        _aten.new_ones.default,
        _aten.new_zeros.default,
        _aten.new_full.default,
    )
)
"""Factories from a tensor's shape, dtype and device: the tensor's values are not read."""

WHOLE_WRITES = frozenset(
    (
        _aten.fill_.Scalar,
        _aten.fill_.Tensor,
        _aten.fill.Scalar,
        _aten.fill.Tensor,
        _aten.zero_.default,
        _aten.zero.default,
        _aten.copy_.default,
        _aten.copy.default,
    )
)
"""Writes of every element of their first input (``copy_`` broadcasts its source to it): the
values it held are not read."""

UNREAD = FACTORIES | WHOLE_WRITES
"""Operators whose result does not read their first input's values."""

_VALUE_AT = {
    _aten.full_like.default: 1,
    _aten.new_full.default: 2,
    _aten.fill_.Scalar: 1,
    _aten.fill.Scalar: 1,
}
"""Where the number filled in is, for the operators that fill in a number they are given."""
_CONSTANT = {
    _aten.ones_like.default: 1,
    _aten.zeros_like.default: 0,
    _aten.new_ones.default: 1,
    _aten.new_zeros.default: 0,
    _aten.zero_.default: 0,
    _aten.zero.default: 0,
    _aten.ones.default: 1,
    _aten.zeros.default: 0,
}
"""Operators that fill in one constant."""
_FROM_TENSOR = frozenset(
    (_aten.fill_.Tensor, _aten.fill.Tensor, _aten.copy_.default, _aten.copy.default)
)
"""Operators whose result is their second input, broadcast: one value where that is one."""

ONE_VALUE_FACTORIES = frozenset((_aten.ones.default, _aten.zeros.default, _aten.full.default))
"""Factories of one value from a shape alone (``torch.full``'s number is its second input)."""


def one_value(func: Any, args: tuple[Any, ...], known: Any) -> Any:
    """The one value ``func``'s result holds everywhere, or None where it does not hold one
    (or it is not known). ``known``: a tensor's one value where it holds one, else None."""
    if func in _CONSTANT:
        return _CONSTANT[func]
    if func is _aten.full.default:
        return _number(args[1]) if len(args) > 1 else None
    position = _VALUE_AT.get(func)
    if position is not None:
        return _number(args[position]) if len(args) > position else None
    if func in _FROM_TENSOR and len(args) > 1 and isinstance(args[1], torch.Tensor):
        return known(args[1])
    return None


def _number(value: Any) -> Any:
    return value if isinstance(value, (bool, int, float)) else None
