"""CUDA's own choices, re-made in Python where the CPU build would choose otherwise and the bytes
differ: autocast's cast lists and cast cache, the optimizers' ``foreach`` (the attention kernel
has its own module, ``attention``).

autocast works in the dispatcher on CUDA tensors only, so on stand-ins it would do nothing; here
the functions of its lists cast their inputs above autograd, as autocast does, and the casts of
leaf tensors that require grad (the weights) are kept until the outermost autocast region ends,
as its cast cache keeps them (outside ``torch.inference_mode()`` where the installed torch's
cache skips it there). The functions are those of PyTorch's CUDA autocast op reference,
at the level a script calls them (``torch.einsum``, which reaches ``bmm`` on CUDA, counts as a
lower-precision op). The ones that reach an operator autocast gives a float32 ``dtype``
(:data:`SET_DTYPE`) are called with that dtype instead of a cast. A script that calls an
operator by ATen's own name (``torch.logsumexp``, ``torch.rms_norm``) is cast by ATen's lists
below, and ``F.interpolate`` as the operator its mode reaches (:func:`interpolated`). The
composites of the reference whose casts sit in the operators they call (``cross_entropy``,
``normalize``) run as those composites, in an eager run and in a compiled graph, and torch's
Python losses that call listed functions run as their own code
(:mod:`~memforensics.plan.autocast_inner`).

A backward called inside an autocast region runs there too: autograd's engine runs each node with
the thread-local state captured at ``backward()`` (``GraphTask::thread_locals_``, autocast's
dispatch keys among them), so the operators of its backward formulas, and the engine's own
``sum_to`` of a broadcast's gradient (``InputMetadata::maybe_reduce``), are cast by CUDA's
autocast as the dispatcher reaches them. A plan sees those below autograd, by their ATen names:
:meth:`Autocast.operator_cast` casts the ones of the lists above, and of ATen's own names
(:data:`ATEN_LOWER`, :data:`ATEN_FLOAT32`, :data:`ATEN_WIDEST`), that the installed torch
registers a CUDA autocast kernel for.

A library's operators (torchvision's) take autocast's part in their own kernels, registered for
CUDA's autocast key; what such a kernel casts is its own code, which the dispatcher does not
show, so the ones the plan follows are named in :data:`LIBRARY`, each as its source does it.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch

_T = torch.Tensor


LOWER = frozenset(
    (
        "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "addmm", "addbmm", "baddbmm",
        "addmv", "addr", "mv", "chain_matmul", "multi_dot", "linear", "conv1d", "conv2d",
        "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu", "einsum",
        "scaled_dot_product_attention",
    )
)  # fmt: skip
"""Run in the autocast dtype (float16 or bfloat16), by the name the script calls."""

FLOAT32 = frozenset(
    (
        "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
        "reciprocal", "rsqrt", "sinh", "tan", "pow", "__pow__", "__rpow__", "__rtruediv__",
        "softmax", "log_softmax", "softmin", "softplus", "cumprod", "cumsum", "dist", "pdist",
        "cdist", "renorm", "prod", "sum", "norm", "normalize", "layer_norm", "group_norm",
        "cosine_similarity", "cross_entropy", "nll_loss", "mse_loss", "l1_loss",
        "smooth_l1_loss", "kl_div", "binary_cross_entropy_with_logits", "poisson_nll_loss",
        "cosine_embedding_loss", "hinge_embedding_loss", "margin_ranking_loss",
        "multilabel_margin_loss", "multi_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    )
)  # fmt: skip
"""Run in float32."""

OPT_DTYPE = frozenset(
    (
        "sum", "prod", "cumsum", "cumprod", "softmax", "log_softmax", "linalg_vector_norm",
        "linalg_matrix_norm",
    )
)  # fmt: skip
"""Of :data:`FLOAT32`'s ATen operators, those autocast runs with their ``dtype`` argument set to
float32 where the caller set none (``fp32_set_opt_dtype`` in ``aten/src/ATen/autocast_mode.h``):
the input is read as it lies, not cast, and the result is float32 (CUDA's reductions read a
float16 or bfloat16 input into a float32 result, ``make_reduction``'s ``gpu_lowp_to_f32``)."""

SET_DTYPE = frozenset(
    (
        "sum", "prod", "cumsum", "cumprod", "softmax", "log_softmax", "softmin", "norm",
        "linalg_norm", "linalg_vector_norm", "linalg_matrix_norm",
    )
)  # fmt: skip
"""Functions, by the name the script calls, that reach an operator autocast runs with its
``dtype`` argument set to float32, not with its input cast: :data:`OPT_DTYPE`'s, and
``norm.Scalar`` and ``norm.ScalarOpt_dim``, which autocast redispatches with float32 appended
(``fp32_append_dtype``, ``AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE``). The function is called
with ``dtype=torch.float32`` where the script gave none and its input is a floating stand-in
other than float64 (``firstarg_is_eligible``), and as it was called where the script gave one
(``set_opt_dtype`` keeps it, and nothing is cast). ``softmin``, ``norm`` and the ``linalg``
norms pass their ``dtype`` on to the operator the GPU's autocast sets it for (``softmin`` to
``softmax`` of the negated input). What the kernel then allocates is its own: ``sum``,
``prod`` and the vector norms read a float16 or bfloat16 input into their float32 result
(``gpu_lowp_to_f32`` in ``ATen/native/ReduceOpsUtils.h``); ``softmax`` converts a bfloat16
input first (``input_.toType(dtype)`` in ``SoftMax.cpp``), as does ``cumsum``, after its
result (``impl_func_cum_ops``, :mod:`~memforensics.plan.cumulative`)."""

APPEND_DTYPE = {
    torch.ops.aten.norm.Scalar: torch.ops.aten.norm.ScalarOpt_dtype,
    torch.ops.aten.norm.ScalarOpt_dim: torch.ops.aten.norm.ScalarOpt_dim_dtype,
}
"""The overloads autocast runs by another with float32 appended (``fp32_append_dtype``,
``AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE`` in ``aten/src/ATen/autocast_mode.h``), by the
overload a backward reaches, and the one it redispatches to: the input read as it lies, its
dtype float32 where the input is eligible (``type_from_firstarg``), the input's own otherwise.
Nothing is cast, so a bfloat16 gradient's norm allocates its float32 result alone (the kernel,
``linalg_vector_norm``'s, reads a 16-bit input into it), not a float32 copy of the gradient
first."""

_APPENDED = "norm"
"""The name of :data:`APPEND_DTYPE`'s overloads, tested before the overload is looked up."""

OPT_FLOAT32 = "dtype"
"""The policy of :data:`SET_DTYPE`'s functions: ``dtype`` set to float32."""

WIDEST = frozenset(
    (
        "addcdiv", "addcmul", "atan2", "cross", "dot", "tensordot", "index_put", "scatter_add",
        "bilinear", "grid_sample",
    )
)  # fmt: skip
"""Run in the widest floating type of their inputs. Not ``cat`` and ``stack``, which the op
reference still lists: CUDA's autocast registers no kernel for them (pytorch/pytorch#59497
moved them off its promote list, since they promote mixed inputs themselves), so they copy
nothing and write each input into the promoted result as it lies."""


ATEN_LOWER = frozenset(
    (
        "_convolution", "conv_tbc", "convolution", "cudnn_convolution",
        "cudnn_convolution_transpose", "linalg_vecdot", "linalg_multi_dot",
        "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell",
        "rnn_relu_cell", "_scaled_dot_product_flash_attention",
    )
)  # fmt: skip
"""ATen operators CUDA's autocast runs in the autocast dtype that no function of :data:`LOWER`
is named for (``AT_FORALL_LOWER_PRECISION_FP`` in ``aten/src/ATen/autocast_mode.h``, and
``cudnn_convolution``, ``cudnn_convolution_transpose`` in ``autocast_mode.cpp``)."""

ATEN_FLOAT32 = frozenset(
    (
        "native_layer_norm", "rms_norm", "frobenius_norm", "nuclear_norm", "nll_loss2d",
        "huber_loss", "logsumexp", "upsample_nearest1d", "_upsample_nearest_exact1d",
        "upsample_nearest2d", "_upsample_nearest_exact2d", "upsample_nearest3d",
        "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
        "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d",
        "_upsample_bicubic2d_aa",
    )
)  # fmt: skip
"""ATen operators CUDA's autocast runs in float32 that no function of :data:`FLOAT32` is named
for (``AT_FORALL_FP32``)."""

ATEN_WIDEST = frozenset(("vdot", "grid_sampler"))
"""ATen operators CUDA's autocast runs in the widest floating type of their inputs that no
function of :data:`WIDEST` is named for (``AT_FORALL_PROMOTE``)."""

ALIASES = {
    "square": "pow",
    "arccos": "acos",
    "arcsin": "asin",
    "arctan2": "atan2",
    "special_expm1": "expm1",
    "special_log1p": "log1p",
    "special_erfinv": "erfinv",
    "special_logsumexp": "logsumexp",
    "linalg_matmul": "matmul",
    "special_softmax": "softmax",
    "special_log_softmax": "log_softmax",
}
"""Functions a script calls whose ``CompositeImplicitAutograd`` body is one listed operator,
which autocast then casts (autocast has no kernel of their own, so the call falls through to
the body): by the name called, the name of the lists. ``x.square()`` is ``at::pow(self, 2)``
(``UnaryOps.cpp``), so a bfloat16 square under autocast is a float32 copy and a float32
result on a GPU; ``torch.arccos`` is ``self.acos()``, ``torch.special.expm1``
``self.expm1()``, ``torch.linalg.matmul`` ``at::matmul``, ``torch.special.softmax`` and
``torch.special.log_softmax`` ``at::softmax`` and ``at::log_softmax`` with the dtype given
(``SoftMax.cpp``), which autocast sets to float32 where none is (``fp32_set_opt_dtype``)."""

BANNED = {
    "binary_cross_entropy": (
        "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
        "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
        "In this case, combine the two layers using "
        "torch.nn.functional.binary_cross_entropy_with_logits\n"
        "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
        "safe to autocast."
    )
}
"""Functions whose CUDA autocast kernel refuses every call, and what it raises
(``binary_cross_entropy_banned`` in ``aten/src/ATen/autocast_mode.cpp``): under
``autocast("cuda")`` ``F.binary_cross_entropy`` (``nn.BCELoss``) fails on a GPU whatever its
dtypes, so it fails in a plan too."""

INTERPOLATE = "interpolate"
"""``F.interpolate``, which autocast casts as the ATen operator it reaches
(:func:`interpolated`)."""

_RESAMPLED = {
    "nearest": "upsample_nearest{}d",
    "nearest-exact": "_upsample_nearest_exact{}d",
    "linear": "upsample_linear{}d",
    "bilinear": "upsample_bilinear{}d",
    "trilinear": "upsample_trilinear{}d",
    "bicubic": "upsample_bicubic{}d",
    "area": "adaptive_avg_pool{}d",
    "lanczos": "_upsample_lanczos{}d_aa",
}
"""``F.interpolate``'s mode: the ATen operator it calls, by the input's spatial dimensions."""


def interpolated(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The ATen operator ``F.interpolate(*args, **kwargs)`` reaches, as its Python body
    chooses it (``torch/nn/functional.py``): by ``mode`` and the input's dimensions, the
    antialiased kernel (``_upsample_bilinear2d_aa``) where ``antialias`` is set; ``area`` is
    ``adaptive_avg_pool``, which autocast does not list. Empty for an input it refuses."""
    names = ("input", "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor",
             "antialias")  # fmt: skip
    bound = dict(zip(names, args, strict=False)) | kwargs
    tensor = bound.get("input")
    if not isinstance(tensor, torch.Tensor):
        return ""
    found = _RESAMPLED.get(bound.get("mode", "nearest"), "")
    name = found.format(tensor.dim() - 2)
    if bound.get("antialias") and name in ("upsample_bilinear2d", "upsample_bicubic2d"):
        return f"_{name}_aa"
    return name


LIBRARY: dict[str, bool] = {
    "torchvision::roi_align": True,  # csrc/ops/autocast/roi_align_kernel.cpp
    "torchvision::ps_roi_align": True,  # csrc/ops/autocast/ps_roi_align_kernel.cpp
    "torchvision::roi_pool": True,  # csrc/ops/autocast/roi_pool_kernel.cpp
    "torchvision::ps_roi_pool": True,  # csrc/ops/autocast/ps_roi_pool_kernel.cpp
    "torchvision::deform_conv2d": True,  # csrc/ops/autocast/deform_conv2d_kernel.cpp
    "torchvision::nms": False,  # csrc/ops/autocast/nms_kernel.cpp
}
"""Library operators whose CUDA autocast kernel runs them in float32: each floating input but
float64 cast (``at::autocast::cached_cast(at::kFloat, ...)``, a copy; a cast to float32 is
never cached), the operator run with autocast off, and, where True, each result cast back to
the first input's dtype (``.to(input.scalar_type())``, its integer ones too)."""

UNFOLLOWED = (
    "a library operator's own CUDA autocast kernel is not followed: it runs uncast in a plan"
)
"""Said once for an operator outside ``aten`` that registers a CUDA autocast kernel the plan
does not know (what it casts is its own code)."""

OPERATORS = (torch._ops.OpOverloadPacket, torch._ops.OpOverload)
"""The types of ``torch.ops`` callables, the only way a library's operator is called."""
_AUTOCAST_KEY = "AutocastCUDA"


def library_name(func: object) -> str | None:
    """The qualified name of a library's operator (``torchvision::roi_align``), else None."""
    if isinstance(func, torch._ops.OpOverloadPacket):
        name: str = func._qualified_op_name
    elif isinstance(func, torch._ops.OpOverload):
        name = func._schema.name
    else:
        return None
    return None if name.startswith("aten::") else name


def _has_autocast_kernel(name: str) -> bool:
    """Whether library operator ``name`` has a CUDA autocast kernel; False for one the
    dispatcher does not hold (TorchScript's ``prim::device``, which only the JIT registers)."""
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(name, _AUTOCAST_KEY))
    except RuntimeError:  # "operator prim::device does not exist"
        return False


class Autocast:
    """autocast("cuda") for stand-ins: the casts of its lists and its cast cache, and the
    float32 runs of the library operators that cast in their own kernels."""

    names = LOWER | FLOAT32 | WIDEST | SET_DTYPE | ATEN_LOWER | ATEN_FLOAT32 | ATEN_WIDEST
    names |= {INTERPOLATE, *BANNED, *ALIASES}
    """The functions autocast casts for, by name: a script calls ATen's own names too
    (``torch.logsumexp``, ``torch.rms_norm``, ``torch._C._nn.upsample_nearest2d``)."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[weakref.ref[torch.Tensor], torch.Tensor]] = {}
        self._library: dict[object, tuple[bool | None, bool]] = {}
        self._inference_cached = caches_in_inference_mode()
        self._operators: dict[torch._ops.OpOverload, str] = {}

    def library(self, func: object) -> tuple[bool | None, bool]:
        """How library operator ``func`` casts under autocast, looked up once: its entry in
        :data:`LIBRARY` (None where it has none), and whether it has a CUDA autocast kernel
        the plan does not follow."""
        found = self._library.get(func)
        if found is None:
            name = library_name(func)
            back = LIBRARY.get(name) if name is not None else None
            unfollowed = name is not None and back is None and _has_autocast_kernel(name)
            found = self._library[func] = (back, unfollowed)
        return found

    def in_float32(self, func: Callable[..., Any], back: bool, *args: Any, **kwargs: Any) -> Any:
        """``func`` as its autocast kernel runs it: its inputs cast to float32 and, where
        ``back``, its results cast to the first input's dtype; the float32 copies live until the
        results are cast, as the kernel's temporaries do."""
        cast_args, cast_kwargs = self.cast(torch.float32, args, kwargs)
        with torch.autocast("cuda", enabled=False):
            out = func(*cast_args, **cast_kwargs)
        first = args[0] if args else None
        if not back or not isinstance(first, torch.Tensor):
            return out
        if isinstance(out, torch.Tensor):
            return out.to(first.dtype)
        return type(out)(o.to(first.dtype) if isinstance(o, torch.Tensor) else o for o in out)

    def operator_cast(
        self,
        func: torch._ops.OpOverload,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        convert: Callable[[torch.Tensor, torch.dtype], torch.Tensor],
    ) -> tuple[torch._ops.OpOverload, tuple[Any, ...], dict[str, Any]]:
        """ATen operator ``func`` and its ``args`` and ``kwargs``, seen by a dispatch mode, as
        CUDA's autocast passes them on where the call was made with it enabled, each cast made
        by ``convert``; unchanged for an operator it has no kernel for. ``dtype`` is set to
        float32 for :data:`OPT_DTYPE`'s, where the first input is a floating stand-in
        (autocast's ``firstarg_is_eligible``) and the call set none; an
        :data:`APPEND_DTYPE` overload is its redispatch, its dtype appended."""
        name = self._operators.get(func)
        if name is None:
            name = self._operators[func] = _listed(func)
        if not name or not _enabled_at_call():
            return func, args, kwargs
        if name in BANNED:
            raise RuntimeError(BANNED[name])
        if name in OPT_DTYPE:
            return func, *_float32_dtype(func, args, kwargs)
        if name == _APPENDED and func in APPEND_DTYPE:
            return appended(func, args, kwargs)
        policy: torch.dtype | bool = True  # WIDEST, ATEN_WIDEST
        if name in LOWER or name in ATEN_LOWER:
            policy = torch.get_autocast_dtype("cuda")
        elif name in FLOAT32 or name in ATEN_FLOAT32:
            policy = torch.float32
        return func, *self.cast(policy, args, kwargs, convert)

    def clear(self) -> None:
        """The outermost autocast region ended (``torch.clear_autocast_cache``)."""
        self._cache.clear()

    def policy(
        self, name: str, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> torch.dtype | bool | str | None:
        """The dtype function ``name`` runs in under autocast now, called with ``args`` and
        ``kwargs``; True: the widest; :data:`OPT_FLOAT32`: its ``dtype`` argument set to
        float32; None: unchanged. A :data:`BANNED` function raises what its kernel raises."""
        if not torch.is_autocast_enabled("cuda"):
            return None
        if name in BANNED:
            raise RuntimeError(BANNED[name])
        if name == INTERPOLATE:
            name = interpolated(args, kwargs or {})
        name = ALIASES.get(name, name)
        if name in SET_DTYPE:
            return OPT_FLOAT32
        if name in LOWER or name in ATEN_LOWER:
            return torch.get_autocast_dtype("cuda")
        if name in FLOAT32 or name in ATEN_FLOAT32:
            return torch.float32
        if name in WIDEST or name in ATEN_WIDEST:
            return True
        return None

    def cast(
        self,
        policy: torch.dtype | bool | str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        convert: Callable[[torch.Tensor, torch.dtype], torch.Tensor] = torch.Tensor.to,
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``args`` and ``kwargs`` with their eligible tensors cast as autocast would, each
        cast made by ``convert``, or with ``dtype`` float32 where autocast sets it."""
        if policy == OPT_FLOAT32:
            return _float32_keyword(args, kwargs)
        if policy is True:
            dtype = promote_type(_tensors(args, kwargs))
        else:
            assert isinstance(policy, torch.dtype)
            dtype = policy
        lower = dtype in (torch.float16, torch.bfloat16)
        cache = lower and torch.is_autocast_cache_enabled()

        def one(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                return self._cast(value, dtype, convert, cache=cache)
            if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
                return type(value)(self._cast(v, dtype, convert, cache=cache) for v in value)
            return value

        return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}

    def _cast(
        self,
        tensor: torch.Tensor,
        dtype: torch.dtype,
        convert: Callable[[torch.Tensor, torch.dtype], torch.Tensor],
        *,
        cache: bool,
    ) -> torch.Tensor:
        if not tensor.is_meta or not tensor.is_floating_point() or tensor.dtype == dtype:
            return tensor
        if tensor.dtype == torch.float64:
            return tensor  # autocast leaves float64 alone
        if not (cache and tensor.is_leaf and tensor.requires_grad):
            return convert(tensor, dtype)
        if not self._inference_cached and torch.is_inference_mode_enabled():
            return convert(tensor, dtype)
        held = self._cache.get(id(tensor))
        if held is not None and held[0]() is tensor and held[1].dtype == dtype:
            return held[1]
        cast = convert(tensor, dtype)
        self._cache[id(tensor)] = (weakref.ref(tensor), cast)
        return cast


def promote_type(tensors: list[torch.Tensor]) -> torch.dtype:
    """The dtype a ``promote`` operator runs in (``promote_type`` and ``prioritize`` in
    ``aten/src/ATen/autocast_mode.h``): the autocast dtype, unless an eligible input (a
    floating stand-in) is float32; float64 inputs and the host's (a CPU number a kernel takes
    beside the device's tensors) are ignored, so neither widens the others, and a float16
    input under bfloat16 autocast (or the reverse) is refused as CUDA refuses it."""
    lower: torch.dtype = torch.get_autocast_dtype("cuda")
    current = lower
    for tensor in tensors:
        if not tensor.is_meta or not tensor.is_floating_point():
            continue
        found = tensor.dtype
        if found == torch.float64:
            continue
        if torch.float32 in (current, found):
            current = torch.float32
        elif found != lower:
            raise RuntimeError("Unexpected floating ScalarType in at::autocast::prioritize")
    return current


@functools.cache
def caches_in_inference_mode() -> bool:
    """Whether the installed torch's autocast keeps a weight's cast under
    ``torch.inference_mode()``. ``cached_cast`` (``aten/src/ATen/autocast_mode.cpp``) is the
    same for every device, so its CPU autocast is asked: a parameter passed to ``mm`` twice
    reaches the kernel as the same cast tensor where the cache keeps it. Releases differ:
    recent ones do not cache there (a cast made under inference mode cannot serve autograd
    later), so the installed one is asked, not its version read. Asked with the caller's
    dispatch modes set aside, once."""
    from torch.utils._python_dispatch import _disable_current_modes

    from memforensics.plan.eager_modes import EagerDispatchMode

    reached: list[torch.Tensor] = []

    class Operands(EagerDispatchMode):  # type: ignore[misc, no-untyped-call, unused-ignore]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if func is torch.ops.aten.mm.default:
                reached.append(args[1])
            return func(*args, **(kwargs or {}))

    weight = torch.nn.Parameter(torch.ones(1, 1, device="cpu"))
    operand = torch.ones(1, 1, device="cpu")
    with (
        _disable_current_modes(),
        torch.inference_mode(),
        torch.autocast("cpu", dtype=torch.bfloat16),
        Operands(),  # type: ignore[no-untyped-call, unused-ignore]
    ):
        torch.mm(operand, weight)
        torch.mm(operand, weight)
    return reached[0] is reached[1]


def _enabled_at_call() -> bool:
    """Whether CUDA's autocast was enabled where the operator a dispatch mode handles now was
    called: inside the mode the keys above it are excluded, autocast's among them, so the
    thread-local state the call entered the dispatcher with is asked."""
    restore = torch._C._RestorePythonTLSSnapshot  # type: ignore[attr-defined, unused-ignore]  # not in torch's stubs
    with restore():
        enabled: bool = torch.is_autocast_enabled("cuda")
    return enabled


_ATEN_NAMES = Autocast.names | OPT_DTYPE | ATEN_LOWER | ATEN_FLOAT32 | ATEN_WIDEST


def _listed(func: torch._ops.OpOverload) -> str:
    """The name autocast's lists know ATen operator ``func`` by, those of the functions a
    script calls and those of ATen's operators alone, where the installed torch registers a
    CUDA autocast kernel for its overload; else empty."""
    name: str = func._schema.name
    if not name.startswith("aten::"):
        return ""
    bare = name[len("aten::") :]
    if bare not in _ATEN_NAMES:
        return ""
    overload = func._overloadname
    qualified = name if overload == "default" else f"{name}.{overload}"
    if not torch._C._dispatch_has_kernel_for_dispatch_key(qualified, _AUTOCAST_KEY):
        return ""
    return bare


def _float32_dtype(
    func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` with ``dtype`` float32 where autocast sets it
    (``set_opt_dtype``): the first input a floating stand-in other than float64, no dtype
    given."""
    first = args[0] if args else None
    if not isinstance(first, torch.Tensor) or not first.is_meta:
        return args, kwargs
    if not first.is_floating_point() or first.dtype == torch.float64:
        return args, kwargs
    for at, argument in enumerate(func._schema.arguments):
        if argument.name != "dtype":
            continue
        if len(args) > at:
            if args[at] is not None:
                return args, kwargs
            return (*args[:at], torch.float32, *args[at + 1 :]), kwargs
        if kwargs.get("dtype") is None:
            return args, {**kwargs, "dtype": torch.float32}
    return args, kwargs


def _appended_dtype(
    func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """An :data:`APPEND_DTYPE` overload's ``args`` and ``kwargs`` as its redispatch takes them:
    the defaults it left out filled in, then ``dtype`` float32 where the first input is an
    eligible stand-in (floating, not float64), else the input's own (``type_from_firstarg``)."""
    bound = list(args)
    for argument in func._schema.arguments[len(args) :]:
        bound.append(kwargs.get(argument.name, argument.default_value))
    first = args[0]
    eligible = first.is_meta and first.is_floating_point() and first.dtype != torch.float64
    return tuple(bound), {"dtype": torch.float32 if eligible else first.dtype}


def appended(
    func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[torch._ops.OpOverload, tuple[Any, ...], dict[str, Any]]:
    """An :data:`APPEND_DTYPE` overload called with ``args`` and ``kwargs`` as CUDA's autocast
    redispatches it: the other overload, its dtype appended."""
    return APPEND_DTYPE[func], *_appended_dtype(func, args, kwargs)


def _float32_keyword(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A :data:`SET_DTYPE` function's ``args`` and ``kwargs`` as autocast passes them on:
    ``dtype=torch.float32`` added where the first input is a floating stand-in other than
    float64 and no dtype was given (by keyword, or in place: none of these functions takes
    another argument that is a dtype)."""
    first = args[0] if args else kwargs.get("input")
    if not isinstance(first, torch.Tensor) or not first.is_meta:
        return args, kwargs
    if not first.is_floating_point() or first.dtype == torch.float64:
        return args, kwargs
    if kwargs.get("dtype") is not None or any(isinstance(a, torch.dtype) for a in args):
        return args, kwargs
    return args, {**kwargs, "dtype": torch.float32}


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found


FOREACH_DEVICES = ("_get_foreach_kernels_supported_devices", "_get_fused_kernels_supported_devices")


def with_meta(original: Callable[[], list[str]]) -> Callable[[], list[str]]:
    """The devices ``original`` names, and ``meta``: the optimizers see stand-ins as CUDA
    tensors when choosing ``foreach``/``fused``, and CUDA defaults to ``foreach``."""

    def devices() -> list[str]:
        return [*original(), "meta"]

    return devices
