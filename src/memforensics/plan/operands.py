"""Operands cuBLAS cannot read where they lie, which ATen copies before a product.

cuBLAS reads a matrix through one leading dimension: its rows or its columns must be
contiguous, the other stride at least their length. ``addmm_out_cuda_impl`` (``mm``, ``addmm``,
``_addmm_activation``, through ``cublasCommonArgs``) and ``baddbmm_out_cuda_impl`` (``bmm``,
``baddbmm``) copy any other operand into a contiguous temporary (``prepare_matrix_for_cublas``,
``prepare_batch_matrix_for_cublas``): an expanded one, as the gradient of a ``sum`` that reaches
a ``Linear`` (128 MiB for an 8192 x 4096 float32 output on an H200, twice in its backward), a
slice taken with a step. ``addmv`` copies a matrix of neither layout and a vector of stride 0.
Each copy is made after the product's output and freed, in the reverse order, when the product
returns; the first use of cuBLAS's workspace falls between.
"""

from __future__ import annotations

from typing import Any

import torch

from memforensics.plan.inplace import dense


def overloads(*names: str) -> frozenset[Any]:
    """Every overload of the aten operators ``names`` this torch has: in place, into ``out=``
    and with ``out_dtype``, each product runs the same CUDA implementation as its plain call."""
    return frozenset(
        getattr(packet, overload)
        for name in names
        if (packet := getattr(torch.ops.aten, name, None)) is not None
        for overload in packet.overloads()
    )


_PRODUCTS = overloads("mm", "addmm", "addmm_", "_addmm_activation")
_BATCHED = overloads("bmm", "baddbmm", "baddbmm_")
_VECTOR = overloads("addmv", "addmv_", "mv")
COPYING = _PRODUCTS | _BATCHED | _VECTOR
"""The products whose operands :func:`copied` sizes."""
_FIRST_MATRIX = dict.fromkeys(overloads("mm", "bmm", "mv"), 0)
"""Where the first matrix is among the arguments (the others take ``self`` first)."""


def _one_leading_dimension(matrix: torch.Tensor) -> bool:
    """Whether ``matrix``'s columns or rows are contiguous, the other stride at least their
    length: a layout BLAS reads through one leading dimension."""
    (rows, columns), (down, across) = matrix.shape, matrix.stride()
    return bool((down == 1 and across >= max(1, rows)) or (across == 1 and down >= max(1, columns)))


def _readable(matrix: torch.Tensor) -> bool:
    """Whether cuBLAS reads ``matrix`` as it lies (``prepare_matrix_for_cublas``)."""
    return dense(matrix) or _one_leading_dimension(matrix)


def _readable_batch(batch: torch.Tensor, transposed: bool, m: int, n: int) -> bool:
    """Whether cuBLAS reads ``batch`` as it lies (``prepare_batch_matrix_for_cublas``)."""
    fast, leading = (2, 1) if transposed else (1, 2)
    strides = batch.stride()
    if strides[fast] == 1 and strides[leading] >= max(1, m):
        return True
    if strides[leading] == 1 and strides[fast] >= max(1, n):
        return True
    return bool(batch.is_contiguous() and strides[1] != 0 and strides[2] != 0)


def copy_bytes(tensor: torch.Tensor) -> int:
    """What a contiguous copy of ``tensor`` takes."""
    return int(tensor.numel()) * int(tensor.element_size())


def copied(func: Any, args: tuple[Any, ...], out: Any) -> list[int]:
    """The bytes of each operand ``func`` copies before cuBLAS runs, in the order made."""
    if func not in COPYING or not isinstance(out, torch.Tensor):
        return []
    first = _FIRST_MATRIX.get(func, 1)
    operands = args[first : first + 2]
    if len(operands) < 2 or not all(isinstance(a, torch.Tensor) for a in operands):
        return []
    one, two = operands
    if func in _PRODUCTS and one.dim() == 2 and two.dim() == 2 and out.dim() == 2:
        order = (two, one) if out.is_contiguous() else (one, two)
        return [copy_bytes(matrix) for matrix in order if not _readable(matrix)]
    if func in _BATCHED and one.dim() == 3 and two.dim() == 3 and out.dim() == 3:
        return _batched(one, two, out)
    if func in _VECTOR and one.dim() == 2 and two.dim() == 1:
        made = [copy_bytes(two)] if two.stride(0) == 0 and not two.is_contiguous() else []
        kept = _one_leading_dimension(one) or one.is_contiguous()
        return made if kept else [*made, copy_bytes(one)]
    return []


def _batched(one: torch.Tensor, two: torch.Tensor, out: torch.Tensor) -> list[int]:
    """``baddbmm_out_cuda_impl``'s copies: the output's layout picks which operand is read
    first and the sizes each must span."""
    (_, rows, columns), (_, down, across) = out.shape, out.stride()
    if down == 1 and (columns == 1 or across >= max(1, rows)):
        transposed = False
    elif across == 1 and (rows == 1 or down >= max(1, columns)):
        transposed = True
    else:
        return []
    leading = 1 if transposed else 2
    m = out.shape[2 if transposed else 1]
    n = out.shape[leading]
    k = (two if transposed else one).shape[leading]
    first, second = (two, one) if transposed else (one, two)
    made = [] if _readable_batch(first, transposed, m, k) else [copy_bytes(first)]
    return made + ([] if _readable_batch(second, transposed, k, n) else [copy_bytes(second)])
