"""bitsandbytes' 4-bit product on stand-ins, allocating what its CUDA kernel allocates.

bitsandbytes (0.48 and later) computes a 4-bit layer's forward (QLoRA's ``Linear4bit``, through
``MatMul4Bit``) as one operator, ``bitsandbytes::gemm_4bit``. Its ``meta`` kernel makes the
output alone. Its CUDA kernel (``bitsandbytes/backends/cuda/ops.py``) first asks its own
heuristic whether the fused ``cgemm_4bit`` kernel is the faster one for the product's rows
``M``, columns ``N`` and depth ``K`` on this device (``_gemm_4bit_use_custom_fn``, by
capability and multiprocessor count; never past ``_gemm_4bit_custom_max_m`` rows, 1,536 on
CUDA, nor for a depth its block size does not divide). The fused kernel makes the output alone.
Otherwise it falls back to ``_dequant_linear_fallback``: a nested quantization's block
statistics dequantized to float32 (``empty_like(absmax_8bit)``) and their offset added (a
second float32 block of that length), the weight dequantized whole into a ``(N, K)`` tensor of
the input's dtype, then ``F.linear`` of the input and it (the output, with cuBLAS's workspace
and cuBLASLt's where a bias takes that path), each temporary freed as the kernel returns. A
training step's forward over a batch of tokens has thousands of rows, so every 4-bit layer
holds its dequantized weight while its product runs, on top of what is live.

The choice is bitsandbytes' own: the plan calls the installed library's heuristic with the
planned device's properties. Where that library has no such heuristic (a release without the
unified CUDA dispatch), the operator runs its ``meta`` kernel as before.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

NAME = "bitsandbytes::gemm_4bit"
"""The operator's qualified name: bitsandbytes registers it, the plan never imports it."""

_CUDA_KERNELS = "bitsandbytes.backends.cuda.ops"
"""The module that registers bitsandbytes' CUDA kernels, and holds the heuristic."""


def forward(
    within: Any,
    A: torch.Tensor,
    B: torch.Tensor,
    shapeB: Any,
    absmax: torch.Tensor,
    blocksize: int,
    quant_type: str,
    bias: torch.Tensor | None = None,
    absmax_8bit: torch.Tensor | None = None,
    absmax_code: torch.Tensor | None = None,
    absmax_offset: torch.Tensor | None = None,
) -> torch.Tensor:
    """``bitsandbytes::gemm_4bit`` as its CUDA kernel runs: the fused kernel's output alone
    (the operator's ``meta`` kernel), or the fallback's temporaries and product, each taking
    its block through ``within``, the mode that places them."""
    if _fused(A, shapeB, blocksize):
        out: torch.Tensor = torch.ops.bitsandbytes.gemm_4bit.default(
            A,
            B,
            shapeB,
            absmax,
            blocksize,
            quant_type,
            bias=bias,
            absmax_8bit=absmax_8bit,
            absmax_code=absmax_code,
            absmax_offset=absmax_offset,
        )
        return out
    with torch._C.DisableTorchFunction(), within:
        if absmax_8bit is not None and absmax_offset is not None:
            scales = torch.empty_like(absmax_8bit, dtype=torch.float32)
            absmax = scales + absmax_offset
        dequantized = torch.empty(tuple(shapeB), dtype=A.dtype, device=A.device)
        product: torch.Tensor = torch.nn.functional.linear(A, dequantized, bias)
        return product


def _fused(A: torch.Tensor, shapeB: Any, blocksize: int) -> bool:
    """Whether bitsandbytes' CUDA kernel runs its fused ``cgemm_4bit`` for this product
    (the dispatch of ``bitsandbytes::gemm_4bit`` on CUDA); True where the installed
    bitsandbytes has no heuristic to ask."""
    kernels = sys.modules.get(_CUDA_KERNELS)
    heuristic = getattr(kernels, "_gemm_4bit_use_custom_fn", None)
    most = getattr(kernels, "_gemm_4bit_custom_max_m", None)
    if heuristic is None or most is None:
        return True
    depth = int(A.shape[-1])
    rows = A.numel() // depth if depth else 0
    if rows > most or depth % blocksize:
        return False
    return bool(heuristic(torch.cuda.current_device(), A.dtype, rows, int(shapeB[0]), depth))
