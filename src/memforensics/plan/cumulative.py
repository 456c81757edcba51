"""The input copy CUDA's ``cumsum`` and ``cumprod`` make where their result has another dtype.

``impl_func_cum_ops`` (``aten/src/ATen/native/ReduceOps.cpp``) runs the kernel on
``self.to(result.scalar_type())``: a ``dtype`` other than the input's (a script's own
``x.cumsum(-1, dtype=torch.float32)``, or the float32 autocast sets for a float16 or bfloat16
input) converts the whole input into a temporary after the result is allocated, freed as the
operator returns. The ``meta`` kernel allocates the result only.
"""

from __future__ import annotations

from typing import Any

import torch

from memforensics.plan.operands import overloads

OPERATORS = overloads("cumsum", "cumprod")
"""The operators whose converted input :func:`copied` sizes."""


def copied(func: Any, args: tuple[Any, ...], out: Any) -> list[int]:
    """The bytes of the converted input ``func`` makes after its result, if any: none for a
    zero-dimensional or empty input (``fill_`` and ``zero_``) or one already of the result's
    dtype."""
    if func not in OPERATORS or not args or not isinstance(out, torch.Tensor):
        return []
    source = args[0]
    if not isinstance(source, torch.Tensor) or source.dtype == out.dtype:
        return []
    if source.dim() == 0 or source.numel() == 0:
        return []
    return [int(source.numel()) * out.element_size()]
