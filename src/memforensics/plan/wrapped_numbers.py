"""A number TorchScript holds as a tensor, handed back to its operator as that tensor.

A traced graph keeps a Python number the module computed with (``x.mul(self.cst)``, e3nn's
normalized activations) as a constant: a 0-dim host tensor marked a wrapped number. Where C++
runs an operator on it (the graph's interpreter reading it with ``.item()``, the graph printed
with its constants, as ``torch.jit.trace``'s check prints it to compare two traces), a Python
dispatch mode receives it as a Python number: torch's ``toPyObject`` turns a wrapped number into
a ``bool``, ``int``, ``float`` or ``complex``. Handed back to the operator, such a number is
refused ("Expected a value of type 'Tensor' for argument 'self' but instead found type
'float'") by every operator but the arithmetic ones torch lets take numbers for tensors
(``torch._C._should_allow_numbers_as_tensors``: ``mul``, ``add``, ``to``...), which wrap it
again. On a GPU no mode stands between the interpreter and the kernel, so the plan makes the
number a tensor again where the operator's schema wants one: a 0-dim host tensor of the dtype
``toPyObject`` read it from (``bool``, ``int64`` or ``uint64``, ``float64``, ``complex128``).
"""

from __future__ import annotations

from typing import Any

import torch

_DTYPES: dict[type, torch.dtype] = {
    bool: torch.bool,
    int: torch.int64,
    float: torch.float64,
    complex: torch.complex128,
}
"""The dtype of the wrapped number ``toPyObject`` makes each Python type from."""

_INT64_MAX = 2**63 - 1
"""Above it, ``toPyObject``'s ``int`` was a ``uint64`` wrapped number."""

_TENSOR = "tensor"
_LIST = "list"
"""A schema argument that takes a tensor (or ``None``), and one that takes a list of them."""

_SLOTS: dict[Any, tuple[tuple[int, str, str], ...]] = {}
"""Each operator's arguments that take tensors: position, name and whether a list; empty for an
operator that takes numbers for tensors itself."""


def _slots(func: Any) -> tuple[tuple[int, str, str], ...]:
    """``func``'s arguments that take tensors, read from its schema once."""
    found = _SLOTS.get(func)
    if found is not None:
        return found
    schema = getattr(func, "_schema", None)
    slots: list[tuple[int, str, str]] = []
    if schema is not None and not _takes_numbers(schema.name):
        for position, argument in enumerate(schema.arguments):
            kind = _kind(argument.type)
            if kind is not None:
                slots.append((position, argument.name, kind))
    _SLOTS[func] = found = tuple(slots)
    return found


def _takes_numbers(name: str) -> bool:
    """Whether the operator named ``name`` (``aten::mul``) takes a number for a tensor, as
    torch's Python binding of operators decides (``opAllowsNumbersAsTensors``)."""
    namespace, _, unqualified = name.partition("::")
    if namespace in ("prims", "nvprims"):
        return True
    return namespace == "aten" and bool(torch._C._should_allow_numbers_as_tensors(unqualified))


def _kind(kind: Any) -> str | None:
    """``_TENSOR`` for a ``Tensor`` or ``Tensor?`` argument, ``_LIST`` for a list of them."""
    if isinstance(kind, torch.OptionalType):
        kind = kind.getElementType()
    if isinstance(kind, torch.TensorType):
        return _TENSOR
    if isinstance(kind, torch.ListType):
        return _LIST if _kind(kind.getElementType()) == _TENSOR else None
    return None


def _tensor(value: Any) -> Any:
    """``value`` as the wrapped number it was read from, if it is a number; else itself."""
    dtype = _DTYPES.get(type(value))
    if dtype is None:
        return value
    if dtype is torch.int64 and value > _INT64_MAX:
        dtype = torch.uint64
    return torch.tensor(value, dtype=dtype)


def _number(value: Any) -> bool:
    """Whether ``value`` is a number ``toPyObject`` may have made of a wrapped number."""
    return type(value) in _DTYPES


def _made(value: Any, kind: str) -> Any:
    """``value``, an argument of ``kind``, with its numbers made tensors; None where it holds
    none."""
    if kind == _TENSOR:
        return _tensor(value) if _number(value) else None
    if isinstance(value, (list, tuple)) and any(_number(v) for v in value):
        return type(value)(_tensor(v) for v in value)
    return None


def as_tensors(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None
) -> tuple[tuple[Any, ...], dict[str, Any] | None]:
    """``args`` and ``kwargs`` with each number where ``func`` takes a tensor made a tensor
    again (the wrapped number it was); the same objects where there is none. Every operator
    the plan runs passes here, so the common case (no number) only looks."""
    slots = _SLOTS.get(func)
    if slots is None:
        slots = _slots(func)
    count = len(args)
    for position, name, kind in slots:
        value: Any = args[position] if position < count else (kwargs or {}).get(name)
        if type(value) in _DTYPES:
            return _rebuilt(slots, args, kwargs)
        if kind == _LIST and type(value) in (list, tuple):
            for item in value:
                if type(item) in _DTYPES:
                    return _rebuilt(slots, args, kwargs)
    return args, kwargs


def _rebuilt(
    slots: tuple[tuple[int, str, str], ...], args: tuple[Any, ...], kwargs: dict[str, Any] | None
) -> tuple[tuple[Any, ...], dict[str, Any] | None]:
    """``args`` and ``kwargs`` copied, each number in ``slots`` made a tensor."""
    new_args = list(args)
    new_kwargs = dict(kwargs or {})
    for position, name, kind in slots:
        if position < len(args):
            made = _made(args[position], kind)
            if made is not None:
                new_args[position] = made
        elif name in new_kwargs:
            made = _made(new_kwargs[name], kind)
            if made is not None:
                new_kwargs[name] = made
    return tuple(new_args), new_kwargs if kwargs is not None else None
