"""``torch._grouped_mm`` (and ``torch.nn.functional.grouped_mm``) on the planned device: a
mixture of experts' per-expert products in one call.

CUDA's kernel (``_grouped_mm_cuda``, ``ATen/native/cuda/GroupedBlas.cpp``) takes float32,
float16 and bfloat16 operands: bfloat16 ones run CUTLASS's grouped GEMM, the others a loop of
``mm_out`` into slices of the output (``_grouped_mm_fallback``, ``GroupedMMUtils.h``). Torch's
``meta`` kernel takes bfloat16 only, so a float32 model's experts (Hugging Face's
``grouped_mm`` experts, which call it wherever the device has compute capability 8.0 or more)
would fail in a plan where a GPU runs them. Here the output is made as CUDA makes it
(``create_grouped_gemm_output_tensor``): in ``mat_a``'s dtype, its rows padded to 16 bytes for
TMA; bfloat16 operands keep torch's own ``meta`` kernel, which follows the same code.
"""

from __future__ import annotations

from typing import Any

import torch

OPERATOR = getattr(torch.ops.aten, "_grouped_mm", None)
"""``aten::_grouped_mm``, where the installed torch has it."""

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise RuntimeError(message)


def _strides_valid(mat: torch.Tensor) -> None:
    """``check_valid_strides_and_return_transposed``: row- or column-major in the last two
    dimensions, the leading stride a multiple of 16 bytes."""
    strides, sizes = mat.stride(), mat.shape
    alignment = 16 // mat.element_size()
    if strides[-2] == 1 and strides[-1] >= max(1, sizes[-2]):
        _check(strides[-1] % alignment == 0, "strides should be multiple of 16 bytes")
    elif strides[-1] == 1 and strides[-2] >= max(1, sizes[-1]):
        _check(strides[-2] % alignment == 0, "strides should be multiple of 16 bytes")
    else:
        _check(False, f"Invalid strides/sizes, got {strides} for strides and {sizes} for sizes")


def grouped_mm(
    mat_a: torch.Tensor,
    mat_b: torch.Tensor,
    offs: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> Any:
    """``_grouped_mm`` as CUDA's kernel checks and allocates it: the output only."""
    if mat_a.dtype == torch.bfloat16 and mat_b.dtype == torch.bfloat16:
        return OPERATOR.default(mat_a, mat_b, offs, bias, out_dtype)  # type: ignore[union-attr]
    for name, mat in (("mat_a", mat_a), ("mat_b", mat_b)):
        _check(
            mat.dtype in _DTYPES,
            f"Expected {name} to be Float32, BFloat16 or Float16 matrix, got {mat.dtype}",
        )
        _check(mat.dim() in (2, 3), f"{name} has to be 2 or 3d")
    a_2d, b_2d = mat_a.dim() == 2, mat_b.dim() == 2
    if not a_2d or not b_2d:
        _check(
            mat_a.shape[-1] == mat_b.shape[-2],
            "contraction dimension of mat_a and mat_b must match",
        )
    _strides_valid(mat_a)
    _strides_valid(mat_b)
    _check(
        (offs is not None) == (a_2d or b_2d),
        "Have to provide offsets if there is a 2d matrix, or no offset if both matrices are 3d",
    )
    if offs is not None:
        _check(offs.dim() == 1, "offs has to be 1D")
        _check(offs.dtype == torch.int32, "Offsets have to be int32")
    _check(bias is None, "Bias not supported yet")
    dtype = out_dtype if out_dtype is not None else mat_a.dtype
    _check(dtype == mat_a.dtype, "Grouped gemm output dtype must match `mat_a` dtype")
    _check(mat_a.dtype == mat_b.dtype, "expected mat1 and mat2 to have the same dtype")
    if a_2d and b_2d:
        size = [offs.shape[0], mat_a.shape[0], mat_b.shape[1]]  # type: ignore[union-attr]
    elif a_2d:
        _check(offs.shape[0] == mat_b.shape[0], "matrix batch sizes have to match")  # type: ignore[union-attr]
        size = [mat_a.shape[0], mat_b.shape[-1]]
    elif b_2d:
        _check(offs.shape[0] == mat_a.shape[0], "matrix batch sizes have to match")  # type: ignore[union-attr]
        size = [mat_a.shape[1], mat_b.shape[1]]
    else:
        _check(mat_a.shape[0] == mat_b.shape[0], "batched dimension has to match")
        size = [mat_a.shape[0], mat_a.shape[1], mat_b.shape[-1]]
    alignment = 16 // torch.empty((), dtype=dtype).element_size()
    padded = -(-size[-1] // alignment) * alignment
    stride = [padded, 1] if a_2d != b_2d else [size[1] * padded, padded, 1]
    return torch.empty_strided(size, stride, dtype=dtype, device=mat_a.device)
