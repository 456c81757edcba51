"""What an operator's ``meta`` kernel makes, remembered per call's shapes.

Most of an emulated operator's cost is its ``meta`` kernel: torch's Python references
(``torch._refs``, the decompositions registered for ``Meta``) work out broadcasting, type
promotion and strides anew on every call, while a model runs the same few dozen calls on the
same shapes in every layer, step and generated token. An ``aten`` operator that makes new
tensors and writes none of its inputs has outputs decided by its inputs' dtypes, sizes, strides
and offsets, its other arguments, and the default dtype: their description is kept from the
first call and later calls make new tensors to match (``empty_strided`` on ``meta``), each with
a storage of its own exactly as large as the kernel's, so the planned device sees the same
allocations. Kept only where nothing else may watch the kernel run (no other dispatch mode
under the plan's) and where the outputs could be made again exactly: plain strided tensors,
each alone in a new storage that starts where it does.
"""

from __future__ import annotations

from typing import Any

import torch

_LIMIT = 1 << 14
"""Calls kept at most; past it the description of every call is made again."""
_SKIPPED_TAGS = frozenset(
    (
        torch.Tag.nondeterministic_seeded,
        torch.Tag.dynamic_output_shape,
        torch.Tag.data_dependent_output,
        torch.Tag.inplace_view,
    )
)
"""Operators whose outputs their inputs' shapes do not decide, or that change an input."""
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_SCALARS = (int, float, bool, complex, str, type(None))
_VALUES = (torch.dtype, torch.device, torch.layout, torch.memory_format)
_META = torch._C.DispatchKey.Meta
_keys = torch._C._dispatch_keys
_modes_below = torch._C._len_torch_dispatch_stack
_functions_off = torch._C.DisableTorchFunction
_default_dtype = torch.get_default_dtype
_inference = torch.is_inference_mode_enabled
_empty_strided = torch.ops.aten.empty_strided.default
Output = tuple[int, torch.dtype, torch.Size, tuple[int, ...], int] | None
"""One output made again: its dispatch keys, dtype, sizes, strides and storage bytes (None
for an output the kernel left undefined)."""


class _Uncached(Exception):
    """A call whose arguments cannot key the outputs."""


class MetaOutputs:
    """The outputs of ``meta`` kernels, by operator and call."""

    def __init__(self) -> None:
        self._operators: dict[Any, bool] = {}
        self._made: dict[tuple[Any, ...], tuple[type, tuple[Output, ...]] | None] = {}

    def key(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """What decides ``func``'s outputs in this call, or None where they are not kept."""
        kept = self._operators.get(func)
        if kept is None:
            kept = self._operators[func] = _keeps(func)
        if not kept or _modes_below():
            return None
        try:
            with _functions_off():
                return (
                    func,
                    _default_dtype(),
                    _inference(),
                    *[_described(value) for value in args],
                    *[(name, _described(value)) for name, value in kwargs.items()],
                )
        except _Uncached:
            return None

    def made(self, key: Any) -> Any:
        """New outputs as ``func``'s kernel made them for ``key`` before; None the first
        time (or for a call whose outputs cannot be made again)."""
        try:
            found = self._made.get(key)
        except TypeError:  # an argument that cannot key a call (a symbolic size)
            return None
        if found is None:
            return None
        kind, outputs = found
        with _functions_off():
            made = [_made_again(output) for output in outputs]
        return made[0] if kind is torch.Tensor else kind(made)

    def keep(self, key: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """Remember what the kernel made for ``key``, where it can be made again exactly."""
        try:
            if key in self._made:
                return
        except TypeError:
            return
        if len(self._made) >= _LIMIT:
            self._made.clear()
        with _functions_off():
            self._made[key] = _description(out, args, kwargs)


def _keeps(func: Any) -> bool:
    """Whether ``func`` is an ``aten`` operator whose outputs are all new tensors, writing none
    of its inputs, and decided by their shapes."""
    if not isinstance(func, torch._ops.OpOverload) or func.namespace != "aten" or func.is_view:
        return False
    schema = func._schema
    if schema.is_mutable or any(r.alias_info is not None for r in schema.returns):
        return False
    return _SKIPPED_TAGS.isdisjoint(func.tags)


def _described(value: Any) -> Any:
    """One argument as it decides a ``meta`` kernel's outputs."""
    kind = type(value)
    if kind in _PLAIN:
        keys = _keys(value)
        if not keys.has(_META) or value.layout != torch.strided:
            raise _Uncached
        return (keys.raw_repr(), value.dtype, value.shape, value.stride(), value.storage_offset())
    if kind in _SCALARS:
        return (kind, value)  # 1, 1.0 and True are equal, but not the same argument
    if kind in _VALUES:
        return value
    if kind is list or kind is tuple:
        return (kind, *[_described(item) for item in value])
    raise _Uncached


def _description(
    out: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[type, tuple[Output, ...]] | None:
    """How to make ``out`` again, or None where it cannot be exactly."""
    if type(out) in _PLAIN:
        outputs: tuple[Any, ...] = (out,)
        kind: type = torch.Tensor
    elif type(out) in (tuple, list):
        outputs, kind = tuple(out), type(out)
    else:
        return None
    taken = {_storage(v) for v in (*args, *kwargs.values()) if type(v) in _PLAIN}
    described: list[Output] = []
    for output in outputs:
        if output is None:
            described.append(None)
            continue
        if type(output) not in _PLAIN or output.layout != torch.strided:
            return None
        storage = output.untyped_storage()
        if (
            not _keys(output).has(_META)
            or output.requires_grad
            or output.storage_offset() != 0
            or storage._cdata in taken
            or storage.nbytes() != _spanned(output)
        ):
            return None
        taken.add(storage._cdata)
        entry = (
            _keys(output).raw_repr(),
            output.dtype,
            output.shape,
            output.stride(),
            storage.nbytes(),
        )
        again = _made_again(entry)
        if again is None or _keys(again).raw_repr() != entry[0]:
            return None
        described.append(entry)
    return kind, tuple(described)


def _storage(tensor: torch.Tensor) -> int:
    return int(tensor.untyped_storage()._cdata)


def _spanned(tensor: torch.Tensor) -> int:
    """The bytes ``empty_strided`` gives a tensor of ``tensor``'s sizes and strides."""
    if tensor.numel() == 0:
        return 0
    spans = zip(tensor.shape, tensor.stride(), strict=True)
    last = sum((size - 1) * stride for size, stride in spans)
    return int((last + 1) * tensor.element_size())


def _made_again(output: Output) -> torch.Tensor | None:
    if output is None:
        return None
    _, dtype, shape, stride, _ = output
    made: torch.Tensor = _empty_strided(shape, stride, dtype=dtype, device="meta")
    return made
