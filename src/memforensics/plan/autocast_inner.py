"""Functions whose autocast casts CUDA makes inside them, in the operators they call.

PyTorch's CUDA op reference lists functions by the name a script calls, but autocast casts in
the dispatcher, for the ATen operators it registers a kernel for (``AT_FORALL_FP32`` in
``aten/src/ATen/autocast_mode.h``). A few listed functions reach no such kernel at their own
level: they are composites whose casts sit in the operators they call, each of which passes
through autocast on its own, so what is cast, and what autograd keeps, is theirs:

- ``F.cross_entropy`` is ``cross_entropy_loss``, a ``CompositeImplicitAutograd`` operator
  autocast has no CUDA kernel for (its CPU autocast has one). For class indices it calls
  ``at::log_softmax(self, class_dim, self.scalar_type())`` (``LossNLL.cpp``): a dtype given,
  which ``fp32_set_opt_dtype`` keeps, so the log-probabilities are the input's dtype; then
  ``nll_loss_nd``, whose ``nll_loss`` (``nll_loss2d``) is ``fp32``: a float32 copy of the
  log-probabilities, which ``nll_loss_forward``'s backward keeps beside them;
- ``F.normalize`` is Python: ``input.norm(p, dim, keepdim=True)`` (a ``linalg_vector_norm``,
  its dtype set to float32) and ``input / denom``, which promotes into a float32 result;
  the input itself is never copied;
- ``1 / x`` is ``Tensor.__rdiv__``, ``self.reciprocal() * other``: ``reciprocal`` casts;
- ``F.pairwise_distance`` (not in the reference) is ``at::norm(x1 - x2 + eps, p,
  innermost_dim, keepdim)`` (``Distance.cpp``): the difference in the inputs' dtype, then
  ``norm.ScalarOpt_dim``, which autocast appends float32 to (``fp32_append_dtype``).

The plan calls each as that composite, every inner function through ``call`` (the function
mode's own handling, which casts by autocast's lists), so the bytes are the GPU's.
``cross_entropy`` with class probabilities or label smoothing, whose composites call more
operators, casts its input to float32 whole, as the reference reads.

Two functions of ``torch.nn.functional`` are written in Python and call many listed functions:
``multi_head_attention_forward`` (``nn.MultiheadAttention``, the transformer layers: its
projections' ``linear``, ``bmm``/``baddbmm``, ``softmax``, ``scaled_dot_product_attention``)
and ``gumbel_softmax`` (``log``, ``softmax``). The plan runs torch's own code for them
(:data:`ENTERED`), :func:`unchecked`, with the function mode entered again, so that each
function they call passes through the mode and is cast as CUDA's autocast casts it.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

Call = Callable[..., Any]
"""``call(func, *args, **kwargs)``: ``func`` run as the plan runs a script's call of it."""


def cross_entropy(
    call: Call,
    whole: Call,
    input: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Any:
    """``F.cross_entropy`` as ``cross_entropy_loss`` runs under CUDA's autocast: for class
    indices, ``log_softmax`` in the input's dtype, then ``nll_loss``; else ``whole``, which
    casts every input to float32 and calls ``F.cross_entropy``."""
    arguments = (input, target, weight, size_average, ignore_index, reduce, reduction)
    if label_smoothing > 0.0 or input.shape == target.shape:
        return whole(F.cross_entropy, *arguments, label_smoothing)
    class_dim = 0 if input.dim() == 1 else 1
    log_probs = call(F.log_softmax, input, class_dim, dtype=input.dtype)
    return call(F.nll_loss, log_probs, *arguments[1:])


def normalize(
    call: Call,
    whole: Call,
    input: torch.Tensor,
    p: float = 2.0,
    dim: int = 1,
    eps: float = 1e-12,
    out: torch.Tensor | None = None,
) -> Any:
    """``F.normalize``'s body, its norm called as the plan calls a script's."""
    if out is None:
        denom = call(torch.Tensor.norm, input, p, dim, keepdim=True).clamp_min(eps)
        return input / denom.expand_as(input)
    denom = call(torch.Tensor.norm, input, p, dim, keepdim=True).clamp_min_(eps)
    return torch.div(input, denom.expand_as(input), out=out)


def reflected_division(call: Call, whole: Call, tensor: torch.Tensor, other: Any) -> Any:
    """``other / tensor`` (``Tensor.__rdiv__``): ``tensor.reciprocal() * other``."""
    return call(torch.Tensor.reciprocal, tensor) * other


def pairwise_distance(
    call: Call,
    whole: Call,
    x1: torch.Tensor,
    x2: torch.Tensor,
    p: float = 2.0,
    eps: float = 1e-6,
    keepdim: bool = False,
) -> Any:
    """``pairwise_distance``: the norm of ``x1 - x2 + eps`` over the innermost dimension."""
    innermost = max(x1.dim(), x2.dim()) - 1
    return call(torch.norm, x1 - x2 + eps, p, innermost, keepdim)


RESTATED: dict[str, Callable[..., Any]] = {
    "cross_entropy": cross_entropy,
    "normalize": normalize,
    "__rdiv__": reflected_division,
    "pairwise_distance": pairwise_distance,
}
"""The composites, by the name the function mode sees them called."""


ENTERED: dict[str, Callable[..., Any]] = {
    "multi_head_attention_forward": F.multi_head_attention_forward,
    "gumbel_softmax": F.gumbel_softmax,
}
"""torch's Python functions run under autocast as their own code, each function they call seen
by the function mode (:func:`unchecked`), by the name the mode sees them called."""

_CHECKS = ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic")


def _never(*args: Any) -> bool:
    return False


def unchecked(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, one of torch's Python functions, with its own opening check for a
    ``__torch_function__`` answering no: called with the function mode active, it runs its body
    instead of handing itself to the mode again, and the functions it calls still check (they
    read their module's own names). A new function over the same code, its module's names
    copied as they are now (a script's replacement of ``F.linear`` is kept); nothing shared
    changes, so other threads and nested calls see torch's function as it is."""
    names = dict(function.__globals__)
    names.update(dict.fromkeys(_CHECKS, _never))
    copy = types.FunctionType(
        function.__code__, names, function.__name__, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    return copy
