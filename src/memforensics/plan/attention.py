"""``scaled_dot_product_attention`` on stand-ins, through the kernel CUDA would run.

The CPU build chooses the math path for ``meta`` tensors, where CUDA runs cuDNN, flash or
memory-efficient attention, and the bytes differ by the B·H·L·S scores. This module re-makes
CUDA's choice for the installed torch and the planned capability, function by function beside
``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`` (``select_sdp_backend``, the
``can_use_*`` filters) and ``sdp_utils_cpp.h`` (the filters both devices share), and then calls
the kernel that ``scaled_dot_product_attention`` in ``attention.cpp`` calls for that choice, with
the same preparation of its inputs (head padding for flash, mask conversion and alignment).

The script's own restrictions take part as on CUDA: ``sdpa_kernel``, the deprecated
``torch.backends.cuda.sdp_kernel``, ``enable_flash_sdp`` and its siblings set flags and a
priority order in torch's global context, which the CPU build holds too and which are read
here at each call. The math path runs as the CPU build runs it on ``meta``: the same composite
as on CUDA, upcasting half inputs to float32 unless
``allow_fp16_bf16_reduction_math_sdp(True)``.

Facts a ``meta`` tensor cannot give, and what is taken instead: the cuDNN version is the installed
CUDA build's own, or on the CPU build the one torch's CUDA wheel pins
(:func:`~memforensics.plan.build.facts`); cuDNN's
frontend is taken to lack the head size 256 support (it is reached only from cuDNN 9.22); a base
pointer is aligned as the caching allocator aligns it (256 bytes), so only storage offsets decide
alignment.
"""

from __future__ import annotations

import enum
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F  # torch's own spelling

from memforensics.plan import build

SDPA_NAME = "scaled_dot_product_attention"


class Backend(enum.IntEnum):
    """``at::SDPBackend``, by the values ``torch._C._get_sdp_priority_order`` lists."""

    MATH = 0
    FLASH = 1
    EFFICIENT = 2
    CUDNN = 3
    OVERRIDEABLE = 4


DEFAULT_ORDER = (Backend.FLASH, Backend.EFFICIENT, Backend.MATH, Backend.CUDNN,
                 Backend.OVERRIDEABLE)  # fmt: skip
"""The global context's order until a script sets its own (``sdpa_kernel(set_priority=True)``)."""

CUDNN_ORDER = (Backend.CUDNN, Backend.FLASH, Backend.EFFICIENT, Backend.MATH)
"""``priority_order``'s order where ``check_prefer_cudnn_attention`` holds."""


@dataclass(frozen=True)
class Params:
    """``sdp_params``, with the planned device's compute capability."""

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attn_mask: torch.Tensor | None
    dropout: float
    is_causal: bool
    enable_gqa: bool
    capability: tuple[int, int]


def attention(
    capability: tuple[int, int],
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """``scaled_dot_product_attention`` (``attention.cpp``) on stand-ins: the backend
    ``select_sdp_backend`` picks, its inputs prepared as CUDA prepares them."""
    params = Params(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa, capability)
    backend = select_sdp_backend(params)
    if backend is Backend.CUDNN:
        mask = _boolean_mask_to_bias(attn_mask, query.dtype, -65504.0)
        out = torch.ops.aten._scaled_dot_product_cudnn_attention(
            query, key, value, mask, _should_compute_logsumexp(params), dropout_p, is_causal,
            False, scale=scale,
        )  # fmt: skip
        first: torch.Tensor = out[0]
        return first
    if backend is Backend.FLASH:
        head = query.shape[-1]
        padded = [_pad_last_dim(t, 8) for t in (query, key, value)]
        out = torch.ops.aten._scaled_dot_product_flash_attention(
            *padded, dropout_p, is_causal, False,
            scale=scale if scale is not None else 1.0 / math.sqrt(head),
        )  # fmt: skip
        result: torch.Tensor = out[0]
        return result[..., :head] if result.shape[-1] != head else result
    if backend is Backend.EFFICIENT:
        mask = _boolean_mask_to_bias(attn_mask, query.dtype, float("-inf"))
        if mask is not None:
            mask = _preprocess_mask(mask, query, key)
        out = torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, mask, _should_compute_logsumexp(params), dropout_p, is_causal,
            scale=scale,
        )  # fmt: skip
        efficient: torch.Tensor = out[0]
        return efficient
    mask = _boolean_mask_to_bias(attn_mask, query.dtype, float("-inf"))
    return _math(query, key, value, mask, dropout_p, is_causal, scale, enable_gqa)


def select_sdp_backend(params: Params) -> Backend:
    """``select_sdp_backend``: the first backend of the priority order that can run; torch's
    own errors where none can."""
    enabled = _enabled()
    if not any(enabled[b] for b in (Backend.MATH, Backend.FLASH, Backend.EFFICIENT,
                                    Backend.CUDNN)):  # fmt: skip
        raise RuntimeError("No viable backend for scaled_dot_product_attention was found.")
    for backend in priority_order(params.capability):
        if backend is Backend.CUDNN and can_use_cudnn_attention(params, enabled):
            return backend
        if backend is Backend.FLASH and can_use_flash_attention(params, enabled):
            return backend
        if backend is Backend.EFFICIENT and can_use_mem_efficient_attention(params, enabled):
            return backend
        if backend is Backend.MATH and enabled[Backend.MATH]:
            return backend
        if backend is Backend.OVERRIDEABLE and enabled[Backend.OVERRIDEABLE]:
            raise RuntimeError("Invalid backend")
    raise RuntimeError("No available kernel. Aborting execution.")


def priority_order(capability: tuple[int, int]) -> tuple[Backend, ...]:
    """``priority_order``: the global context's order, which CUDA replaces by cuDNN first on
    its first attention where ``check_prefer_cudnn_attention`` holds. An order the script set
    itself is kept as it is."""
    order = tuple(Backend(b) for b in torch._C._get_sdp_priority_order())
    if order == DEFAULT_ORDER and check_prefer_cudnn_attention(capability):
        return CUDNN_ORDER
    return order


def check_prefer_cudnn_attention(capability: tuple[int, int]) -> bool:
    """``check_prefer_cudnn_attention`` for a CUDA 13 build: cuDNN newer than 9.15 on
    capability 9.x or 10.x, unless ``TORCH_CUDNN_SDPA_DEPRIORITIZED=1``."""
    if os.environ.get("TORCH_CUDNN_SDPA_DEPRIORITIZED") == "1":
        return False
    return (build.facts().cudnn or 0) > 91500 and capability[0] in (9, 10)


def strictly_deterministic() -> bool:
    """Whether the script asked for deterministic algorithms with errors, not warnings, where
    none exists: the setting that turns cuDNN attention off and splits flash's accumulator."""
    return bool(
        torch.are_deterministic_algorithms_enabled()
        and not torch.is_deterministic_algorithms_warn_only_enabled()
    )


def can_use_cudnn_attention(params: Params, enabled: dict[Backend, bool]) -> bool:
    """``can_use_cudnn_attention``'s filters: the general ones, then the dense ones where the
    inputs are dense (:func:`only_dense`)."""
    q, k = params.query, params.key
    general = (
        enabled[Backend.CUDNN]
        and _four_dimensional(params)
        and not strictly_deterministic()
        and _dtypes(params, _low_precision(params.capability))
        and _attn_mask_shape(params)
        and (8, 0) <= params.capability <= (12, 1)
        and params.dropout * 16.0 == math.floor(params.dropout * 16.0)
    )
    if not general or not only_dense(params):
        return general
    return (
        _nonzero_sequence_lengths(params)
        and _last_dim_stride_1(params, ignore_singleton_dim=True)
        and _batch_and_heads(params, supports_gqa=True, requires_same_num_heads=False)
        and q.shape[0] <= 65535
        and q.shape[1] <= 65535
        and _cudnn_head_dims(params)
        and k.shape[2] != 1
        and not (params.dropout != 0.0 and q.shape[2] == 1)
    )


def can_use_flash_attention(params: Params, enabled: dict[Backend, bool]) -> bool:
    """``can_use_flash_attention``'s filters: the general ones, then the dense ones where the
    inputs are dense (:func:`only_dense`)."""
    q, k, v = params.query, params.key, params.value
    if not (enabled[Backend.FLASH] and _four_dimensional(params) and params.attn_mask is None):
        return False
    head = q.shape[-1]
    if not (head == k.shape[-1] == v.shape[-1] and head <= 256):
        return False
    if not (8, 0) <= params.capability <= (12, 1):
        return False
    cap = params.capability
    narrow = (8, 6) <= cap <= (8, 9) or (12, 0) <= cap <= (12, 1)
    trainable = head <= 192 or (params.dropout <= 0.0 and head > 224)
    if narrow and _input_requires_grad(params) and not trainable:
        return False  # check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120
    dense = only_dense(params)
    if params.is_causal and dense and q.shape[-2] != k.shape[-2]:
        return False
    allowed = _low_precision(params.capability)
    if params.capability[0] >= 9 and torch._C._get_fa3_sdp_enabled():
        allowed = (torch.float8_e4m3fn, torch.float16, torch.bfloat16)
    if not dense:
        return _dtypes(params, allowed)
    return (
        _dtypes(params, allowed)
        and _batch_and_heads(params, supports_gqa=True, requires_same_num_heads=True)
        and _nonzero_sequence_lengths(params)
        and _last_dim_stride_1(params, ignore_singleton_dim=True)
    )


def can_use_mem_efficient_attention(params: Params, enabled: dict[Backend, bool]) -> bool:
    """``can_use_mem_efficient_attention``'s filters: the general ones, the dense ones where the
    inputs are dense (:func:`only_dense`), then its dtypes."""
    q, k, v = params.query, params.key, params.value
    if not (
        enabled[Backend.EFFICIENT]
        and (5, 0) <= params.capability <= (12, 1)
        and _four_dimensional(params)
    ):
        return False
    alignment = minimum_gemm_alignment(params)
    if not (
        q.shape[-1] == k.shape[-1]
        and q.shape[-1] % alignment == 0
        and q.shape[-1] > 0
        and v.shape[-1] % alignment == 0
        and v.shape[-1] > 0
    ):
        return False
    allowed: tuple[torch.dtype, ...] = (torch.float16, torch.float32)
    if params.capability[0] >= 8:
        allowed = (torch.float16, torch.float32, torch.bfloat16)
    if not only_dense(params):
        return _dtypes(params, allowed)
    if params.capability[0] >= 8 and not all(
        t.numel() == 0 or t.storage_offset() % alignment == 0 for t in (q, k, v)
    ):
        return False  # check_data_ptr_alignment_mem_efficient, in elements
    return (
        _nonzero_sequence_lengths(params)
        and _last_dim_stride_1(params, ignore_singleton_dim=False)
        # check_batch_size_and_num_heads_dense<false /*supports_grouped_query_attention=*/>:
        # the kernel takes no grouped heads, so enable_gqa with fewer key heads falls to math
        and _batch_and_heads(params, supports_gqa=False, requires_same_num_heads=True)
        and _dtypes(params, allowed)
    )


def only_dense(params: Params) -> bool:
    """``has_only_dense_inputs``: no input is nested. A jagged nested tensor is nested but not
    strided, so CUDA's checks give it neither the dense filters nor the strided nested ones;
    torch's Python for it (``torch.nested._internal.sdpa``) adds its own."""
    return not any(t.is_nested for t in (params.query, params.key, params.value))


def minimum_gemm_alignment(params: Params) -> int:
    """``minimum_gemm_alignment``: the head size's required multiple, in elements."""
    major = params.capability[0]
    half = params.query.dtype in (torch.float16, torch.bfloat16)
    tensor_cores = major >= 8 or (major >= 7 and half)
    alignment = 4 if major >= 8 else 1
    if tensor_cores:
        alignment = max(alignment, 128 // (16 if half else 32))
    return alignment


def _enabled() -> dict[Backend, bool]:
    """The script's flags, from torch's global context (``userEnabled*SDP``)."""
    c = torch._C
    return {
        Backend.MATH: c._get_math_sdp_enabled(),
        Backend.FLASH: c._get_flash_sdp_enabled(),
        Backend.EFFICIENT: c._get_mem_efficient_sdp_enabled(),
        Backend.CUDNN: c._get_cudnn_sdp_enabled(),
        Backend.OVERRIDEABLE: c._get_overrideable_sdp_enabled(),
    }


def _low_precision(capability: tuple[int, int]) -> tuple[torch.dtype, ...]:
    """``check_dtypes_low_precision``'s dtypes."""
    return (torch.float16, torch.bfloat16) if capability[0] >= 8 else (torch.float16,)


def _dtypes(params: Params, allowed: tuple[torch.dtype, ...]) -> bool:
    """``check_tensor_dtype``."""
    dtype = params.query.dtype
    return dtype == params.key.dtype == params.value.dtype and dtype in allowed


def _four_dimensional(params: Params) -> bool:
    """``check_tensor_shapes``."""
    return bool(params.query.dim() == params.key.dim() == params.value.dim() == 4)


def _input_requires_grad(params: Params) -> bool:
    """``input_requires_grad``."""
    tensors = (params.query, params.key, params.value)
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _should_compute_logsumexp(params: Params) -> bool:
    """``should_compute_logsumexp``: the fused kernels keep their log-sum-exp for backward."""
    return _input_requires_grad(params)


def _nonzero_sequence_lengths(params: Params) -> bool:
    """``check_nonzero_sequence_lengths_dense``."""
    return bool(params.query.shape[-2] != 0 and params.key.shape[-2] != 0)


def _last_dim_stride_1(params: Params, *, ignore_singleton_dim: bool) -> bool:
    """``check_last_dim_stride_equals_1_dense`` (a mask's last stride counts on the GPU)."""
    strides = all(t.stride(-1) == 1 for t in (params.query, params.key, params.value))
    if ignore_singleton_dim:
        strides = strides or params.query.shape[-1] == 1
    mask = params.attn_mask
    return strides and (mask is None or mask.stride(-1) == 1)


def _batch_and_heads(params: Params, *, supports_gqa: bool, requires_same_num_heads: bool) -> bool:
    """``check_batch_size_and_num_heads_dense`` with ``check_grouped_query_attention``."""
    q, k, v = params.query, params.key, params.value
    if not q.shape[0] == k.shape[0] == v.shape[0]:
        return False
    heads_q, heads_k, heads_v = q.shape[-3], k.shape[-3], v.shape[-3]
    if params.enable_gqa and supports_gqa:
        if requires_same_num_heads and heads_k != heads_v:
            return False
        return heads_q % heads_k == 0 and (requires_same_num_heads or heads_q % heads_v == 0)
    return bool(heads_q == heads_k == heads_v)


def _attn_mask_shape(params: Params) -> bool:
    """``check_attn_mask_shape``: a mask cuDNN can take as a bias."""
    mask = params.attn_mask
    if mask is None:
        return True
    if mask.requires_grad:
        return False
    q = params.query
    if mask.shape[-2] not in (q.shape[2], 1) or mask.shape[-1] not in (params.key.shape[2], 1):
        return False
    if mask.dim() == 2:
        return True
    return mask.dim() == 4 and mask.shape[0] in (1, q.shape[0]) and mask.shape[1] in (1, q.shape[1])


def _cudnn_head_dims(params: Params) -> bool:
    """``check_cudnn_tensor_shapes``'s head sizes at the build's cuDNN version: up to 128, or
    192 for queries and keys with 128 for values on 9.0 and 10.x; multiples of 8."""
    d_qk, d_v = params.query.shape[3], params.value.shape[3]
    major, minor = params.capability
    sm90_or_sm10x = (major == 9 and minor == 0) or major == 10
    limit = 128
    if sm90_or_sm10x and (build.facts().cudnn or 0) >= 91100 and d_qk == 192 and d_v == 128:
        limit = 192
    return bool(d_qk <= limit and d_v <= limit and d_qk % 8 == 0 and d_v % 8 == 0)


def _boolean_mask_to_bias(
    mask: torch.Tensor | None, dtype: torch.dtype, fill: float
) -> torch.Tensor | None:
    """``convert_boolean_attn_mask`` (``fill`` -inf) and its cuDNN variant (-65504): a boolean
    mask becomes an additive bias of the query's dtype, as the installed torch makes it (two
    0-dim fills and a ``where``)."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    masked = torch.scalar_tensor(fill, dtype=dtype, device=mask.device)
    kept = torch.scalar_tensor(0.0, dtype=dtype, device=mask.device)
    return torch.where(mask, kept, masked)


def _math(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
) -> torch.Tensor:
    """``_scaled_dot_product_attention_math`` as CUDA runs it. The CPU build runs the same
    composite on ``meta``, with two differences in bytes that this re-making removes: under a
    dispatch mode torch takes every tensor for a subclass and adds the mask out of place (a
    second scores tensor), and ``_safe_softmax``'s CUDA kernel is its composite (softmax, the
    -inf test, its row reduction and a ``where``), whose temporaries ``meta`` never makes.

    Half inputs are upcast to float32 unless ``allow_fp16_bf16_reduction_math_sdp(True)``;
    the inputs' upcasts, the scaled query and the expanded keys and values live until the
    function returns, as the C++ locals do."""
    origin = query.dtype
    upcast = not torch._C._get_math_sdp_allow_fp16_bf16_reduction()

    def accumulated(tensor: torch.Tensor) -> torch.Tensor:
        half = tensor.dtype in (torch.float16, torch.bfloat16)
        return tensor.to(torch.float32) if upcast and half else tensor

    query_acc, key_acc, value_acc = accumulated(query), accumulated(key), accumulated(value)
    negative = scale is not None and scale < 0
    factor = math.sqrt(abs(scale) if scale is not None else 1.0 / math.sqrt(query.shape[-1]))
    scaled = query_acc * (-factor if negative else factor)
    if is_causal:
        causal = torch.ones(
            scaled.shape[-2], key_acc.shape[-2], dtype=torch.bool, device=query.device
        ).tril()
        mask = _boolean_mask_to_bias(causal, scaled.dtype, float("-inf"))
        del causal
    keys, values = key_acc, value_acc
    heads = scaled.shape[-3] if scaled.dim() >= 3 else 1
    if enable_gqa and not heads == key_acc.shape[-3] == value_acc.shape[-3]:
        keys = key_acc.repeat_interleave(heads // key_acc.shape[-3], -3)
        values = value_acc.repeat_interleave(heads // value_acc.shape[-3], -3)
    attn = torch.matmul(scaled, keys.transpose(-2, -1) * factor)
    if mask is not None:
        attn.add_(mask)
    attn = _safe_softmax(attn)
    if dropout_p > 0.0:
        attn = torch.dropout(attn, dropout_p, True)
    weights = attn.to(origin)  # make_tuple's second argument is evaluated first
    out = torch.matmul(attn, values).to(origin)
    del weights
    return out


def _safe_softmax(scores: torch.Tensor) -> torch.Tensor:
    """``_safe_softmax`` over the last dimension, with the temporaries its CUDA kernel makes
    before its result and frees after it: the softmax, a -inf fill, the -inf test, its
    reduction over each row, and a zero fill."""
    with torch.no_grad():
        soft = torch.softmax(scores, -1)
        neg_inf = torch.scalar_tensor(float("-inf"), dtype=soft.dtype, device=soft.device)
        masked = scores.eq(neg_inf)
        rows = masked.all(-1, keepdim=True)
        zero = torch.scalar_tensor(0.0, dtype=soft.dtype, device=soft.device)
    result: torch.Tensor = torch.ops.aten._safe_softmax(scores, -1)
    del zero, rows, masked, neg_inf, soft
    return result


def _pad_last_dim(tensor: torch.Tensor, alignment: int) -> torch.Tensor:
    """``pad_last_dim<alignment, false>``: flash attention's head size padded to a multiple."""
    size = tensor.shape[-1]
    if size % alignment == 0:
        return tensor
    return F.pad(tensor, (0, alignment - size % alignment))


def _preprocess_mask(mask: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """``preprocess_mask``: memory-efficient attention's bias, padded (then sliced back) where
    its strides are not multiples of 8, expanded to B·H·L·S."""
    aligned = all(s % 8 == 0 for s in mask.stride()[:-1]) and mask.stride(-1) == 1
    if not aligned:
        size = mask.shape[-1]
        mask = F.pad(mask, (0, 8 - size % 8))[..., :size]
    return mask.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])


def asked_of_the_build(
    capability: tuple[int, int],
    check: Callable[[Params, dict[Backend, bool]], bool],
    own: Callable[[Any, bool], bool],
) -> Callable[..., bool]:
    """``torch._C._can_use_*_attention(params, debug)`` (behind ``torch.backends.cuda``'s
    ``can_use_*``), which torch's Python asks to choose a jagged nested tensor's kernel: for
    stand-ins (a ``meta`` query) ``check`` at the planned capability, as a CUDA build answers
    of CUDA tensors; torch's own answer for any other."""

    def can_use(params: Any, debug: bool = False) -> bool:
        if not params.query.is_meta:
            return bool(own(params, debug))
        asked = Params(
            params.query, params.key, params.value, params.attn_mask, params.dropout,
            params.is_causal, params.enable_gqa, capability,
        )  # fmt: skip
        return check(asked, _enabled())

    return can_use


NESTED_SDPA = "torch.nested._internal.sdpa"


def no_meta_flops(ghost: Callable[[torch.Tensor], bool]) -> Callable[[Any], Any]:
    """``_is_computing_meta_flops`` of torch's nested attention, which asks whether a ``meta``
    query is being counted by a ``FlopCounterMode``: for a stand-in, no, as for the CUDA tensor
    it stands for (the question reads ``torch.utils.flop_counter``, unimported until a script
    imports it, and a yes would put flash attention before the planned device's choice). The
    script's own ``meta`` tensors (``ghost``) get torch's answer."""

    def stand_in(original: Callable[[Any], bool]) -> Callable[[Any], bool]:
        def is_computing_meta_flops(query: Any) -> bool:
            values = getattr(query, "_values", query)
            if isinstance(values, torch.Tensor) and values.is_meta and not ghost(values):
                return False
            return bool(original(query))

        return is_computing_meta_flops

    return stand_in
