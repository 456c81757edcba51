"""What CUDA's LayerNorm and RMSNorm kernels allocate beside their outputs.

``layer_norm_cuda``, ``_fused_rms_norm_cuda`` and their backwards
(``aten/src/ATen/native/cuda/layer_norm_kernel.cu``) read the input, the weight and the bias
through ``expect_contiguous()``: one that is not contiguous (a ConvNeXt block's LayerNorm over
``x.permute(0, 2, 3, 1)``) is copied before the outputs are made and freed as the operator
returns, in the forward and again in the backward, which reads the saved input. The backward
then runs its kernel on ``dY.contiguous()``, a copy of a gradient that is not contiguous (the
gradient of a ``sum``, expanded from one value) held while the kernel runs. Where there are
many rows and few columns (``LaunchGammaBetaBackwardCUDAKernel``: more than 64 Ki rows and
fewer than half the SMs' count of 32-column tiles) it sums the weight's and the bias's
gradients in two passes: a partial sum per group of 32 rows into ``dgamma_blocks`` and
``dbeta_blocks`` (RMSNorm: the weight's only), then ``dgamma = dgamma_blocks.sum(0)``, a new
tensor of the gradient's size, which replaces the first.

The ``meta`` kernels make the outputs alone; :func:`before` and :func:`after` give the rest.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from memforensics.plan import operands, reductions, scratch

_A = torch.ops.aten


class Operands(NamedTuple):
    """Where an operator's tensors are among its arguments (None: it takes no such tensor)."""

    input: int
    weight: int
    bias: int | None
    grad: int | None
    mask: int | None
    """The backward's ``grad_input_mask``: which gradients it makes."""


OPERATORS: dict[Any, Operands] = {
    _A.native_layer_norm.default: Operands(0, 2, 3, None, None),
    _A.native_layer_norm_backward.default: Operands(1, 5, 6, 0, 7),
    **(
        {
            _A._fused_rms_norm.default: Operands(0, 2, None, None, None),
            _A._fused_rms_norm_backward.default: Operands(1, 4, None, 0, 5),
        }
        if hasattr(_A, "_fused_rms_norm_backward")
        else {}
    ),
}
"""The four operators, their arguments as ``native_functions.yaml`` orders them."""
BACKWARDS = frozenset(func for func, where in OPERATORS.items() if where.grad is not None)

_TILE = 32
"""``block_dim_x``: the columns one block of the gamma/beta kernel sums (CUDA, not ROCm)."""
_MANY_ROWS = 64 * 1024
"""Rows above which the two-pass sum may run."""
_MAX_GRID = 64 * 1024 // 2
"""``max_grid_size``: the most blocks the first pass launches."""
_SUM = _A.sum.dim_IntList


def _tensor(args: tuple[Any, ...], position: int | None) -> torch.Tensor | None:
    found = args[position] if position is not None and position < len(args) else None
    return found if isinstance(found, torch.Tensor) and found.is_meta else None


def before(func: Any, args: tuple[Any, ...]) -> list[int]:
    """The bytes of the contiguous copies ``func`` makes before its outputs, in the order it
    makes them (input, weight, bias), each held until it returns: one for each operand that is
    not contiguous."""
    where = OPERATORS[func]
    copies = []
    for position in (where.input, where.weight, where.bias):
        tensor = _tensor(args, position)
        if tensor is not None and tensor.numel() and not tensor.is_contiguous():
            copies.append(operands.copy_bytes(tensor))
    return copies


def _rows_and_columns(func: Any, args: tuple[Any, ...]) -> tuple[int, int] | None:
    """``M`` and ``N`` of ``_check_layer_norm_inputs``: the rows normalised, and their length."""
    source = _tensor(args, OPERATORS[func].input)
    shape = args[OPERATORS[func].input + 1] if source is not None else None
    if source is None or not isinstance(shape, (list, tuple)):
        return None
    axis = source.dim() - len(shape)
    return math.prod(source.shape[:axis]), math.prod(source.shape[axis:])


def partial_rows(rows: int, columns: int, capability: tuple[int, int]) -> int:
    """The rows of ``dgamma_blocks`` (one per block of the first pass) where
    ``LaunchGammaBetaBackwardCUDAKernel`` sums in two passes on a device of ``capability``,
    else 0."""
    if not (rows > _MANY_ROWS and columns // _TILE < scratch.multiprocessors(capability) // 2):
        return 0
    across = -(-columns // _TILE)
    return min(_MAX_GRID // across, -(-rows // _TILE))


def after(
    func: Any,
    args: tuple[Any, ...],
    capability: tuple[int, int],
    malloc: Callable[[int], Any],
    free: Callable[[Any], None],
) -> None:
    """A backward's blocks after its outputs, each freed before it returns: the gradient's
    contiguous copy; then, where it sums in two passes, the partial sums, and for each
    gradient ``.sum(0)``'s result (with the reduction's own staging, if it splits) while the
    first is still held (the plan keeps the first as the output and frees a block of the same
    size for it)."""
    where = OPERATORS[func]
    grad = _tensor(args, where.grad)
    if grad is None or grad.numel() == 0:
        return
    held = [] if grad.is_contiguous() else [malloc(operands.copy_bytes(grad))]
    mask = args[where.mask] if where.mask is not None and where.mask < len(args) else None
    weight = _tensor(args, where.weight)
    found = _rows_and_columns(func, args)
    if found is not None and weight is not None and isinstance(mask, (list, tuple)):
        made = [bool(mask[1])] + ([bool(mask[2])] if where.bias is not None else [])
        _two_passes(weight, found, made, capability, malloc, free)
    for block in reversed(held):
        free(block)


def _two_passes(
    weight: torch.Tensor,
    found: tuple[int, int],
    made: list[bool],
    capability: tuple[int, int],
    malloc: Callable[[int], Any],
    free: Callable[[Any], None],
) -> None:
    """The two-pass sum of the weight's (and the bias's) gradients, where it runs."""
    rows, columns = found
    partial = partial_rows(rows, columns, capability)
    if not partial or not any(made):
        return
    blocks_shape = (partial, columns)
    size = partial * columns * weight.element_size()
    partials = [malloc(size) for wanted in made if wanted]
    blocks = torch.empty(blocks_shape, dtype=weight.dtype, device="meta")
    summed = torch.empty((columns,), dtype=weight.dtype, device="meta")
    for _ in partials:
        result = malloc(columns * weight.element_size())
        staged = reductions.staged(_SUM, (blocks, [0]), {}, summed, capability)
        if staged is not None:
            reductions.take(staged, malloc, free)
        free(result)  # the first gradient, which the result replaces
    for block in reversed(partials):
        free(block)
