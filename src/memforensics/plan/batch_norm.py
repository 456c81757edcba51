"""Batch norm on a stand-in, in the memory layout of the backend CUDA picks.

``at::batch_norm`` calls ``_batch_norm_impl_index`` (``aten/src/ATen/native/Normalization.cpp``),
which asks ``_select_batch_norm_backend`` for cuDNN where the input is on CUDA and neither it nor
the weight is bfloat16 (a float16 input with a float32 weight), the weight and bias are given,
the running statistics are both given (or both absent in training), the input has three or more
dimensions and at most 880,801 samples in training (65,535 in eval), fewer than 2**31 - 1
elements, ``eps`` at least ``CUDNN_BN_MIN_EPSILON`` (0 in cuDNN 8 and 9) and cuDNN is enabled.
That branch first makes the input contiguous in its suggested memory format
(``input.contiguous(input.suggest_memory_format())``), and ``cudnn_batch_norm`` makes its output
in that format and keeps that copy for the backward. A batch norm over a transposed sequence
(``BatchNorm1d`` over ``x.transpose(1, 2)``, PatchTST's and many time-series models') so holds
a contiguous copy of its input beside the output, and the output transposed back is not
contiguous, so a ``Linear`` after it folds it with a copy too. On ``meta`` the backend is the
native one, whose kernel keeps the input's strides and makes no copy. The output's and the
training statistics' sizes are the native kernel's; cuDNN's reserve and workspace are its own
answer, not made (docs/plan.md, "What it does not model").
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F  # torch's own spelling
from torch._prims_common import suggest_memory_format

from memforensics.plan import traced

NAMES = frozenset({"batch_norm"})
"""``F.batch_norm`` and ``torch.batch_norm``, by the name a script calls."""

_TRAINING_SAMPLES = 880_801
_EVAL_SAMPLES = 65_535
_INT32_MAX = 2**31 - 1
_MIN_EPSILON = 0.0
"""``CUDNN_BN_MIN_EPSILON`` in cuDNN's headers (``cudnn_ops.h``)."""

_TORCH_ORDER = ("input", "weight", "bias", "running_mean", "running_var", "training",
                "momentum", "eps", "cudnn_enabled")  # fmt: skip
"""``torch.batch_norm``'s parameters, in order (``native_functions.yaml``)."""


def run(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``func`` (``F.batch_norm`` or ``torch.batch_norm``) on the input cuDNN's branch reads: a
    copy contiguous in its suggested format where CUDA picks cuDNN, else the input itself.
    Under ``torch.jit.trace`` the input is left as it is: the copy is made inside
    ``aten::batch_norm`` on a GPU, so the graph the tracer records holds no copy of its own."""
    if func is F.batch_norm:
        bound = inspect.signature(F.batch_norm).bind(*args, **kwargs)
    elif func is torch.batch_norm:
        bound = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in _TORCH_ORDER]
        ).bind(*args, **kwargs)
    else:
        return func(*args, **kwargs)
    bound.apply_defaults()
    given = bound.arguments
    if not traced.tracing() and cudnn_picked(given):
        layout = suggest_memory_format(given["input"])
        if not given["input"].is_contiguous(memory_format=layout):
            given["input"] = given["input"].contiguous(memory_format=layout)
    return func(*bound.args, **bound.kwargs)


def cudnn_picked(given: dict[str, Any]) -> bool:
    """``_select_batch_norm_backend``'s cuDNN test, for a stand-in input with CUDA's cuDNN."""
    input, weight, bias = given["input"], given["weight"], given["bias"]
    mean, var, training = given["running_mean"], given["running_var"], bool(given["training"])
    if not (isinstance(input, torch.Tensor) and input.is_meta and input.dim() >= 3):
        return False
    if weight is None or bias is None:
        return False
    if input.dtype is torch.bfloat16 or weight.dtype is torch.bfloat16:
        return False
    if input.dtype is torch.float16 and weight.dtype is not torch.float32:
        return False
    if (mean is None) != (var is None) or (mean is None and not training):
        return False
    samples = _TRAINING_SAMPLES if training else _EVAL_SAMPLES
    return (
        int(input.shape[0]) <= samples
        and int(input.numel()) < _INT32_MAX
        and float(given["eps"]) >= _MIN_EPSILON
        and bool(torch.backends.cudnn.enabled)
    )
