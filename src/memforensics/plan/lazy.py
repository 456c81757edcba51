"""Lazy modules under the plan: uninitialized parameters moved to the device stay uninitialized.

A lazy module (``nn.LazyLinear``, ``nn.LazyConv2d``, ``nn.LazyBatchNorm1d``) holds
``UninitializedParameter``\\ s of size 0 until its first forward, which infers their shapes from
the input and materializes them (``UninitializedParameter.materialize``: ``torch.empty`` on the
device the parameter's data is on). On a CUDA build, ``.cuda()`` or ``.to("cuda")`` before that
rebinds each one in place (``Module._apply``: ``param.data = moved``, a CPU and a CUDA tensor
being of compatible types), so it is still uninitialized, now on the device, and the first
forward allocates the parameters there at their full size.

A stand-in is ``meta``, which cannot be rebound into a CPU tensor, so ``Module._apply`` would
replace (or, swapping, re-class) each parameter as a plain ``Parameter`` of size 0: the module
then counts itself initialized and its first forward fails on the empty weight. Here an
uninitialized parameter is moved by itself, keeping its object and its class, with a stand-in
as its data; the first forward then materializes it on the planned device, as on a GPU.

A compiled model initializes the lazy modules inside it while dynamo traces it (dynamo's
``initialize_lazy_module`` runs ``_infer_parameters`` eagerly on the trace's fake inputs), which
on a GPU allocates their parameters on the device. The plan sets its modes aside for dynamo's
trace (:mod:`~memforensics.plan.compiled`), so that initialization runs with them pushed again:
the parameters are stand-ins with their blocks, not the script's own ``meta``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.nn.parameter import is_lazy
from torch.overrides import _get_current_function_mode_stack

if TYPE_CHECKING:
    from memforensics.plan.emulate import DeviceMode, StorageMode


def _moved(param: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """``param``, uninitialized, given ``fn(param)`` as its data, still uninitialized: rebound
    where the types allow it (a dtype change on the CPU), as ``Module._apply`` does, and
    otherwise swapped with an uninitialized parameter of its class over the moved data."""
    with torch.no_grad():
        moved = fn(param)
    if moved is param:
        return
    if torch._has_compatible_shallow_copy_type(param, moved):
        param.data = moved
        return
    kept = torch.Tensor._make_subclass(type(param), moved, param.requires_grad)
    torch.utils.swap_tensors(param, kept)  # type: ignore[no-untyped-call, unused-ignore]  # torch is untyped here


def kept_uninitialized(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Module._apply``: ``original`` for every tensor but an uninitialized parameter, which is
    moved by itself and stays uninitialized (its place among the module's parameters kept)."""

    def _apply(module: Any, fn: Callable[..., Any], recurse: bool = True) -> Any:
        params: dict[str, Any] = module._parameters
        lazy = {key: param for key, param in params.items() if is_lazy(param)}
        if not lazy:
            return original(module, fn, recurse)
        order = list(params)
        for key in lazy:
            del params[key]
        try:
            out = original(module, fn, recurse)
        finally:
            rest = dict(params)
            params.clear()
            for key in order:
                params[key] = lazy[key] if key in lazy else rest.pop(key)
            params.update(rest)
        for param in lazy.values():
            _moved(param, fn)
        return out

    return _apply


def initialized_under(
    functions: DeviceMode, storage: StorageMode, original: Callable[..., Any]
) -> Callable[..., Any]:
    """``LazyModuleMixin._infer_parameters``: ``original``, with the emulation's modes pushed
    where they are set aside (dynamo's trace of a compiled model), so a lazy module's
    parameters are made on the planned device wherever it is first called."""

    def _infer_parameters(self: Any, module: Any, args: Any, kwargs: Any = None) -> Any:
        stack = _get_current_function_mode_stack()  # type: ignore[no-untyped-call, unused-ignore]  # torch is untyped here
        if functions in stack:
            return original(self, module, args, kwargs)
        with functions, storage:
            return original(self, module, args, kwargs)

    return _infer_parameters
