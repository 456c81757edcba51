"""What CUDA's GroupNorm kernels allocate beside their outputs.

``native_group_norm`` and ``native_group_norm_backward`` make their outputs first
(``aten/src/ATen/native/group_norm.cpp``); their CUDA kernels
(``aten/src/ATen/native/cuda/group_norm_kernel.cu``) then take vectors of one value of the
accumulation type (float32 for float16, bfloat16 and float32 inputs, float64 for float64) per
sample and channel (N x C) or per sample and group (N x G), each freed before the operator returns:

- ``GroupNormKernelImplInternal`` (the forward), for a float16 or bfloat16 input, the mean and
  ``rstd`` in float32 (``mean_acc``, ``rstd_acc``, N x G each), which the outputs receive rounded;
  then, with a weight or a bias and more than one position per channel (``HxW > 1``), the fused
  scale and shift ``a`` and ``b`` (N x C each), freed ``b`` first as their block ends, the two
  float32 statistics last as it returns;
- ``GroupNormBackwardKernelImplInternal`` (the backward), the per-channel sums ``ds`` and
  ``db`` (N x C each), made before it tells one position per channel apart, so the 1-d path
  (``GroupNorm1dBackward``) takes them too without reading them; then, where the input's
  gradient is asked for, ``c2`` and ``c3`` (N x G each) and, with a weight and more than one
  position, ``c1``: ``at::empty({0})``, no block, until its ``TensorIterator`` sizes it to
  (N, G, C/G), N x C values. ``c3``, ``c2`` and ``c1`` are freed as that block ends, ``db`` and
  ``ds`` as the operator returns.

An empty batch (``N == 0``) takes none. The ``meta`` kernels make the outputs alone;
:func:`after` takes the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_A = torch.ops.aten
FORWARD = _A.native_group_norm.default
BACKWARD = _A.native_group_norm_backward.default
OPERATORS = frozenset((FORWARD, BACKWARD))
_HALVES = frozenset((torch.float16, torch.bfloat16))
"""The input dtypes whose statistics the forward keeps in float32 beside its outputs."""


def _accumulation_bytes(dtype: torch.dtype) -> int:
    """Bytes of one value of ``acc_type<T, true>``: float64 for a float64 input, else float32."""
    return 8 if dtype == torch.float64 else 4


def _sizes(args: tuple[Any, ...], first: int) -> tuple[int, int, int, int] | None:
    """``N``, ``C``, ``HxW`` and ``group`` from the arguments starting at ``first``."""
    found = args[first : first + 4]
    if len(found) < 4 or not all(isinstance(n, int) for n in found):
        return None
    n, c, positions, groups = found
    return n, c, positions, groups


def blocks(func: Any, args: tuple[Any, ...]) -> tuple[list[int], list[int]] | None:
    """The bytes ``func``'s kernel takes beside its outputs, as two lists in the order made:
    those held until it returns, then those of the inner block, freed first; None where it
    takes none or the arguments are not stand-ins."""
    source = args[0] if func is FORWARD else args[1] if len(args) > 1 else None
    found = _sizes(args, 3 if func is FORWARD else 5)
    if not (isinstance(source, torch.Tensor) and source.is_meta) or found is None:
        return None
    n, c, positions, groups = found
    if n == 0:
        return None
    value = _accumulation_bytes(source.dtype)
    per_channel, per_group = n * c * value, n * groups * value
    if func is FORWARD:
        weight, bias = (args[i] if len(args) > i else None for i in (1, 2))
        held = [per_group, per_group] if source.dtype in _HALVES else []
        affine = isinstance(weight, torch.Tensor) or isinstance(bias, torch.Tensor)
        inner = [per_channel, per_channel] if affine and positions != 1 else []
        return held, inner
    weight = args[4] if len(args) > 4 else None
    mask = args[9] if len(args) > 9 else None
    if not (isinstance(mask, (list, tuple)) and mask[0]):
        return [per_channel, per_channel], []
    c1 = [per_channel] if isinstance(weight, torch.Tensor) and positions != 1 else []
    return [per_channel, per_channel], [per_group, per_group, *c1]


def after(
    func: Any,
    args: tuple[Any, ...],
    malloc: Callable[[int], Any],
    free: Callable[[Any], None],
) -> None:
    """``func``'s kernel's vectors after its outputs (:func:`blocks`), the inner block's freed
    in the reverse of their making, then the rest."""
    found = blocks(func, args)
    if found is None:
        return
    held, inner = ([malloc(n) for n in sizes if n] for sizes in found)
    for block in reversed(inner):
        free(block)
    for block in reversed(held):
        free(block)
