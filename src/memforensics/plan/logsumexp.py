"""``logsumexp`` on stand-ins, allocating what CUDA's composite allocates on the way.

torch's ``meta`` kernel for ``logsumexp`` makes the result only; on CUDA,
``logsumexp_out_impl`` (``aten/src/ATen/native/ReduceOps.cpp``) computes it from temporaries
that pass through the caching allocator. This module runs the same steps, in the same order,
through the storage mode, so each temporary takes and frees a block where CUDA's does and the
two reductions take their staging buffers by the mode's own rule:

- an integral input is first copied to the default floating dtype (``self.to(default_dtype)``
  in ``logsumexp_out``), freed after everything below;
- the maxima, ``amax(self, dims, keepdim=True)``;
- ``maxes.abs() == INFINITY``: the absolute maxima, then the mask, both freed (the mask first)
  once ``masked_fill_`` has zeroed the infinite maxima in place;
- ``(self - maxes).exp_()``: the shifted copy, the input's size, exponentiated in place;
- ``sum_out`` into the result (made empty, so sized here), after which the shifted copy is
  freed; ``log_()`` and ``add_()`` work in place;
- the maxima freed as the function returns.

An empty or complex input runs torch's own kernel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch


def forward(
    within: AbstractContextManager[Any],
    original: Any,
    self: torch.Tensor,
    dim: int | Sequence[int],
    keepdim: bool = False,
) -> torch.Tensor:
    """``logsumexp``: ``logsumexp_out_impl``'s allocations, made within ``within`` (the mode
    that gives them blocks); ``original`` (the operator) where CUDA takes another path."""
    if self.numel() == 0 or self.is_complex():
        result: torch.Tensor = original(self, dim, keepdim)
        return result
    dims = [dim] if isinstance(dim, int) else list(dim)
    with torch._C.DisableTorchFunction(), within:
        floating = self.is_floating_point()
        source = self if floating else self.to(torch.get_default_dtype())
        result = _impl(source, dims, keepdim)
        del source
    return result


def _impl(source: torch.Tensor, dims: list[int], keepdim: bool) -> torch.Tensor:
    """``logsumexp_out_impl`` on a non-empty floating input; its locals freed as it returns."""
    maxes = torch.amax(source, dims, True)
    squeezed = maxes if keepdim else maxes.squeeze(dims)
    magnitude = squeezed.abs()
    infinite = magnitude == math.inf
    squeezed.masked_fill_(infinite, 0)
    del infinite, magnitude  # a full expression's temporaries, the last made first freed
    shifted = (source - maxes).exp_()
    result = torch.sum(shifted, dims, keepdim)
    del shifted
    result.log_().add_(squeezed)
    return result
