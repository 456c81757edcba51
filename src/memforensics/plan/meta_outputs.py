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

An in-place operator (``add_``, an optimizer's ``_foreach_addcdiv_``) makes nothing: its
kernel checks the call and hands back the input it writes, or nothing. A training loop calls
the same ones on the same parameters every step, and their ``meta`` kernels are torch's Python
too (Adam's foreach updates took a tenth of a small policy's plan). Where a call like it, with
its inputs sharing storages as they did, passed once and left every input's sizes, strides and
offset as they were, it passes again the same way: the kernel is not run. Operators that change
their input's shape (``inplace_view``: ``t_``, ``resize_``, ``set_``) or write an ``out=``
argument are never kept so.
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
_IN_PLACE = torch.Tag.inplace
Output = tuple[int, torch.dtype, torch.Size, tuple[int, ...], int] | None
"""One output made again: its dispatch keys, dtype, sizes, strides and storage bytes (None
for an output the kernel left undefined)."""
UNSEEN = object()
"""What :meth:`MetaOutputs.made` answers for a call whose outputs it cannot make: the kernel
runs."""
_NEW = 1
"""An operator whose outputs are new tensors, made again from their description."""
_WRITES = 2
"""An in-place operator, whose call passes again as it passed before."""
_GAVE_FIRST = "its first input"
"""What an in-place call handed back: the tensor it wrote (``add_``'s ``self``)."""
_GAVE_NOTHING = "nothing"
"""What an in-place call handed back: nothing (``_foreach_mul_``)."""
_WRITES_BUDGET = 1 << 12
"""Tensors an in-place operator's kept calls may describe in all; past it, its calls are no
longer kept. A call whose numbers change every step (Adam's ``_foreach_addcdiv_`` by each
step's step sizes, over every parameter) never passes again, and would otherwise fill the
memory with calls that never come back."""


class _Uncached(Exception):
    """A call whose arguments cannot key the outputs."""


class MetaOutputs:
    """The outputs of ``meta`` kernels, by operator and call."""

    def __init__(self) -> None:
        self._operators: dict[Any, int] = {}
        self._made: dict[tuple[Any, ...], tuple[Any, Any] | None] = {}
        self._spent: dict[Any, int] = {}  # tensors described by an in-place operator's calls

    def key(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """What decides ``func``'s outputs in this call, or None where they are not kept; for
        an in-place operator, also which of its tensors share a storage (a write that overlaps
        a read is refused)."""
        kept = self._operators.get(func)
        if kept is None:
            kept = self._operators[func] = _keeps(func)
        if not kept or _modes_below():
            return None
        try:
            with _functions_off():
                described = (
                    func,
                    _default_dtype(),
                    _inference(),
                    *[_described(value) for value in args],
                    *[(name, _described(value)) for name, value in kwargs.items()],
                )
                if kept == _WRITES:
                    return (*described, _sharing(args, kwargs))
                return described
        except _Uncached:
            return None

    def made(self, key: Any, args: tuple[Any, ...]) -> Any:
        """What ``func``'s kernel hands back for ``key``, as it did before: new outputs made
        again, or the input an in-place call wrote (of ``args``), or nothing; :data:`UNSEEN`
        the first time, and for a call whose outputs cannot be made again."""
        try:
            found = self._made.get(key)
        except TypeError:  # an argument that cannot key a call (a symbolic size)
            return UNSEEN
        if found is None:
            return UNSEEN
        kind, outputs = found
        if outputs is _GAVE_FIRST:
            return args[0]
        if outputs is _GAVE_NOTHING:
            return None
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
        func = key[0]
        if self._operators.get(func) != _WRITES:
            with _functions_off():
                self._made[key] = _description(out, args, kwargs)
            return
        spent = self._spent.get(func, 0) + len(key[-1])
        self._spent[func] = spent
        if spent > _WRITES_BUDGET:
            self._operators[func] = 0
            return
        with _functions_off():
            self._made[key] = _passed(key, args, kwargs, out)


def _keeps(func: Any) -> int:
    """How ``func``'s calls are kept: :data:`_NEW` for an ``aten`` operator whose outputs are
    all new tensors, writing none of its inputs, and decided by their shapes; :data:`_WRITES`
    for an ``aten`` operator that writes its own inputs' values in place and no ``out=``
    argument, keeping their shapes; 0 for any other."""
    if not isinstance(func, torch._ops.OpOverload) or func.namespace != "aten" or func.is_view:
        return 0
    tags = func.tags
    if not _SKIPPED_TAGS.isdisjoint(tags):
        return 0
    schema = func._schema
    if not schema.is_mutable and all(r.alias_info is None for r in schema.returns):
        return _NEW
    written = [a for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    if _IN_PLACE in tags and written and not any(a.is_out for a in written):
        return _WRITES
    return 0


def _sharing(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, ...]:
    """For each tensor of a call, in order, the first tensor of the call on its storage."""
    tensors = [
        t
        for v in (*args, *kwargs.values())
        for t in (v if type(v) in (list, tuple) else (v,))
        if type(t) in _PLAIN
    ]
    first: dict[int, int] = {}
    return tuple(first.setdefault(t.untyped_storage()._cdata, i) for i, t in enumerate(tensors))


def _passed(key: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Any:
    """What an in-place call handed back, where its kernel left every input's dtype, sizes,
    strides and offset as ``key`` has them; None (the kernel runs each time) otherwise."""
    try:
        after = (
            *[_described(value) for value in args],
            *[(name, _described(value)) for name, value in kwargs.items()],
        )
    except _Uncached:
        return None
    if after != key[3 : 3 + len(after)]:
        return None
    if out is None:
        return (None, _GAVE_NOTHING)
    if args and out is args[0]:
        return (None, _GAVE_FIRST)
    return None


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
