"""RMSNorm and LayerNorm on stand-ins, as the kernels CUDA runs make them.

``at::rms_norm`` (``aten/src/ATen/native/layer_norm.cpp``, ``rms_norm_symint``) calls
``_fused_rms_norm`` unless the input is complex or channels-last or the weight's dtype differs
from the input's. On CUDA that is one kernel (``_fused_rms_norm_cuda``): it makes the output, of
the input's dtype, and ``rstd``, one float32 per row, and autograd keeps the input and ``rstd``
for ``_fused_rms_norm_backward``, which makes the input's and the weight's gradients. The CPU
build has no kernel for it, only ``CompositeImplicitAutograd``'s ``rms_norm_composite``, and
autograd on ``meta`` runs that composite: a bfloat16 input is upcast, squared, multiplied by
``rstd`` and by the weight in float32, and autograd keeps two float32 copies of the input for the
backward, four times the input's bytes more than CUDA keeps (every ``nn.RMSNorm`` and
``F.rms_norm`` of a Llama-style model, twice a layer).

So for the run ``_fused_rms_norm`` gets a ``Meta`` kernel
(:mod:`~memforensics.plan.own_kernels`) that makes what CUDA's makes, in its order; with a
kernel of its own on ``meta``, the dispatcher sends autograd on a stand-in to
``_fused_rms_norm``'s own derivative, as it does on CUDA, and the backward runs
``_fused_rms_norm_backward``, whose ``meta`` kernel makes the two gradients. Only a torch whose
``rms_norm`` reaches the fused kernel on CUDA (one with ``_fused_rms_norm_backward``) gets it.

``native_layer_norm`` (:func:`layer_norm`) is answered with ``layer_norm_cuda``'s three outputs
in place of its ``meta`` kernel, which computes them slowly, and ``_weight_norm_interface``
(:func:`weight_norm`) with ``weight_norm_cuda``'s two, whose norms the ``meta`` kernel keeps in
float16 for a float16 ``g``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

_OPERATOR = "_fused_rms_norm"
_BACKWARD = "_fused_rms_norm_backward"


def _fused_rms_norm(
    input: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None,
    eps: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``_fused_rms_norm_cuda``'s outputs: ``Y``, contiguous and of the input's dtype, then
    ``rstd`` in the accumulation dtype (float32 below float64), one per row, shaped to broadcast
    over the normalized dimensions."""
    axis = input.dim() - len(normalized_shape)
    accumulate = torch.float64 if input.dtype == torch.float64 else torch.float32
    output = torch.empty_like(input, memory_format=torch.contiguous_format)
    stat_shape = (*input.shape[:axis], *([1] * len(normalized_shape)))
    rstd = input.new_empty(stat_shape, dtype=accumulate)
    return output, rstd


def layer_norm(
    input: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``native_layer_norm``'s outputs as ``layer_norm_cuda`` makes them: ``Y``, contiguous and
    of the input's dtype, then ``mean`` and ``rstd`` in the accumulation dtype, one per row,
    shaped to broadcast over the normalized dimensions. Its ``meta`` kernel is torch's Python
    reference, which computes the normalisation in primitives to find the same three (over 4 ms
    a call: a fifth of a transformer's planned forward); an input the reference would refuse
    is left to it."""
    axis = input.dim() - len(normalized_shape)
    if axis < 0 or input.is_complex() or tuple(input.shape[axis:]) != tuple(normalized_shape):
        refused: tuple[torch.Tensor, torch.Tensor, torch.Tensor] = (
            torch.ops.aten.native_layer_norm.default(input, normalized_shape, weight, bias, eps)
        )
        return refused  # the reference's own error
    accumulate = torch.float64 if input.dtype == torch.float64 else torch.float32
    output = torch.empty_like(input, memory_format=torch.contiguous_format)
    stat_shape = (*input.shape[:axis], *([1] * len(normalized_shape)))
    return (
        output,
        input.new_empty(stat_shape, dtype=accumulate),
        input.new_empty(stat_shape, dtype=accumulate),
    )


def weight_norm(
    v: torch.Tensor, g: torch.Tensor, dim: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``_weight_norm_interface``'s outputs as ``weight_norm_cuda`` (``WeightNorm.cu``) makes
    them: ``w``, contiguous and of ``v``'s dtype, then the norms with ``g``'s sizes and strides,
    in float32 for a float16 or bfloat16 ``g`` (the kernels' accumulation type, which they
    write there), else in ``g``'s dtype. The ``meta`` kernel, torch's decomposition, keeps
    float32 for bfloat16 only: a float16 ``g``'s norms were planned at half their bytes. The
    backward's two gradients, ``empty_like`` of ``v`` and ``g``, are the ``meta`` kernel's."""
    accumulate = torch.float32 if g.dtype in (torch.float16, torch.bfloat16) else g.dtype
    w = torch.empty_like(v, memory_format=torch.contiguous_format)
    norms = torch.empty_strided(g.shape, g.stride(), dtype=accumulate, device=g.device)
    return w, norms


def available() -> bool:
    """Whether the installed torch's ``rms_norm`` runs the fused kernel on CUDA."""
    return hasattr(torch.ops.aten, _OPERATOR) and hasattr(torch.ops.aten, _BACKWARD)


ON_META: dict[str, Callable[..., Any]] = {_OPERATOR: _fused_rms_norm} if available() else {}
"""The fused operator, by name, with the ``Meta`` kernel that makes CUDA's outputs, where the
installed torch has it (:func:`~memforensics.plan.own_kernels.on_meta` registers it)."""
