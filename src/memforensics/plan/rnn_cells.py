"""``nn.LSTMCell`` and ``nn.GRUCell`` on stand-ins, through the fused kernels CUDA runs.

``at::lstm_cell`` and ``at::gru_cell`` (``aten/src/ATen/native/RNN.cpp``) run the cell's
``LSTMCell``/``GRUCell`` with ``CellParams``, which branch on ``input.is_cuda()``. On CUDA
they make the gates with two products and no bias (``matmul_ih``, ``matmul_hh``:
``at::matmul(input, w_ih.t())``), then one fused kernel (``aten/src/ATen/native/cuda/RNN.cu``)
adds the biases and applies the gates: ``_thnn_fused_lstm_cell`` makes a workspace of the
gates' size, then ``hy`` and ``cy``; ``_thnn_fused_gru_cell`` a workspace of five hidden-sized
rows per batch row (``GRU_WORKSPACE_MULTIPLIER``), then ``hy``. Autograd keeps the workspace
for the fused backward. Stand-ins are ``meta`` to the composite, which takes the other branch:
``linear`` with the biases, ``chunk``, and a temporary per gate's sigmoid or tanh.

``_thnn_fused_lstm_cell`` and its backward have ``meta`` kernels; the GRU's two operators
have a CUDA kernel only, and are answered here with what ``_thnn_fused_gru_cell_cuda`` and
``_thnn_fused_gru_cell_backward_cuda`` allocate (:func:`gru_forward`, :func:`gru_backward`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import torch

LSTM_NAME = "lstm_cell"
GRU_NAME = "gru_cell"
"""``torch.lstm_cell`` and ``torch.gru_cell`` (``_VF``'s, which the modules call)."""

GRU_WORKSPACE_MULTIPLIER = 5
"""Hidden-sized rows per batch row of the GRU's workspace (``RNN.cu``)."""

GRU_FORWARD = torch.ops.aten._thnn_fused_gru_cell.default
GRU_BACKWARD = torch.ops.aten._thnn_fused_gru_cell_backward.default


def _gates(
    input: torch.Tensor, hidden: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``CellParams``' ``matmul_ih(input)`` and ``matmul_hh(hidden)``, in that order."""
    return torch.matmul(input, w_ih.t()), torch.matmul(hidden, w_hh.t())


def lstm_cell(
    input: torch.Tensor,
    hx: tuple[torch.Tensor, torch.Tensor] | list[torch.Tensor],
    w_ih: torch.Tensor,
    w_hh: torch.Tensor,
    b_ih: torch.Tensor | None = None,
    b_hh: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``at::lstm_cell`` on CUDA: the gates' products, then ``_thnn_fused_lstm_cell``, whose
    workspace is dropped on return (or kept by autograd)."""
    hidden, cell = hx
    igates, hgates = _gates(input, hidden, w_ih, w_hh)
    hy, cy, _ = torch.ops.aten._thnn_fused_lstm_cell.default(igates, hgates, cell, b_ih, b_hh)
    return hy, cy


def gru_cell(
    input: torch.Tensor,
    hx: torch.Tensor,
    w_ih: torch.Tensor,
    w_hh: torch.Tensor,
    b_ih: torch.Tensor | None = None,
    b_hh: torch.Tensor | None = None,
) -> torch.Tensor:
    """``at::gru_cell`` on CUDA: the gates' products, then ``_thnn_fused_gru_cell``."""
    igates, hgates = _gates(input, hx, w_ih, w_hh)
    hy: torch.Tensor = GRU_FORWARD(igates, hgates, hx, b_ih, b_hh)[0]
    return hy


def gru_forward(
    within: AbstractContextManager[Any],
    input_gates: torch.Tensor,
    hidden_gates: torch.Tensor,
    hx: torch.Tensor,
    input_bias: torch.Tensor | None = None,
    hidden_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``_thnn_fused_gru_cell_cuda``'s outputs, made in its order: the workspace
    (``hx.size(0)`` by five ``hx.size(1)``, ``hx``'s dtype), then ``hy`` like ``hx``,
    contiguous; returned as ``(hy, workspace)``. Made within ``within`` (the mode that gives
    them blocks)."""
    if input_gates.dim() != 2 or hx.dim() != 2 or input_gates.shape != hidden_gates.shape:
        raise RuntimeError("_thnn_fused_gru_cell: expected 2-d gates of one size and a 2-d hx")
    if input_gates.size(1) != 3 * hx.size(1) or input_gates.size(0) != hx.size(0):
        raise RuntimeError("_thnn_fused_gru_cell: the gates are not three of hx's width")
    with torch._C.DisableTorchFunction(), within:
        workspace = hx.new_empty((hx.size(0), hx.size(1) * GRU_WORKSPACE_MULTIPLIER))
        hy = torch.empty_like(hx, memory_format=torch.contiguous_format)
    return hy, workspace


def gru_backward(
    within: AbstractContextManager[Any],
    grad_hy: torch.Tensor,
    workspace: torch.Tensor,
    has_bias: bool,
) -> tuple[torch.Tensor | None, ...]:
    """``_thnn_fused_gru_cell_backward_cuda``'s outputs, made in its order: the input gates'
    and hidden gates' gradients (batch by three hidden widths, the workspace's dtype), ``hx``'s
    like ``grad_hy``, then with a bias each gates' gradient summed over the batch (reductions
    as CUDA runs them). Made within ``within``."""
    hidden_size = workspace.size(1) // GRU_WORKSPACE_MULTIPLIER
    rows = workspace.size(0)
    with torch._C.DisableTorchFunction(), within:
        grad_input_gates = workspace.new_empty((rows, hidden_size * 3))
        grad_hidden_gates = workspace.new_empty((rows, hidden_size * 3))
        grad_hx = torch.empty_like(grad_hy, memory_format=torch.contiguous_format)
        if not has_bias:
            return grad_input_gates, grad_hidden_gates, grad_hx, None, None
        return (
            grad_input_gates,
            grad_hidden_gates,
            grad_hx,
            grad_input_gates.sum(0),
            grad_hidden_gates.sum(0),
        )
