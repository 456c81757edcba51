"""``repeat_interleave`` with its repeats held on the device, as CUDA's kernel runs it.

``torch.repeat_interleave(x, repeats, dim)`` with a tensor of repeats is a composite: it
expands zero-dimensional or one-element repeats along ``dim``, then ``index_select``s ``x`` at
the indices ``aten::repeat_interleave.Tensor`` makes of the repeats. That operator's length is
the repeats' sum, a value, so its ``meta`` kernel refuses to run without ``output_size``.
``repeat_interleave_common`` (``aten/src/ATen/native/Repeat.h``, which the CUDA kernel
``repeat_interleave_cuda`` instantiates) allocates, in order: the repeats made contiguous (a copy
only of expanded or strided ones), their ``cumsum`` (int64), then, where no ``output_size`` is
given, reads the cumsum's last element as the total and checks ``(repeats >= 0).all()`` (a
bool per repeat and the reduction's result, both read on the host and freed), and last the
indices, ``total`` elements of the repeats' dtype. The cumsum and the contiguous copy are
freed as it returns. An empty repeats tensor gives an empty one like it.

The total is read as any value is (:mod:`~memforensics.plan.known`): the sum of repeats the
script made from its own values (a list copied to the device, an ``arange``) is known, so the
indices and what ``index_select`` makes of them are the GPU's size; the sum of unknown repeats
is made up.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import torch

OPERATOR = torch.ops.aten.repeat_interleave.Tensor
"""The operator :func:`indices` answers."""


def indices(
    within: AbstractContextManager[Any], repeats: torch.Tensor, *, output_size: int | None = None
) -> torch.Tensor:
    """``repeat_interleave.Tensor``: the indices ``repeat_interleave_common`` makes, with its
    temporaries, each allocated within ``within`` (the mode that gives them blocks)."""
    with torch._C.DisableTorchFunction(), within:
        if repeats.size(0) == 0:
            return torch.empty_like(repeats, memory_format=torch.contiguous_format)
        contiguous = repeats.contiguous()
        cumsum = repeats.cumsum(0)
        if output_size is None:
            total = int(cumsum[-1].item())
            nonnegative = repeats >= 0
            checked = nonnegative.all()
            checked.item()
            del checked, nonnegative
        else:
            total = output_size
        result = repeats.new_empty((total,))
        del cumsum, contiguous
    return result
