"""``softmax`` and ``log_softmax`` of a float16 stand-in into float32, as CUDA runs them.

``softmax(input, dim, dtype)`` (``aten/src/ATen/native/SoftMax.cpp``) calls
``at::_softmax(input, dim, /*half_to_float=*/true)`` where the input is a CUDA float16 tensor
and the dtype float32: the kernel reads the float16 input into its float32 result, with no
copy. Any other input is converted first (``input_.toType(dtype)``), a bfloat16 one included,
and that is what the composite does on ``meta``, where ``is_cuda()`` is false; so a float16
stand-in's softmax into float32 runs ``_softmax`` here, through autograd, whose formula gives
the float16 gradient the GPU's does (``_softmax_backward_data(grad, result, dim,
self.scalar_type())``). ``log_softmax`` is the same with ``_log_softmax``. The float32 is the
script's own (``F.softmax(scores, dim=-1, dtype=torch.float32)``, Hugging Face's eager
attention) or autocast's (``fp32_set_opt_dtype``, :mod:`~memforensics.plan.choices`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_KERNELS = {
    "softmax": torch.ops.aten._softmax,
    "log_softmax": torch.ops.aten._log_softmax,
    "special_softmax": torch.ops.aten._softmax,
    "special_log_softmax": torch.ops.aten._log_softmax,
}

NAMES = frozenset(_KERNELS)
"""The functions, by the name a script calls, whose float16 input this module reads:
``torch.special.softmax`` and ``torch.special.log_softmax`` are ``at::softmax`` and
``at::log_softmax`` with their dtype (``SoftMax.cpp``)."""


def run(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``func`` (``F.softmax``, ``torch.softmax``, ``Tensor.softmax``, ``torch.special.softmax``
    or their ``log_softmax``) as CUDA runs it: ``half_to_float`` where its input is a dense float16
    stand-in, its dim given and its dtype float32; else ``func`` itself."""
    source = args[0] if args else kwargs.get("input")
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    dtype = kwargs.get("dtype")
    if dtype is None:
        dtype = next((a for a in args[2:] if isinstance(a, torch.dtype)), None)
    if (
        dtype is torch.float32
        and isinstance(dim, int)
        and isinstance(source, torch.Tensor)
        and source.is_meta
        and source.dtype is torch.float16
        and source.layout is torch.strided
    ):
        return _KERNELS[func.__name__](source, dim, True)
    return func(*args, **kwargs)
