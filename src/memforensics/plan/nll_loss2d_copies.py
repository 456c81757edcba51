"""The contiguous copies CUDA's ``nll_loss2d`` kernels make of their operands.

``nll_loss2d_forward_out_cuda_template`` and ``nll_loss2d_backward_out_cuda_template``
(``aten/src/ATen/native/cuda/LossNLL2d.cu``) make their outputs first (the forward resizes
``total_weight`` and then the loss to a number), then read operands that are not contiguous
through copies, each freed as the operator returns, in the reverse of their making:

- with a reduction (``mean``, ``sum``), the forward copies the input (``input.contiguous()``),
  the class weights and the target; the backward the target and the weights (its input is
  only measured);
- without one (``none``), each copies the class weights alone: the kernel reads the input and
  the target through strided accessors.

None for an empty target, where each returns first.

``nll_loss_nd`` hands a 4-d input to ``nll_loss2d`` as it is, so ``F.nll_loss`` of a permuted
or channels-last input takes an input-sized copy in a reduced forward (its backward stops
at ``grad_input must be contiguous``, on the CPU as on CUDA). ``cross_entropy`` gives it
``log_softmax``'s output, which is contiguous. The ``meta`` kernels make the outputs alone;
:func:`copied` sizes the copies.
"""

from __future__ import annotations

from typing import Any

import torch

from memforensics.plan import operands

FORWARD = torch.ops.aten.nll_loss2d_forward.default
BACKWARD = torch.ops.aten.nll_loss2d_backward.default
OPERATORS = frozenset((FORWARD, BACKWARD))
_NONE = 0
"""``at::Reduction::None``."""


def copied(func: Any, args: tuple[Any, ...]) -> list[int]:
    """The bytes of each copy ``func`` makes after its outputs, in the order made."""
    first = 0 if func is FORWARD else 1
    found = args[first : first + 4]
    if len(found) < 4:
        return []
    source, target, weight, reduction = found
    if not all(isinstance(t, torch.Tensor) and t.is_meta for t in (source, target)):
        return []
    if not target.numel():
        return []
    if reduction == _NONE:
        read = [weight]
    else:
        read = [source, weight, target] if func is FORWARD else [target, weight]
    return [
        operands.copy_bytes(t)
        for t in read
        if isinstance(t, torch.Tensor) and t.numel() and not t.is_contiguous()
    ]
