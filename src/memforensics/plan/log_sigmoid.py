"""``F.logsigmoid`` on stand-ins, as CUDA's kernel makes its outputs.

``log_sigmoid_forward`` returns the result and a ``buffer`` that only the CPU kernel fills (with
``exp(-|x|)``, the input's size) and the backward reads. ``log_sigmoid_forward_cuda``
(``aten/src/ATen/native/cuda/Activation.cu``) makes the result like the input and the buffer
empty (``at::empty({0})``), and its backward ignores it; the ``meta`` kernel makes the CPU's
buffer. Autograd keeps that buffer to the backward, so on ``meta`` every ``logsigmoid`` (a DPO
loss's, ``multilabel_soft_margin_loss``'s) would hold one more input-sized block than the GPU
holds.
"""

from __future__ import annotations

import torch

OPERATOR = torch.ops.aten.log_sigmoid_forward.default


def forward(input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``log_sigmoid_forward_cuda``'s outputs: the result like ``input``, the buffer empty."""
    return torch.empty_like(input), input.new_empty((0,))
