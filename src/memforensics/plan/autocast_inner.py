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
  ``norm.ScalarOpt_dim``, which autocast redispatches with float32 appended
  (``fp32_append_dtype``), so autograd records that overload's backward;
- ``_weight_norm`` off its fused path is ``v * (g / norm_except_dim(v, 2, dim))``
  (``WeightNorm.cpp``), whose ``norm.Scalar`` or ``norm.ScalarOpt_dim`` is redispatched so
  too: the quotient and the weight promote to float32;
- a convolution whose ``padding`` is a string (``conv2d.padding``, no autocast kernel) is
  ``_convolution_mode``: ``"same"`` pads the input in its own dtype where the two sides
  differ, and ``convolution``, which autocast casts for, copies the padded input.

``cross_entropy`` with class probabilities or label smoothing calls more operators
(``cross_entropy_loss_prob_target``, ``cross_entropy_loss_label_smoothing``): the same
``log_softmax``, then products with the target and class weight in their dtypes, sums that
autocast sets to float32 (``fp32_set_opt_dtype``), and for smoothing ``nll_loss_nd`` too.
``nll_loss_nd`` makes a 3-d (or 5-d and up) input contiguous, in its own dtype, before
``nll_loss2d`` casts it.

The plan calls each as that composite, every inner function through ``call`` (the function
mode's own handling, which casts by autocast's lists, or, in a compiled graph, the graph's
casts), so the bytes are the GPU's.

Other functions of ``torch.nn.functional`` are written in Python and call listed functions
that the function mode would not see, since it sees the outer function whole:
``multi_head_attention_forward`` (``nn.MultiheadAttention``, the transformer layers: its
projections' ``linear``, ``bmm``/``baddbmm``, ``softmax``, ``scaled_dot_product_attention``),
``gumbel_softmax`` (``log``, ``softmax``), the regression losses ``mse_loss``, ``l1_loss``,
``smooth_l1_loss`` and ``huber_loss`` (``broadcast_tensors`` first, so the kernel, and its
cast, sees the target expanded to the input's shape: a float32 copy of the expanded view, of
the input's size), ``nll_loss`` (``nll_loss_nd``), ``gaussian_nll_loss`` (``log``, ``**``),
``multilabel_soft_margin_loss`` and ``triplet_margin_with_distance_loss`` (``sum``),
``local_response_norm`` and the ``lp_pool`` functions (``pow``), and the deprecated
``upsample`` functions (``interpolate``), and ``linear_cross_entropy`` (torch 2.13:
``linear``, then ``cross_entropy``, or its chunked custom operators). The plan runs torch's
own code for them (:data:`ENTERED`), :func:`unchecked`, with the function mode entered
again, so that each function they call passes through the mode and is cast as CUDA's
autocast casts it. The losses whose Python body calls their ATen operator with the
arguments as given (``poisson_nll_loss``, ``cosine_embedding_loss``,
``triplet_margin_loss``, ``multi_margin_loss``, ``kl_div``, ...) are cast at the function,
as their kernel casts.
"""

from __future__ import annotations

import functools
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn import _reduction

from memforensics.plan import choices

Call = Callable[..., Any]
"""``call(func, *args, **kwargs)``: ``func`` run as the plan runs a script's call of it."""

NONE, MEAN = _reduction.get_enum("none"), _reduction.get_enum("mean")
"""ATen's ``Reduction`` values of the losses' ``reduction`` argument."""

_NLL_LOSS = torch._C._nn.nll_loss  # type: ignore[attr-defined, unused-ignore]  # not in torch's stubs
_NLL_LOSS_2D = torch._C._nn.nll_loss2d  # type: ignore[attr-defined, unused-ignore]  # not in the stubs


def cross_entropy(
    call: Call,
    input: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Any:
    """``F.cross_entropy``: its reduction read as its Python body reads it, then
    :func:`cross_entropy_loss`."""
    if size_average is not None or reduce is not None:
        reduction = _reduction.legacy_get_string(size_average, reduce)
    enum = _reduction.get_enum(reduction)
    return cross_entropy_loss(call, input, target, weight, enum, ignore_index, label_smoothing)


def cross_entropy_loss(
    call: Call,
    input: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    reduction: int = MEAN,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
) -> Any:
    """``cross_entropy_loss`` (``LossNLL.cpp``): class probabilities where the target has the
    input's shape, else label smoothing where asked, else ``nll_loss_nd`` of the
    log-probabilities; each begins with ``log_softmax`` in the input's dtype."""
    class_dim = 0 if input.dim() == 1 else 1
    log_probs = call(F.log_softmax, input, class_dim, dtype=input.dtype)
    if input.shape == target.shape:
        return _probabilities(call, log_probs, target, weight, reduction, label_smoothing)
    loss = call(torch._C._nn.nll_loss_nd, log_probs, target, weight, reduction, ignore_index)
    if label_smoothing <= 0.0:
        return loss
    smooth = _smoothing(call, log_probs, target, weight, reduction, ignore_index)
    return (1 - label_smoothing) * loss + smooth * (label_smoothing / input.size(class_dim))


def _probabilities(
    call: Call,
    log_probs: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None,
    reduction: int,
    label_smoothing: float,
) -> Any:
    """``cross_entropy_loss_prob_target``: the target smoothed, the product with the
    log-probabilities (and the weight, viewed along the class dimension), summed."""
    class_dim = 0 if log_probs.dim() == 1 else 1
    classes = log_probs.size(class_dim)
    if label_smoothing > 0.0:
        target = target * (1 - label_smoothing) + label_smoothing / classes
    product = log_probs * target
    if weight is not None:
        product = product * (weight.view(_along(log_probs, 1, weight)) if class_dim else weight)
    if reduction == NONE:
        return -call(torch.Tensor.sum, product, class_dim)
    total = -call(torch.Tensor.sum, product)
    return total / (log_probs.numel() / classes) if reduction == MEAN else total


def _smoothing(
    call: Call,
    log_probs: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None,
    reduction: int,
    ignore_index: int,
) -> Any:
    """``cross_entropy_loss_label_smoothing``'s uniform term: the (weighted) log-probabilities
    summed over the classes, ignored targets' zeroed, then reduced as the loss is."""
    class_dim = 0 if log_probs.dim() == 1 else 1
    if weight is not None:
        weighted = log_probs * weight.view(_along(log_probs, class_dim, weight))
        smooth = -call(torch.Tensor.sum, weighted, class_dim)
    else:
        smooth = -call(torch.Tensor.sum, log_probs, class_dim)
    ignored = target == ignore_index
    smooth.masked_fill_(ignored, 0.0)
    if reduction == NONE:
        return smooth
    total = call(torch.Tensor.sum, smooth)
    if reduction != MEAN:
        return total
    if weight is None:
        return total / (~ignored).sum()
    if _subclass_like(weight):
        kept = weight.gather(0, target.masked_fill(ignored, 0).flatten())
        return total / kept.masked_fill_(ignored.flatten(), 0).sum()
    return total / weight.gather(0, target.masked_select(~ignored).flatten()).sum()


def _along(tensor: torch.Tensor, dim: int, weight: torch.Tensor) -> list[int]:
    """The shape a class weight is viewed in to broadcast along ``tensor``'s ``dim``."""
    shape = [1] * tensor.dim()
    shape[dim] = weight.size(0)
    return shape


def _subclass_like(tensor: torch.Tensor) -> bool:
    """``isTensorSubclassLike``: a tensor subclass (a traced graph's), not a plain tensor."""
    return type(tensor) not in (torch.Tensor, torch.nn.Parameter)


def nll_loss_nd(
    call: Call,
    input: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    reduction: int = MEAN,
    ignore_index: int = -100,
) -> Any:
    """``nll_loss_nd`` (``LossNLL.cpp``): ``nll_loss`` of a 1-d or 2-d input, ``nll_loss2d``
    of a 4-d one, else ``nll_loss2d`` of the input and target made contiguous (in their own
    dtype, before autocast's cast) and viewed as 4-d and 3-d."""
    if input.dim() in (1, 2):
        return call(_NLL_LOSS, input, target, weight, reduction, ignore_index)
    if input.dim() == 4:
        return call(_NLL_LOSS_2D, input, target, weight, reduction, ignore_index)
    batch, classes = input.size(0), input.size(1)
    flat, flat_target = input.contiguous(), target.contiguous()
    empty = flat.numel() == 0  # an empty batch: 0 x 0 positions
    flat = flat.view(batch, classes, 0, 0) if empty else flat.view(batch, classes, 1, -1)
    empty = flat_target.numel() == 0
    flat_target = flat_target.view(batch, 0, 0) if empty else flat_target.view(batch, 1, -1)
    loss = call(_NLL_LOSS_2D, flat, flat_target, weight, reduction, ignore_index)
    if reduction != NONE:
        return loss
    return loss.view(batch, *input.shape[2:])


def normalize(
    call: Call,
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


def reflected_division(call: Call, tensor: torch.Tensor, other: Any) -> Any:
    """``other / tensor`` (``Tensor.__rdiv__``): ``tensor.reciprocal() * other``."""
    return call(torch.Tensor.reciprocal, tensor) * other


def pairwise_distance(
    call: Call,
    x1: torch.Tensor,
    x2: torch.Tensor,
    p: float = 2.0,
    eps: float = 1e-6,
    keepdim: bool = False,
) -> Any:
    """``pairwise_distance``: the norm of ``x1 - x2 + eps`` over the innermost dimension."""
    innermost = max(x1.dim(), x2.dim()) - 1
    return _appended_norm(call, x1 - x2 + eps, p, [innermost], keepdim)


_CONVOLUTION = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
"""``conv1d``'s, ``conv2d``'s and ``conv3d``'s arguments, in their order."""


def convolution_mode(
    spatial: int,
    call: Call,
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: Any = 1,
    padding: str = "valid",
    dilation: Any = 1,
    groups: int = 1,
) -> Any:
    """A convolution over ``spatial`` dimensions whose ``padding`` is ``"same"`` or
    ``"valid"`` (``conv2d_padding_symint``, ``_convolution_mode`` and ``convolution_same`` in
    ``Convolution.cpp``): an unbatched input viewed with a batch of one; for ``"same"`` each
    dimension's padding, ``dilation * (kernel - 1)`` at stride 1, split with the odd one after
    (``_pooling_same_mode_padding_lr``), and where a dimension's two sides differ the input
    padded after by the difference (``constant_pad_nd``, a copy in the input's own dtype),
    leaving the symmetric part to ``convolution``. ``convolution`` is the first operator
    autocast casts for (``conv2d.padding`` has no autocast kernel), so its cast is a copy of
    the padded input."""
    batched = input.dim() == spatial + 2
    if not batched:
        input = input.unsqueeze(0)
    dilations = _per_dimension(dilation, spatial)
    left = [0] * spatial
    if padding == "same":
        total = [d * (k - 1) for d, k in zip(dilations, weight.shape[2:], strict=True)]
        left = [t // 2 for t in total]
        after = [t - 2 * half for t, half in zip(total, left, strict=True)]
        if any(after):
            _warn_padded_copy()
            pad = [side for extra in reversed(after) for side in (0, extra)]
            input = call(torch.constant_pad_nd, input, pad, 0)
    strides = _per_dimension(stride, spatial)
    out = call(
        torch.convolution, input, weight, bias, strides, left, dilations, False, [0] * spatial,
        groups,
    )  # fmt: skip
    return out if batched else out.squeeze(0)


@functools.cache
def _warn_padded_copy() -> None:
    """What ``convolution_same`` warns as it pads the input, once a process
    (``TORCH_WARN_ONCE``)."""
    warnings.warn(
        "Using padding='same' with even kernel lengths and odd dilation may require a "
        "zero-padded copy of the input be created",
        stacklevel=3,
    )


def _per_dimension(value: Any, spatial: int) -> list[Any]:
    """A convolution's ``stride`` or ``dilation``, a number or one a dimension, one a
    dimension."""
    if isinstance(value, (list, tuple)):
        return list(value) * spatial if len(value) == 1 else list(value)
    return [value] * spatial


def _padding_mode(spatial: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a convolution over ``spatial`` dimensions called with ``args`` and ``kwargs``
    reaches ``_convolution_mode`` as :func:`convolution_mode` restates it: its padding
    ``"same"`` or ``"valid"``, its input real, batched or not, with the weight's dimensions,
    and for ``"same"`` every stride one. Any other call runs as the function it is, which
    refuses what ``convolution_same`` refuses, with torch's own message."""
    bound = dict(zip(_CONVOLUTION, args, strict=False)) | kwargs
    padding, input, weight = bound.get("padding"), bound.get("input"), bound.get("weight")
    if padding not in ("same", "valid"):
        return False
    if not isinstance(input, torch.Tensor) or not isinstance(weight, torch.Tensor):
        return False
    if input.is_complex() or input.dim() not in (spatial + 1, spatial + 2):
        return False
    if weight.dim() != spatial + 2:
        return False
    return padding == "valid" or all(s == 1 for s in _per_dimension(bound.get("stride", 1), 1))


def weight_norm(call: Call, v: torch.Tensor, g: torch.Tensor, dim: int = 0) -> Any:
    """``_weight_norm`` (``WeightNorm.cpp``): the fused ``_weight_norm_interface`` where
    ``dim`` is the first or last dimension, else ``v * (g / norm_except_dim(v, 2, dim))``,
    whose norm autocast runs into float32 (below), so the quotient, and the weight, promote
    to float32."""
    v, g = v.contiguous(), g.contiguous()
    if dim in (0, v.dim() - 1):
        return call(torch._weight_norm_interface, v, g, dim)[0]
    return v * (g / call(torch.norm_except_dim, v, 2, dim))


def norm_except_dim(call: Call, v: torch.Tensor, pow: int = 2, dim: int = 0) -> Any:
    """``norm_except_dim`` (``WeightNorm.cpp``): ``v.norm(pow)`` for ``dim`` -1, else the
    norm over every dimension but ``dim`` of ``v`` made contiguous (``v.norm(pow, 1)`` of a
    view with ``dim`` first, ``v.norm(pow, 0)`` with it last; a middle one is transposed to
    the front), each the overload autocast appends float32 to (:func:`_appended_norm`)."""
    if dim == -1:
        return _appended_norm(call, v, pow)
    last = v.dim() - 1
    if dim not in (0, last):
        return call(torch.norm_except_dim, v.transpose(0, dim), pow, 0).transpose(0, dim)
    shape = [1] * v.dim()
    shape[dim] = v.size(dim)
    if dim == 0:
        rows = v.contiguous().view(v.size(0), -1)
        return _appended_norm(call, rows, pow, [1]).view(shape)
    columns = v.contiguous().view(-1, v.size(last))
    return _appended_norm(call, columns, pow, [0]).view(shape)


def _appended_norm(
    call: Call,
    tensor: torch.Tensor,
    p: float,
    dim: list[int] | None = None,
    keepdim: bool = False,
) -> Any:
    """C++'s ``at::norm(tensor, p)`` (``norm.Scalar``) or ``at::norm(tensor, p, dim,
    keepdim)`` (``norm.ScalarOpt_dim``) under autocast: the overload autocast redispatches
    to, float32 appended where the input is eligible
    (:data:`~memforensics.plan.choices.APPEND_DTYPE`), through autograd, whose formula for it
    is the GPU's (``norm_backward`` of the input cast to the gradient's dtype); the input
    read as it lies."""
    args: tuple[Any, ...] = (tensor, p)
    func = torch.ops.aten.norm.Scalar
    if dim is not None:
        func, args = torch.ops.aten.norm.ScalarOpt_dim, (tensor, p, dim, keepdim)
    redispatch, args, kwargs = choices.appended(func, args, {})
    return call(redispatch, *args, **kwargs)


RESTATED: dict[str, Callable[..., Any]] = {
    "cross_entropy": cross_entropy,
    "cross_entropy_loss": cross_entropy_loss,
    "nll_loss_nd": nll_loss_nd,
    "normalize": normalize,
    "__rdiv__": reflected_division,
    "pairwise_distance": pairwise_distance,
    "conv1d": functools.partial(convolution_mode, 1),
    "conv2d": functools.partial(convolution_mode, 2),
    "conv3d": functools.partial(convolution_mode, 3),
    "_weight_norm": weight_norm,
    "norm_except_dim": norm_except_dim,
}
"""The composites, by the name the function mode sees them called (and a compiled graph holds
them: ``cross_entropy_loss``, ``nll_loss_nd``, ``pairwise_distance``)."""

_RESTATED_WHEN = {
    "conv1d": functools.partial(_padding_mode, 1),
    "conv2d": functools.partial(_padding_mode, 2),
    "conv3d": functools.partial(_padding_mode, 3),
}
"""Of :data:`RESTATED`'s names, those whose call reaches the composite for some arguments
only: a convolution whose padding is numbers is ``conv2d``'s default overload, which autocast
casts at its own level."""


def restated(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[..., Any] | None:
    """The composite the plan runs under autocast for a call of ``name`` with ``args`` and
    ``kwargs`` (:data:`RESTATED`), or None where autocast casts at the function itself."""
    found = RESTATED.get(name)
    when = _RESTATED_WHEN.get(name)
    if found is None or (when is not None and not when(args, kwargs)):
        return None
    return found


ENTERED: dict[str, Callable[..., Any]] = {
    function.__name__: function
    for function in (
        F.multi_head_attention_forward, F.gumbel_softmax, F.mse_loss, F.l1_loss,
        F.smooth_l1_loss, F.huber_loss, F.nll_loss, F.gaussian_nll_loss,
        F.multilabel_soft_margin_loss, F.triplet_margin_with_distance_loss,
        F.local_response_norm, F.lp_pool1d, F.lp_pool2d, F.lp_pool3d, F.upsample,
        F.upsample_nearest, F.upsample_bilinear, getattr(F, "linear_cross_entropy", None),
    )
    if function is not None
}  # fmt: skip
"""torch's Python functions run as their own code, each function they call seen by the function
mode (:func:`unchecked`), by the name the mode sees them called: under autocast, so that each is
cast as CUDA casts it, and outside it, so that each reaches the kernels the plan runs as CUDA's
(``multi_head_attention_forward``'s ``dropout``, ``scaled_dot_product_attention`` and
``linear``)."""

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
