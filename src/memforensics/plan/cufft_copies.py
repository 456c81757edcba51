"""The copies and working buffers CUDA's cuFFT operators make beside their outputs.

``_fft_c2r_cufft``, ``_fft_r2c_cufft`` and ``_fft_c2c_cufft``
(``aten/src/ATen/native/cuda/SpectralOps.cpp``) make their output first, then:

- ``_fft_c2r`` (``irfft``, ``irfft2``, ``irfftn``, ``hfft``): a complex-to-real transform may
  overwrite its input, so it transforms a contiguous clone of the input. Off the optimised path
  (``use_optimized_cufft_path``: more than three dimensions, or dimensions that start with 0
  and 1) a ``_fft_c2c`` over all but the last dimension makes that input-sized buffer instead,
  with a second one while it runs where those are more than three;
- ``_fft_r2c`` (``rfft``, ``rfft2``, ``rfftn``, ``fft`` of a real tensor): an input whose
  first element is not aligned as a complex number (an odd storage offset into the caching
  allocator's 512-byte aligned block) is transformed from a contiguous copy; off the optimised
  path with more than one dimension, a second output-sized buffer takes the remaining
  complex-to-complex transforms;
- ``_fft_c2c`` over more than three dimensions, which cuFFT transforms three at a time: a second
  output-sized buffer.

Each is freed as the operator returns. The ``meta`` kernels (``torch/_meta_registrations.py``)
follow the same paths, but the tensors they make inside never reach the planned device;
:func:`copied` sizes them. cuFFT's own work area, sized by the plan cuFFT makes, and the clone
``_exec_fft`` makes where cuFFT cannot express the input's strides (``should_clone_input``) are
not taken.
"""

from __future__ import annotations

import math
from typing import Any

import torch

C2R = torch.ops.aten._fft_c2r.default
R2C = torch.ops.aten._fft_r2c.default
C2C = torch.ops.aten._fft_c2c.default
OPERATORS = frozenset((C2R, R2C, C2C))
CUFFT_MAX_NDIM = 3
"""``cufft_max_ndim``: the most dimensions one cuFFT plan transforms."""


def optimized_path(dim: list[int]) -> bool:
    """``use_optimized_cufft_path``: whether one cuFFT plan transforms every dimension."""
    return not (len(dim) > CUFFT_MAX_NDIM or (len(dim) >= 2 and dim[0] == 0 and dim[1] == 1))


def _bytes(shape: list[int] | torch.Size, dtype: torch.dtype) -> int:
    """Bytes of a dense tensor of ``shape`` and ``dtype``."""
    return math.prod(shape) * int(dtype.itemsize)


def _c2c_second(self: torch.Tensor, dim: list[int]) -> list[int]:
    """``_fft_c2c_cufft``'s second buffer, made where its dimensions are more than three."""
    return [_bytes(self.shape, self.dtype)] if len(dim) > CUFFT_MAX_NDIM else []


def copied(func: Any, args: tuple[Any, ...]) -> list[int]:
    """The bytes of each buffer ``func`` makes after its output, in the order made."""
    self = args[0] if args else None
    if not (isinstance(self, torch.Tensor) and self.is_meta and len(args) > 1):
        return []
    dim = [int(d) for d in args[1]]
    if not dim:
        return []
    if func is C2C:
        return _c2c_second(self, dim)
    if func is C2R:
        if optimized_path(dim) or len(dim) == 1:
            return [_bytes(self.shape, self.dtype)]
        return [_bytes(self.shape, self.dtype), *_c2c_second(self, dim[:-1])]
    if func is not R2C or self.dtype not in (torch.float16, torch.float32, torch.float64):
        return []
    made = []
    if self.storage_offset() % 2:
        made.append(_bytes(self.shape, self.dtype))
    if not optimized_path(dim) and len(dim) > 1:
        shape = list(self.shape)
        if args[3] if len(args) > 3 else True:
            last = dim[-1] % self.dim()
            shape[last] = shape[last] // 2 + 1
        made.append(_bytes(shape, self.dtype.to_complex()))
    return made
