"""``masked_fill`` on stand-ins with a value held by a zero-dimensional host tensor.

CUDA's ``masked_fill__cuda`` (``aten/src/ATen/native/cuda/Indexing.cu``) takes a value tensor
on the host as well as on the device: it checks that the value has no dimension and fills with
``value.item()``, so ``out.masked_fill(mask, torch.tensor(float("nan")))`` on a GPU tensor
runs (pytorch-forecasting's ``predict`` masks its predictions so). The ``meta`` kernel
(``torch._refs.masked_fill``) allows a host value only beside a device it names (``cuda``, not
``meta``) and refuses the call. The fill is run as the number's overload, which makes the same
output (``masked_fill``) or writes the same tensor (``masked_fill_``).
"""

from __future__ import annotations

from typing import Any

import torch

BY_NUMBER = {
    torch.ops.aten.masked_fill.Tensor: torch.ops.aten.masked_fill.Scalar,
    torch.ops.aten.masked_fill_.Tensor: torch.ops.aten.masked_fill_.Scalar,
}
"""Each fill by a value tensor, and the overload that fills by a number."""


def fill(operator: Any, tensor: torch.Tensor, mask: torch.Tensor, value: torch.Tensor) -> Any:
    """``operator`` (a key of :data:`BY_NUMBER`) with a zero-dimensional host ``value`` run by
    its number, as CUDA runs it; ``NotImplemented`` for any other value, which the ``meta``
    kernel takes (a value on the device) or refuses as CUDA does (one with dimensions)."""
    if value.device.type != "cpu" or value.dim() != 0:
        return NotImplemented
    return BY_NUMBER[operator](tensor, mask, value.item())
