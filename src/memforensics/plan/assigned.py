"""A Python number assigned into a device tensor (``x[i] = 1.0``, ``x[mask] = 0``), which CUDA
keeps on the host.

``THPVariable_setitem`` (``torch/csrc/autograd/python_variable_indexing.cpp``) turns the number
into a tensor of the destination's dtype on the CPU when the destination is on CUDA
(``valueToTensor`` with ``kCPU``, ``scalar_tensor_static``): the slice is then filled from it
(``copy_to``'s ``fill_``) and a mask's ``index_put_`` becomes ``masked_fill_``, and nothing
passes through the caching allocator. A stand-in's destination is on ``meta``, where the
number would become a ``meta`` tensor, one 512-B block per assignment that the GPU never takes;
so the number is made a host tensor here, as CUDA makes it.
"""

from __future__ import annotations

from typing import Any

import torch

NAME = "__setitem__"
_NUMBERS = (bool, int, float, complex)
_CPU = torch.device("cpu")


def setitem(tensor: Any, index: Any, value: Any) -> None:
    """``tensor[index] = value`` with a number ``value`` made a host tensor of ``tensor``'s
    dtype first, as CUDA makes it."""
    if (
        isinstance(value, _NUMBERS)
        and isinstance(tensor, torch.Tensor)
        and tensor.is_meta
        and not tensor.is_quantized
    ):
        value = torch.scalar_tensor(value, dtype=tensor.dtype, device=_CPU)
    torch.Tensor.__setitem__(tensor, index, value)
