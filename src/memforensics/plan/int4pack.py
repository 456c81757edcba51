"""``torch._weight_int4pack_mm`` on the planned device: a product with int4 weights packed in
tiles for CUDA's kernel (torchao's ``Int4WeightOnlyConfig(int4_packing_format=
"tile_packed_to_4d")``, gpt-fast's int4 inference).

Torch's ``meta`` kernel for it asks the weight for ``fake_device``, which only a fake tensor
has, to choose between XPU's two-dimensional layout and CUDA's four-dimensional one, so on a
stand-in it raised ``AttributeError`` where a GPU runs the product. CUDA's kernel
(``_weight_int4pack_mm_cuda``, ``ATen/native/cuda/int4mm.cu``) checks its operands and
allocates its ``(m, n)`` output only, ``n`` being eight columns per row of tiles: so does
this answer.
"""

from __future__ import annotations

from typing import Any

import torch

OPERATOR = getattr(torch.ops.aten, "_weight_int4pack_mm", None)
"""``aten::_weight_int4pack_mm``, where the installed torch has it."""


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise RuntimeError(message)


def weight_int4pack_mm(
    x: torch.Tensor, w: torch.Tensor, q_group_size: int, q_scale_and_zeros: torch.Tensor
) -> Any:
    """``_weight_int4pack_mm`` as CUDA's kernel checks and allocates it: ``x`` two-dimensional
    in a floating dtype, ``w`` the four-dimensional int32 tiles ``_convert_weight_to_int4pack``
    makes, the output ``(x.size(0), 8 * w.size(0))`` in ``x``'s dtype."""
    _check(x.dim() == 2, "x must be a 2D tensor")
    _check(w.dim() == 4, "w must be a 4D tensor")
    _check(
        x.dtype in (torch.float32, torch.float16, torch.bfloat16),
        f"expected x to be f32/f16/bf16, got {x.dtype}",
    )
    _check(w.dtype is torch.int32, f"expected w to be int32, got {w.dtype}")
    return x.new_empty(x.size(0), w.size(0) * 8, dtype=x.dtype)
