"""``flex_attention`` on stand-ins, allocating what the CUDA run allocates for the call.

torch's ``flex_attention`` (``torch/nn/attention/flex_attention.py``) refuses a ``meta``
tensor (``_validate_device``), and its eager path reaches a higher-order operator that the
plan's modes have no rule for. A stand-in's ``.device`` reads ``meta`` by design (docs/plan.md,
"The stand-ins' device"), so the plan answers both where torch's module is imported: the device
check passes a stand-in as the CUDA tensor it stands for, and the operator
(``flex_attention_hop``) runs one of the two things CUDA runs, chosen as dynamo chooses:

- inside a ``torch.compile`` whose backend is Inductor (the default), the operator is lowered
  to the fused Triton kernel (``torch/_inductor/kernel/flex/flex_attention.py``): no scores
  matrix, only the kernel's buffers, each made here as Inductor makes it (:class:`Fused`);
- otherwise (flex called without ``torch.compile``, which torch itself then compiles with an
  eager backend, or a non-Inductor backend) the operator runs its dense implementation
  (``sdpa_dense`` and ``sdpa_dense_backward`` in ``torch/_higher_order_ops/flex_attention.py``),
  which materialises the scores; those are torch's own functions, run here on the stand-ins as
  ``FlexAttentionAutogradOp`` runs them (:class:`Dense`).

The block mask needs nothing of its own: ``create_block_mask`` is torch's Python over ordinary
operators, which the plan already runs as CUDA does. Tensors that are not stand-ins (CPU
tensors, the script's own ``meta`` tensors) take torch's own path.
"""

from __future__ import annotations

import functools
import importlib
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from memforensics.plan.patches import LibraryReplacement
from memforensics.plan.values import INDUCTOR, compiled_backend

MODULE = "torch.nn.attention.flex_attention"
hop_module = importlib.import_module("torch._higher_order_ops.flex_attention")
"""The operator's module (the package's attribute of that name is the operator itself)."""


def _dense_strides(shape: Sequence[int], like: Sequence[int]) -> list[int]:
    """``infer_dense_strides``: dense strides for ``shape`` in the fill order of ``like``'s
    strides (innermost first), with the last dimension innermost as the kernels require."""
    order = sorted(range(len(shape)), key=lambda dim: (like[dim], -dim))
    if order[0] != len(shape) - 1:
        order.remove(len(shape) - 1)
        order.insert(0, len(shape) - 1)
    strides = [0] * len(shape)
    step = 1
    for dim in order:
        strides[dim] = step
        step *= shape[dim]
    return strides


def _empty_like_layout(
    shape: Sequence[int], like: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """A buffer of ``shape`` laid out as ``like`` is, on ``like``'s device."""
    return like.new_empty_strided(tuple(shape), _dense_strides(shape, like.stride()), dtype=dtype)


class Fused(torch.autograd.Function):  # type: ignore[misc, unused-ignore]  # Any without torch
    """The fused Triton kernels' buffers, forward and backward.

    Forward (``flex_attention`` lowering, ``torch/_inductor/kernel/flex/flex_attention.py``
    :369-385 and the template's layout at :362): the log-sum-exp and the row maxima,
    ``(B, Hq, L)`` float32 each, then the output ``(B, Hq, L, Ev)`` in the query's dtype laid
    out as the query. The maxima are not kept for backward (the compiled forward saves the
    inputs, the output and the log-sum-exp).

    Backward (``flex_attention_backward`` lowering, :877-912 and :1085-1094): the incoming
    gradient made contiguous when it is not (AOTAutograd's ``process_runtime_tangent`` in
    ``torch/_functorch/_aot_autograd/runtime_wrappers.py``); ``delta = sum(out * grad_out, -1)``
    as one ``(B, Hq, L)`` float32 reduction (the product is fused into it); with a gradient of
    the log-sum-exp, that gradient scaled and ``delta`` less it, one buffer each; then the
    query's gradient, the value's and the key's, ``(Bq, Hkv, S, ·)`` in their dtypes; where the
    keys' batch is 1 and the queries' is not, their sums over the batch.
    """

    @staticmethod
    def forward(
        ctx: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out, lse, maxima = fused_forward(query, value)
        ctx.mark_non_differentiable(maxima)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(query, key, value, out, lse)
        return out, lse, maxima

    @staticmethod
    def backward(
        ctx: Any, grad_out: torch.Tensor | None, grad_lse: torch.Tensor | None, _: Any
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        query, key, value, out, lse = ctx.saved_tensors
        return fused_backward(query, key, value, out, lse, grad_out, grad_lse)


def fused_forward(
    query: torch.Tensor, value: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused forward kernel's buffers (:class:`Fused`): log-sum-exp, row maxima, output."""
    batch, heads, length, _ = query.shape
    lse = query.new_empty((batch, heads, length), dtype=torch.float32)
    maxima = query.new_empty((batch, heads, length), dtype=torch.float32)
    out = _empty_like_layout((batch, heads, length, value.shape[-1]), query, query.dtype)
    return out, lse, maxima


def fused_backward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor | None,
    grad_lse: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused backward kernels' buffers (:class:`Fused`): the gradients of the query, key
    and value, after the transient ``delta`` (and the scaled log-sum-exp gradient)."""
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    elif not grad_out.is_contiguous():
        grad_out = grad_out.contiguous()
    scaled = None if grad_lse is None else lse.new_empty(lse.shape)
    delta = lse.new_empty(lse.shape)
    batch = query.shape[0]
    heads_kv, length_kv = key.shape[1], key.shape[2]
    grad_query = _empty_like_layout(query.shape, query, query.dtype)
    grad_value = _empty_like_layout(
        (batch, heads_kv, length_kv, value.shape[-1]), value, value.dtype
    )
    grad_key = _empty_like_layout((batch, heads_kv, length_kv, key.shape[-1]), key, key.dtype)
    del delta, scaled, grad_out
    if key.shape[0] != batch:
        grad_key = grad_key.sum(0, keepdim=True)
        grad_value = grad_value.sum(0, keepdim=True)
    return grad_query, grad_key, grad_value


def graph_kernel(target: object) -> Callable[..., Any] | None:
    """What a compiled graph's ``flex_attention`` operator runs in a plan, forward or
    backward: the fused Triton kernel's buffers (:class:`Fused`) in place of the operator,
    whose dispatch has no rule for the plan's modes. The backward also gives a gradient for
    each tensor the score function captured, as the operator's fake implementation does
    (``flex_attention_backward_fake_tensor_mode``)."""
    if target is hop_module.flex_attention:

        def forward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *_: Any) -> Any:
            return fused_forward(query, value)

        return forward
    if target is hop_module.flex_attention_backward:

        def backward(
            query: torch.Tensor,
            key: torch.Tensor,
            value: torch.Tensor,
            out: torch.Tensor,
            lse: torch.Tensor,
            grad_out: torch.Tensor | None,
            grad_lse: torch.Tensor | None,
            *rest: Any,
        ) -> Any:
            grads = fused_backward(query, key, value, out, lse, grad_out, grad_lse)
            captured = rest[5] if len(rest) > 5 else ()
            return (*grads, tuple(
                torch.empty_like(buffer, memory_format=torch.contiguous_format)
                if isinstance(buffer, torch.Tensor) else None
                for buffer in captured
            ))  # fmt: skip

        return backward
    return None


class Dense(torch.autograd.Function):  # type: ignore[misc, unused-ignore]  # Any without torch
    """``FlexAttentionAutogradOp`` over torch's dense implementation, called directly (the
    operator's dispatch has no rule for the plan's modes): the forward runs ``sdpa_dense`` and
    keeps what the original keeps (inputs, output, log-sum-exp, maxima, the block mask's
    tensors); the backward runs ``sdpa_dense_backward`` with the joint graph made in the
    forward, as on CUDA."""

    @staticmethod
    def forward(
        ctx: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        call: tuple[Any, ...],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        score_mod, block_mask, scale, options, score_buffers, mask_buffers, _ = call
        out, lse, maxima = hop_module.sdpa_dense(
            query, key, value, score_mod, block_mask, scale, options, score_buffers,
            mask_buffers,
        )  # fmt: skip
        ctx.mark_non_differentiable(maxima)
        ctx.set_materialize_grads(False)
        ctx.call = call
        tensors = [t for t in block_mask[:-1] if isinstance(t, torch.Tensor)]
        ctx.save_for_backward(query, key, value, out, lse, maxima, *tensors)
        return out, lse, maxima

    @staticmethod
    def backward(
        ctx: Any, grad_out: torch.Tensor | None, grad_lse: torch.Tensor | None, _: Any
    ) -> tuple[torch.Tensor | None, ...]:
        query, key, value, out, lse, _maxima, *_ = ctx.saved_tensors
        score_mod, block_mask, scale, options, score_buffers, mask_buffers, joint = ctx.call
        grad_query, grad_key, grad_value, _captured = hop_module.sdpa_dense_backward(
            query, key, value, out, lse, grad_out, grad_lse, score_mod, joint, block_mask,
            scale, options, score_buffers, mask_buffers,
        )  # fmt: skip
        return grad_query, grad_key, grad_value, None


def _joint_graph(
    query: torch.Tensor, score_mod: Callable[..., Any], score_buffers: tuple[Any, ...]
) -> Any:
    """``flex_attention_autograd``'s joint graph of ``score_mod``, traced on fake tensors from
    five 0-dim tensors on the device (the query's dtype, then four int32), freed after. The
    tracing itself makes no device memory on CUDA either, so it runs outside the plan's
    modes."""
    example = (
        query.new_zeros((), requires_grad=True),
        *(query.new_zeros((), dtype=torch.int) for _ in range(4)),
    )
    with torch._C.DisableTorchFunction(), _disable_current_modes():
        _, joint = hop_module.create_fw_bw_graph(score_mod, example, score_buffers)
    return joint


def _operator(
    original: Callable[..., Any],
) -> Callable[..., Any]:
    """``flex_attention_hop`` for stand-ins: the fused kernel's buffers inside an Inductor
    ``torch.compile``, else torch's dense implementation."""

    def flex_attention_hop(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        score_mod: Callable[..., Any],
        block_mask: tuple[Any, ...],
        scale: float,
        kernel_options: dict[str, Any],
        score_mod_other_buffers: tuple[Any, ...] = (),
        mask_mod_other_buffers: tuple[Any, ...] = (),
    ) -> Any:
        if compiled_backend() == INDUCTOR:
            return Fused.apply(query, key, value)  # type: ignore[no-untyped-call, unused-ignore]
        grads = torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad
            for t in (query, key, value, *score_mod_other_buffers)
        )
        if not grads:
            return hop_module.sdpa_dense(
                query, key, value, score_mod, block_mask, scale, kernel_options,
                score_mod_other_buffers, mask_mod_other_buffers,
            )  # fmt: skip
        joint = _joint_graph(query, score_mod, score_mod_other_buffers)
        call = (score_mod, block_mask, scale, kernel_options, score_mod_other_buffers,
                mask_mod_other_buffers, joint)  # fmt: skip
        return Dense.apply(query, key, value, call)  # type: ignore[no-untyped-call, unused-ignore]

    return flex_attention_hop


def _validate_device(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    """``_validate_device`` for stand-ins, which stand for CUDA tensors: CUDA is supported,
    backward included."""


def _traced_warn_once(original: Callable[..., Any]) -> Callable[..., Any]:
    """``_warn_once`` as dynamo's trace of a compiled caller runs it: the warning that flex
    runs uncompiled is not given (the traced call takes the operator directly)."""

    def _warn_once(warning_id: str, *args: Any, **kwargs: Any) -> None:
        if warning_id != "flex_attention_performance":
            original(warning_id, *args, **kwargs)

    return _warn_once


def _with_names(original: Callable[..., Any], names: dict[str, Any]) -> Callable[..., Any]:
    """``original`` run with ``names`` as its module's names."""
    planned = types.FunctionType(
        original.__code__, names, original.__name__, original.__defaults__, original.__closure__
    )
    planned.__kwdefaults__ = original.__kwdefaults__
    return planned


def on_stand_ins(
    holds: Callable[[Any], bool],
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """torch's ``flex_attention`` itself (its checks, block mask, kernel options and return
    values), its device check and operator answered for stand-ins: the function runs with its
    module's names as they are at the call, those two replaced. Other tensors take torch's
    function as it is."""

    def stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
        module = sys.modules[original.__module__]
        traced = _with_names(original, {**vars(module), "_validate_device": _validate_device})

        @functools.wraps(original)
        def flex_attention(query: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if torch.compiler.is_compiling():
                return traced(query, *args, **kwargs)
            if not (isinstance(query, torch.Tensor) and query.is_meta and not holds(query)):
                return original(query, *args, **kwargs)
            names = dict(vars(module))
            names["_validate_device"] = _validate_device
            names["flex_attention_hop"] = _operator(names["flex_attention_hop"])
            if compiled_backend() is not None:
                names["_warn_once"] = _traced_warn_once(names["_warn_once"])
            return _with_names(original, names)(query, *args, **kwargs)

        return flex_attention

    return stand_in


def rows(holds: Callable[[Any], bool]) -> list[LibraryReplacement]:
    """``flex_attention``, replaced where the script imports it."""
    return [
        LibraryReplacement(
            MODULE,
            "flex_attention",
            on_stand_ins(holds),
            "it refuses a stand-in (its .device reads meta) and its operator's dispatch has no "
            "rule for the plan's modes; CUDA runs the fused kernel when Inductor compiles it, "
            "else the dense implementation",
        ),
    ]
