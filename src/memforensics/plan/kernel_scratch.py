"""What CUDA kernels allocate through the caching allocator beside their outputs, which their
``meta`` forms never make: cuDNN attention's graph workspaces, flash attention's contiguous
copies, row sums and accumulators, memory-efficient attention's output accumulator (heads above
128), its copy of the output's gradient, row sums and workspace; ``_foreach_norm``'s partial
norms (``clip_grad_norm_``'s); ``pow(Scalar, Tensor)``'s base, which ``pow_Scalar_out`` wraps
as a zero-dimensional tensor on the exponent's device. Each is taken where the CUDA kernel takes
it and freed as it returns; the sizes are :mod:`~memforensics.plan.scratch`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from memforensics.plan import attention, inplace, scratch

FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_backward.default
EFFICIENT_FORWARD = torch.ops.aten._scaled_dot_product_efficient_attention.default
EFFICIENT_BACKWARD = torch.ops.aten._scaled_dot_product_efficient_attention_backward.default
CUDNN_FORWARD = torch.ops.aten._scaled_dot_product_cudnn_attention.default
CUDNN_BACKWARD = torch.ops.aten._scaled_dot_product_cudnn_attention_backward.default
FOREACH_NORM = torch.ops.aten._foreach_norm.Scalar
POW_SCALAR = torch.ops.aten.pow.Scalar
_FAST_NORMS = (1.0, 2.0, math.inf)
"""The orders ``foreach_tensor_norm_cuda`` computes with its own kernel (``use_slowpath``); any
other is a ``linalg_vector_norm`` per tensor."""
KERNELS = frozenset(
    (
        FLASH_BACKWARD,
        EFFICIENT_FORWARD,
        EFFICIENT_BACKWARD,
        CUDNN_FORWARD,
        CUDNN_BACKWARD,
        POW_SCALAR,
    )
)
"""The kernels that take scratch of their own after their outputs
(:meth:`AttentionScratch.after`)."""


def _dense(*tensors: object) -> bool:
    """Whether every one is a four-dimensional stand-in (batch, heads, length, head)."""
    return all(isinstance(t, torch.Tensor) and t.is_meta and t.dim() == 4 for t in tensors)


def _wrapped_base(base: object) -> int:
    """Bytes of the zero-dimensional tensor ``wrapped_scalar_tensor`` makes of a Python number
    (``scalar_to_tensor``: a float as float64, an int as int64, a bool as bool, a complex as
    complex128), or 0 for a base of 1, whose ``pow_Scalar_out`` only fills its output."""
    if isinstance(base, bool):
        return 0 if base else 1
    if isinstance(base, complex):
        return 0 if base == 1 else 16
    if isinstance(base, (int, float)):
        return 0 if base == 1 else 8
    return 0


def _foreach_norm_partials(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """Bytes of the partial norms ``foreach_tensor_norm_cuda`` zeroes before its outputs, or 0
    where it takes its slow path (``use_slowpath``: another order, integer or complex tensors,
    or tensors not all of one dtype, dense and strided, which ``can_use_fast_route`` asks)."""
    tensors = args[0]
    order = args[1] if len(args) > 1 else kwargs.get("ord", 2)
    dtype = args[2] if len(args) > 2 else kwargs.get("dtype")
    if not tensors or not all(isinstance(t, torch.Tensor) and t.is_meta for t in tensors):
        return 0
    first = tensors[0].dtype
    if float(order) not in _FAST_NORMS or not (first.is_floating_point or first.is_complex):
        return 0
    if first.is_complex or not all(
        t.dtype == first and t.layout == torch.strided and inplace.dense(t) for t in tensors
    ):
        return 0
    out = dtype if isinstance(dtype, torch.dtype) else first
    opmath = 8 if out == torch.float64 else 4
    return scratch.foreach_norm_partials([t.numel() for t in tensors], opmath)


class KernelScratch:
    """The scratch of CUDA kernels whose ``meta`` forms make only their outputs, taken from and
    given back to the planned device through ``malloc`` and ``free``."""

    def __init__(
        self,
        malloc: Callable[[int], Any],
        free: Callable[[Any], None],
        capability: tuple[int, int],
    ) -> None:
        self._malloc = malloc
        self._free = free
        self._capability = capability

    def before(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """What ``func`` takes before its outputs, to be freed once it has returned:
        ``_foreach_norm``'s partial norms; contiguous copies, seen as (batch, length, heads,
        head) as the kernel reads them, where that view is not contiguous (a gradient laid out
        as (batch, heads, length, head), or expanded from a sum): ``_flash_attention_backward``'s
        of the output's gradient and of the output, ``_efficient_attention_backward``'s of the
        output's gradient."""
        copied: tuple[Any, ...]
        if func is FOREACH_NORM:
            partials = _foreach_norm_partials(args, kwargs)
            return [self._malloc(partials)] if partials else []
        if func is FLASH_BACKWARD:
            copied = (args[0], args[4])
        elif func is EFFICIENT_BACKWARD:
            copied = (args[0],)
        else:
            return []
        if not _dense(*copied):
            return []
        return [
            self._malloc(t.numel() * t.element_size())
            for t in copied
            if not t.transpose(1, 2).is_contiguous()
        ]

    def after(self, func: Any, args: tuple[Any, ...]) -> None:
        """What ``func`` takes after its outputs and frees as it returns."""
        if func is FLASH_BACKWARD:
            self._flash(args)
        elif func is EFFICIENT_FORWARD:
            self._efficient_forward(args)
        elif func is EFFICIENT_BACKWARD:
            self._efficient(args)
        elif func in (CUDNN_FORWARD, CUDNN_BACKWARD):
            self._cudnn(func, args)
        elif func is POW_SCALAR:
            self._pow_base(args)

    def _pow_base(self, args: tuple[Any, ...]) -> None:
        """``pow_Scalar_out``'s base (``2.0 ** t``, ``torch.pow(10000.0, t)``): after the output,
        ``wrapped_scalar_tensor(base, exp.device())`` puts the number on the device for
        ``pow_out`` to read, and frees it as the kernel returns."""
        exponent = args[1] if len(args) > 1 else None
        if not (isinstance(exponent, torch.Tensor) and exponent.is_meta):
            return
        size = _wrapped_base(args[0])
        if size:
            self._free(self._malloc(size))

    def _flash(self, args: tuple[Any, ...]) -> None:
        """``mha_bwd``'s row sums and accumulator, and with grouped keys and values their
        per-query-head gradients, freed first (:func:`scratch.flash_backward_scratch`)."""
        query, key, value = args[1:4]
        if not _dense(query, key, value):
            return
        splits = (
            scratch.deterministic_splits(self._capability, query.shape[0], query.shape[1])
            if attention.strictly_deterministic()
            else 0
        )
        kept, expanded = scratch.flash_backward_scratch(
            tuple(query.shape), tuple(key.shape), tuple(value.shape), query.element_size(), splits
        )
        blocks = [self._malloc(n) for n in kept]
        for block in [self._malloc(n) for n in expanded]:
            self._free(block)
        for block in reversed(blocks):
            self._free(block)

    def _efficient_forward(self, args: tuple[Any, ...]) -> None:
        """``_efficient_attention_forward``'s float32 output accumulator, where it takes one
        (:func:`scratch.efficient_forward_accumulator`)."""
        query, value = args[0], args[2]
        if not _dense(query, value):
            return
        size = scratch.efficient_forward_accumulator(
            tuple(query.shape), value.shape[-1], query.element_size()
        )
        if size:
            self._free(self._malloc(size))

    def _efficient(self, args: tuple[Any, ...]) -> None:
        """``_efficient_attention_backward``'s row sums (and, for float32 inputs, the
        temporaries computing them, freed once they are copied), then its workspace; both freed
        as it returns (:func:`scratch.efficient_backward_scratch`)."""
        query, key, value = args[1:4]
        if not _dense(query, key, value):
            return
        found = scratch.efficient_backward_scratch(
            tuple(query.shape), tuple(key.shape), tuple(value.shape), query.element_size()
        )
        temporaries = [self._malloc(n) for n in found.delta_from]
        delta = self._malloc(found.delta)
        for block in reversed(temporaries):
            self._free(block)
        workspace = self._malloc(found.workspace)
        self._free(delta)
        self._free(workspace)

    def _cudnn(self, func: Any, args: tuple[Any, ...]) -> None:
        """cuDNN attention's workspace for its graph (``run_cudnn_SDP_fprop`` /
        ``run_cudnn_SDP_bprop``)."""
        query, key, value = args[:3] if func is CUDNN_FORWARD else args[1:4]
        if not all(isinstance(t, torch.Tensor) and t.is_meta for t in (query, key, value)):
            return
        if func is CUDNN_FORWARD:
            size = scratch.CUDNN_ATTENTION_FORWARD_WORKSPACE
        else:
            size = scratch.cudnn_attention_backward_workspace(
                tuple(query.shape), tuple(key.shape), tuple(value.shape), query.element_size()
            )
        self._free(self._malloc(size))
