"""Dropout on stand-ins, through the kernel CUDA runs.

``at::dropout`` (``aten/src/ATen/native/Dropout.cpp``) calls ``native_dropout`` where
``is_fused_kernel_acceptable`` holds (a CUDA input, ``0 < p < 1``, some elements) and the module
is training. CUDA's ``dropout_cuda`` (``aten/src/ATen/native/cuda/Dropout.cu``) allocates a
``bool`` mask and the output, and keeps the mask for backward (one ``masked_scale``). On ``meta``
the CPU build takes ``_dropout_impl`` instead: a noise tensor of the input's own dtype, kept for
backward, four times CUDA's mask for float32 and twice for 16-bit inputs. In-place dropout
(``dropout_``), ``alpha_dropout`` and ``feature_dropout`` are the composite on CUDA too, and run
as they are.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # torch's own spelling

NAME = "dropout"
"""``torch.nn.functional.dropout`` and ``torch.dropout``, which share it."""


def dropout(
    input: torch.Tensor,
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
    *,
    train: bool | None = None,
) -> torch.Tensor:
    """``F.dropout(input, p, training, inplace)`` or ``torch.dropout(input, p, train)`` on a
    stand-in: CUDA's fused kernel where ``at::dropout`` would take it, else torch's own path."""
    training = training if train is None else train
    fused = training and not inplace and 0 < p < 1 and input.numel() > 0
    if not fused:
        return F.dropout(input, p, training, inplace)
    out: torch.Tensor = torch.ops.aten.native_dropout.default(input, p, True)[0]
    return out
