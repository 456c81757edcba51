"""Work that CUDA does in place and the emulation would do out of place: backward's formulas,
and ``linear``'s bias.

Autograd's formulas (``torch/csrc/autograd/FunctionsManual.cpp``) and its gradient
accumulation (``torch/csrc/autograd/input_buffer.cpp``) ask ``at::isTensorSubclassLike`` /
``at::areAnyTensorSubclassLike`` (``ATen/TensorSubclassLikeUtils.h``) before writing into a
tensor they have just made: for a subclass they work out of place, which it can always follow.
Both tests answer true for every tensor while a Python dispatch mode is active
(``dispatch_mode_enabled()``), and for every ``meta`` tensor besides (``MetaBit`` is in
``kTensorSubclassLike``), so under ``plan`` each such formula makes one more full-size tensor than
it makes on CUDA, where the same line works in place. The table below names the formulas whose
branch changes the bytes; the storage mode gives the out-of-place result the block of the tensor
CUDA would have written into (:meth:`~memforensics.plan.emulate.StorageMode._reusable`), so the
block count and the peak are CUDA's.

``at::native::linear`` (``aten/src/ATen/native/Linear.cpp``) asks the same question of its bias
where it falls back to ``matmul`` (an input that is neither 2-D nor contiguous, such as the
transposed batch ``nn.MultiheadAttention(batch_first=True)`` projects): CUDA adds the bias into
the product with ``add_``, the CPU build under the plan makes a second product-sized tensor.
:func:`linear` takes CUDA's branch.

Formulas whose CUDA branch is the subclass one are left alone: ``max()``/``min()`` of a whole
tensor (``evenly_distribute_backward`` takes the out-of-place branch for ``input.is_cuda()``),
and ``prod``'s, whose CUDA branch depends on the values (a zero in the input), which a stand-in
does not have.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F  # torch's own spelling
from torch.autograd import forward_ad

_A = torch.ops.aten
LINEAR_NAME = "linear"
"""``torch.nn.functional.linear`` (``torch._C._nn.linear``), which ``nn.Linear`` calls."""
_FLATTEN_3D = "TORCH_LINEAR_FLATTEN_3D"
"""``parseLinearFlatten3d``'s variable: ``1`` sends a 3-D input through ``contiguous`` and
``addmm`` whatever its layout."""

ANY_NODE = frozenset(
    (
        _A.scatter_add.default,  # gather_backward, cummaxmin_backward
        _A.index_add.default,  # index_select_backward
        _A.index_put.default,  # index_backward (``x[idx]``, boolean masks)
        _A.masked_scatter.default,  # masked_select's backward
    )
)
"""Operators that fill a buffer the formula has just made (``new_zeros``, ``zeros``), in place on
CUDA, whichever formula calls them."""

_SCATTER = frozenset((_A.scatter.src,))
_SUB_MUL = frozenset((_A.sub.Tensor, _A.mul.Tensor))

BY_NODE: dict[str, frozenset[Any]] = {
    **dict.fromkeys(
        (
            "MaxBackward0",
            "MinBackward0",
            "TopkBackward0",
            "SortBackward0",
            "SortBackward1",
            "KthvalueBackward0",
            "MedianBackward1",
            "NanmedianBackward1",
            "ModeBackward0",
        ),
        _SCATTER,
    ),
    "TraceBackward0": frozenset((_A.index_fill.int_Tensor,)),
    "ClampBackward0": frozenset((_A.logical_and.default, _A.logical_or.default)),
    "TakeBackward0": frozenset((_A.put.default,)),
    "Atan2Backward0": frozenset((_A.masked_fill.Scalar,)),
    "BinaryCrossEntropyWithLogitsBackward0": _SUB_MUL,
}
"""Formulas, by autograd node, and the operators they apply in place on CUDA to a tensor they
made themselves:

- ``value_selecting_reduction_backward`` (``max``/``min`` along a dimension, ``topk``, ``sort``,
  ``kthvalue``, ``median``/``nanmedian`` along a dimension, ``mode``): ``grad_in.scatter_(dim,
  indices, grad)`` into ``zeros``, ``scatter`` for a subclass;
- ``trace_backward``: ``grad_input.index_fill_(0, indices, grad)``, ``index_fill`` for a subclass;
- ``clamp_backward`` and ``clamp_backward_min_max`` (``clamp`` with tensor bounds, both given):
  the two comparisons' masks joined with ``logical_and_`` (``logical_or_`` for ``max``'s
  gradient) into the first, ``logical_and``/``logical_or`` for a subclass;
- ``take_backward``: ``zeros_like(self).put_(indices, grad, true)``, ``put`` for a subclass;
- ``atan2_backward``: the reciprocal of ``self * self + other * other`` zeroed where both are
  zero with ``masked_fill_``, ``masked_fill`` for a subclass;
- ``binary_cross_entropy_with_logits_backward``: ``input.sigmoid().sub_(target)`` (with
  ``pos_weight``: ``t.add(1).sub_(target).mul_(input.sigmoid()).sub_(t)``), then ``mul_(grad)``
  and ``mul_(weight)``; ``sub`` and ``mul`` for a subclass.
"""


def in_place(func: Any, node: str) -> bool:
    """Whether backward node ``node`` applies ``func`` in place on CUDA to a tensor it made."""
    if func in ANY_NODE:
        return True
    found = BY_NODE.get(node)
    return found is not None and func in found


def dense(tensor: torch.Tensor) -> bool:
    """``is_non_overlapping_and_dense``: some order of the dimensions lays ``tensor`` out
    contiguously (dimensions of size 1 ignored), the layout ``can_accumulate_inplace`` and an
    in-place write ask for. A transposed gradient qualifies; a slice does not."""
    expected = 1
    for stride, size in sorted(
        (t, s) for s, t in zip(tensor.shape, tensor.stride(), strict=True) if s != 1
    ):
        if stride != expected:
            return False
        expected *= size
    return True


def linear(
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """``F.linear`` on a stand-in, by ``at::native::linear``'s branches: where it multiplies with
    ``matmul`` and then adds a bias, the bias goes into the product in place, as on CUDA; every
    other branch (``addmm`` for a 2-D input or a contiguous one, no bias) is torch's own."""
    if bias is None or not _matmul_then_bias(input, weight, bias):
        return F.linear(input, weight, bias)
    output = torch.matmul(input, weight.t())
    return output.add_(bias)


def _matmul_then_bias(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> bool:
    """Whether ``at::native::linear`` reaches its ``matmul`` and ``output.add_(*bias)``: no
    fused ``addmm`` (a 2-D input; a contiguous 3-D one, or any contiguous strided one with a
    1-D bias; a 3-D one with ``TORCH_LINEAR_FLATTEN_3D=1``), and no forward-mode gradient on the
    bias (then CUDA adds out of place too)."""
    dim = input.dim()
    if dim == 2:
        return False
    contiguous = input.is_contiguous()
    if contiguous and dim == 3:
        return False
    strided = input.layout == torch.strided and weight.layout == torch.strided
    if contiguous and strided and bias.dim() == 1:
        return False
    if dim == 3 and os.environ.get(_FLATTEN_3D) == "1":
        return False
    return not _has_tangent(bias)


def _has_tangent(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` carries a forward-mode gradient (``_fw_grad(0).defined()``)."""
    if forward_ad._current_level < 0:
        return False
    dual = forward_ad.unpack_dual(tensor)  # type: ignore[no-untyped-call, unused-ignore]  # untyped in torch
    return dual.tangent is not None
