"""Scratch memory CUDA's libraries take through PyTorch's caching allocator, which the CPU build
never asks for: cuBLAS's and cuBLASLt's workspaces, by the rules of the installed torch; a
reduction's staging buffer; the sizes of attention kernels' own scratch and of ``_foreach_norm``'s
partial norms (taken by :mod:`~memforensics.plan.kernel_scratch`).

Each rule reads beside the PyTorch source it mirrors; docs/plan.md quotes the lines.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import NamedTuple

MiB = 1 << 20

WORKSPACE_ENV = "CUBLAS_WORKSPACE_CONFIG"
_SMALL_WORKSPACE = 4096 * 1024 * 2 + 16 * 1024 * 8
"""``:4096:2:16:8``: 8,519,680 B, cuBLAS's default where torch does not choose 32 MiB."""
_LARGE_WORKSPACE = 4096 * 8 * 1024
"""``:4096:8``: 32 MiB."""
_PAIRS = re.compile(r":([0-9]+):([0-9]+)")
_BLACKWELL_FROM = (2, 12)
"""The first torch whose default gives Blackwell (10.x, 12.x) the 32 MiB Hopper has; torch
2.11 on a B200 and an RTX 50-series took 8,519,680 B."""


def torch_release(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a torch version string (``"2.13.0+cpu"`` → ``(2, 13)``)."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None:
        raise ValueError(f"not a torch version: {version!r}")
    return int(found.group(1)), int(found.group(2))


def default_workspace_bytes(capability: tuple[int, int], release: tuple[int, int]) -> int:
    """cuBLAS's workspace with no ``CUBLAS_WORKSPACE_CONFIG``: ``parseChosenWorkspaceSize``'s
    default, 32 MiB for Hopper (and, from torch 2.12, Blackwell: majors 10 and 12), else
    ``:4096:2:16:8``."""
    major = capability[0]
    large = (9, 10, 12) if release >= _BLACKWELL_FROM else (9,)
    return _LARGE_WORKSPACE if major in large else _SMALL_WORKSPACE


def cublas_workspace_bytes(
    capability: tuple[int, int], config: str | None, release: tuple[int, int]
) -> int:
    """cuBLAS's workspace for one handle and stream (``getChosenWorkspaceSize``):
    ``CUBLAS_WORKSPACE_CONFIG``'s ``:KiB:count`` pairs summed, else (unset, or nothing in it
    parses) the default for the capability under torch ``release``."""
    pairs = _PAIRS.findall(config) if config else []
    if not pairs:
        return default_workspace_bytes(capability, release)
    return sum(int(kib) * 1024 * int(count) for kib, count in pairs)


def workspace_bytes_for(capability: tuple[int, int]) -> int:
    """The workspace the planned device's cuBLAS takes per thread: the installed torch's rule,
    the environment included."""
    import torch

    release = torch_release(torch.__version__)
    return cublas_workspace_bytes(capability, os.environ.get(WORKSPACE_ENV), release)


WORKSPACE_FRAMES = (
    ("??", 0, "at::cuda::getNewWorkspace()"),
    ("??", 0, "at::cuda::getCurrentCUDABlasHandle()"),
)
"""The native frames under which a GPU's trace records cuBLAS's workspace, innermost first (as
the real ``cuda-transformer-forward`` snapshot shows them): what tells the block apart where
the product that first took it is a constructor's or a loader's line."""

# -- cuBLASLt's workspace (gemm_and_bias, scaled_gemm in aten/src/ATen/cuda/CUDABlas.cpp)

LT_UNIFIED_ENV = "TORCH_CUBLASLT_UNIFIED_WORKSPACE"
LT_SIZE_ENV = "CUBLASLT_WORKSPACE_SIZE"
_LT_DEFAULT_KIB = 1024
"""``parseCUDABlasLtWorkspaceSize``'s CUDA default (1 MiB, for every capability)."""
LT_WORKSPACE_FRAMES = (("??", 0, "at::cuda::getCUDABlasLtWorkspace()"),)
"""The native frame under which a GPU's trace records cuBLASLt's kept workspace (as the real
``cuda-mha-lm-inference-from-empty`` snapshot shows it)."""
_LT_KEPT_FROM = (2, 9)
"""The first torch that keeps cuBLASLt's workspace per handle and stream
(``getCUDABlasLtWorkspace``); before it, each call allocated its own and freed it."""
_LT_OPT_IN_FROM = (2, 8)
"""The first torch that reads ``TORCH_CUBLASLT_UNIFIED_WORKSPACE`` (``=1`` to share)."""
_LT_SIZE_UNIFIED_FROM = (2, 11)
"""The first torch whose size rule shares by default (unset counts as on) while the workspace
itself is still shared only with ``=1``: a separate block, capped at cuBLAS's size."""
_LT_UNIFIED_FROM = (2, 12)
"""The first torch that shares cuBLAS's workspace unless the variable is ``0``."""
_RESET_CLEARS_FROM = (2, 12)
"""The first torch whose ``CUDAGraph::reset`` clears its capture stream's cuBLAS and cuBLASLt
workspaces (``clearCublasWorkspacesForStream``, pytorch/pytorch#175276, landed after 2.11's
branch cut) before releasing the graph's pool."""


def graph_reset_clears_workspaces() -> bool:
    """Whether the installed torch frees a graph's capture-stream workspaces at its reset, so
    that they no longer hold the graph's private pool."""
    import torch

    return torch_release(torch.__version__) >= _RESET_CLEARS_FROM


class LtWorkspace(NamedTuple):
    """cuBLASLt's own workspace: its bytes, and whether it is kept per handle and stream (else
    allocated and freed around each call that reaches cuBLASLt)."""

    nbytes: int
    kept: bool


def _flag(value: str | None) -> bool | None:
    """``c10::utils::check_env``: ``"1"`` on, ``"0"`` off, anything else (or unset) unset."""
    return {"1": True, "0": False}.get(value) if value is not None else None


def _lt_size(value: str | None) -> int:
    """``CUBLASLT_WORKSPACE_SIZE`` in KiB (``std::stoi``: its leading integer), else 1 MiB."""
    found = re.match(r"\s*([+-]?\d+)", value) if value else None
    return (int(found.group(1)) if found else _LT_DEFAULT_KIB) * 1024


def cublaslt_workspace(
    capability: tuple[int, int], env: Mapping[str, str], release: tuple[int, int]
) -> LtWorkspace | None:
    """What cuBLASLt takes beyond cuBLAS's workspace under torch ``release`` with ``env``;
    None where it shares cuBLAS's (``TORCH_CUBLASLT_UNIFIED_WORKSPACE``) and so takes
    nothing more."""
    flag = _flag(env.get(LT_UNIFIED_ENV))
    size = _lt_size(env.get(LT_SIZE_ENV))
    if release >= _LT_UNIFIED_FROM:
        return None if flag is not False else LtWorkspace(size, kept=True)
    if release >= _LT_OPT_IN_FROM and flag is True:
        return None
    if release >= _LT_SIZE_UNIFIED_FROM and flag is None:
        cublas = cublas_workspace_bytes(capability, env.get(WORKSPACE_ENV), release)
        return LtWorkspace(min(size, cublas), kept=True)
    return LtWorkspace(size, kept=release >= _LT_KEPT_FROM)


def lt_workspace_for(capability: tuple[int, int]) -> LtWorkspace | None:
    """cuBLASLt's own workspace on the planned device: the installed torch's rule, the
    environment included."""
    import torch

    return cublaslt_workspace(capability, os.environ, torch_release(torch.__version__))


# -- reductions' staging buffers (aten/src/ATen/native/cuda/Reduce.cuh)

_WARP = 32
_MIN_VALUES_PER_THREAD = 16
_MAX_VALUES_PER_THREAD = 256
_THREADS_PER_SM = {(7, 5): 1024, (8, 6): 1536, (8, 7): 1536, (8, 9): 1536, (12, 0): 1536}
"""``maxThreadsPerMultiProcessor`` where it is not 2,048."""
_MULTIPROCESSORS = {(7, 0): 80, (7, 5): 40, (8, 0): 108, (8, 6): 84, (8, 9): 142, (9, 0): 132,
                    (10, 0): 148, (12, 0): 170}  # fmt: skip
"""``multiProcessorCount`` of the datacenter part of each capability (V100, T4, A100, A40,
L40S, H100, B200, RTX 5090); 132 for one not listed."""


def multiprocessors(capability: tuple[int, int]) -> int:
    """``multiProcessorCount`` of the planned device: the datacenter part's of its capability."""
    return _MULTIPROCESSORS.get(capability, 132)


def threads_per_multiprocessor(capability: tuple[int, int]) -> int:
    """``maxThreadsPerMultiProcessor`` of the planned device's capability."""
    return _THREADS_PER_SM.get(capability, 2048)


def _last_pow2(n: int) -> int:
    """``last_pow2``: the largest power of two not above ``n`` (at least 1)."""
    return max(1, 1 << (max(n, 1).bit_length() - 1))


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def staging_bytes(
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    reduced: frozenset[int],
    acc_bytes: int,
    offset: int,
    capability: tuple[int, int],
    *,
    input_vec: int = 4,
) -> tuple[int, int] | None:
    """``(buffer, semaphores)`` bytes that ``gpu_reduce_kernel`` allocates when it splits one
    reduction across thread blocks (``config.should_global_reduce()``), or None when it does not.

    ``shape``/``strides`` (in elements) are the input's, ``reduced`` the dimensions reduced,
    ``acc_bytes`` the accumulator's size (``arg_t``), ``offset`` the input's storage offset in
    elements, ``input_vec`` the kernel's ``input_vec_size`` (its ``vt0`` does not enter torch
    2.13's rule, which vectorises along the input from 128 values per output whatever ``vt0``
    is). Mirrors ``setReduceConfig`` after TensorIterator has put the reduced dimensions first
    and coalesced the rest. The operators and their template arguments are
    :data:`memforensics.plan.reductions.TABLE`'s.
    """
    dims = _iterator_dims(shape, strides, reduced)
    numel = math.prod(shape)
    if numel == 0:
        return None  # no kernel: an empty reduction fills its output (``sum_out``'s zero_)
    if not dims or numel >= 1 << 31:
        return None  # one value, or split into 32-bit sub-iterators (not modelled)
    num_reduce = sum(1 for _, _, is_reduced in dims if is_reduced)
    num_outputs = math.prod(size for size, _, is_reduced in dims if not is_reduced)
    inputs_per_output = numel // num_outputs
    on_fastest = num_reduce == len(dims) or dims[0][1] < dims[num_reduce][1]
    if on_fastest:
        orientation = (True, inputs_per_output, num_outputs, dims[0][1])
    else:
        orientation = (False, num_outputs, inputs_per_output, dims[num_reduce][1])
    width, height, output_vec = _block_shape(dims, num_reduce, orientation, offset, input_vec)
    threads = width * height
    step_input, step_output = (width, 1) if on_fastest else (1, width)
    split_y = False
    if _div_up(inputs_per_output, step_input) >= height * _MIN_VALUES_PER_THREAD or (
        _div_up(inputs_per_output, step_input) >= _MAX_VALUES_PER_THREAD
    ):
        step_input *= height
        split_y = True
    else:
        step_output *= height
    per_sm = threads_per_multiprocessor(capability) // threads
    target = multiprocessors(capability) * per_sm
    grid = _div_up(num_outputs // output_vec, step_output)
    values = _div_up(inputs_per_output, step_input)
    if not (split_y and values >= _MAX_VALUES_PER_THREAD and grid <= target):
        return None
    ctas = max(
        min(_div_up(target, grid), _div_up(values, _MIN_VALUES_PER_THREAD)),
        _div_up(values, _MAX_VALUES_PER_THREAD),
    )
    if ctas <= 1:
        return None
    buffer = acc_bytes * num_outputs * ctas
    if not on_fastest:  # no reduction across a block's lanes: one value per lane staged
        buffer *= width * output_vec
    return buffer, 4 * grid


def _block_shape(
    dims: list[tuple[int, int, bool]],
    num_reduce: int,
    orientation: tuple[bool, int, int, int],
    offset: int,
    input_vec: int,
) -> tuple[int, int, int]:
    """``(block_width, block_height, output_vec_size)``: the vectorisation ``setReduceConfig``
    picks, then ``set_block_dimension``."""
    on_fastest, dim0, dim1, fastest = orientation
    output_vec = 1
    if fastest == 1:
        if on_fastest and dim0 >= 128 and num_reduce == 1:
            dim0 //= input_vec
        elif not on_fastest:
            output_vec = _output_vec_size(dims, num_reduce, offset)
            dim0 //= output_vec
    max_threads = 512 // output_vec
    dim0_pow2 = _last_pow2(dim0) if dim0 < max_threads else max_threads
    dim1_pow2 = _last_pow2(dim1) if dim1 < max_threads else max_threads
    width = min(dim0_pow2, _WARP)
    height = min(dim1_pow2, max_threads // width)
    width = min(dim0_pow2, max_threads // height)
    return width, height, output_vec


def _iterator_dims(
    shape: tuple[int, ...], strides: tuple[int, ...], reduced: frozenset[int]
) -> list[tuple[int, int, bool]]:
    """``(size, stride, reduced)`` per dimension, fastest first, as TensorIterator orders a
    reduction's (``reorder_dimensions``: reduced dimensions first, then by the input's stride)
    and coalesces them (``coalesce_dimensions``: neighbours of one kind whose strides chain)."""
    dims = [
        (size, stride, d in reduced)
        for d, (size, stride) in enumerate(zip(shape, strides, strict=True))
        if size != 1
    ]
    dims.sort(key=lambda dim: (not dim[2], dim[1]))
    merged: list[tuple[int, int, bool]] = []
    for size, stride, is_reduced in dims:
        if merged:
            last_size, last_stride, last_reduced = merged[-1]
            if last_reduced == is_reduced and stride == last_stride * last_size:
                merged[-1] = (last_size * size, last_stride, last_reduced)
                continue
        merged.append((size, stride, is_reduced))
    return merged


def _output_vec_size(dims: list[tuple[int, int, bool]], num_reduce: int, offset: int) -> int:
    """``get_output_vec_size``: 4, halved until the input's start, the first output
    dimension's size and every other dimension's stride divide by it."""
    vec = 4
    checks = [offset, dims[num_reduce][0]]
    checks += [stride for i, (_, stride, _) in enumerate(dims) if i != num_reduce]
    for value in checks:
        while value % vec:
            vec //= 2
    return vec


# -- _foreach_norm's partial norms (aten/src/ATen/native/cuda/ForeachReduceOp.cu)

FOREACH_CHUNK = 65536
"""``kChunkSize`` of ``MultiTensorApply.cuh``: the elements one block of a foreach kernel takes."""


def foreach_norm_partials(numels: list[int], opmath_bytes: int) -> int:
    """Bytes of ``output_per_tensor``, which ``foreach_tensor_norm_cuda`` zeroes before its
    outputs and frees as it returns: one value (``opmath``: float32 for 16-bit outputs) per
    chunk of :data:`FOREACH_CHUNK` elements, every tensor given as many chunks as the largest."""
    chunks = max((_div_up(n, FOREACH_CHUNK) for n in numels), default=0)
    return len(numels) * chunks * opmath_bytes


# -- cuDNN attention's workspaces (aten/src/ATen/native/cudnn/MHA.cpp)

CUDNN_ATTENTION_FORWARD_WORKSPACE = 256
"""What ``run_cudnn_SDP_fprop`` takes through the caching allocator for cuDNN's graph and
frees as it returns, after the output and the log-sum-exp: 256 B on an H200 (torch 2.11, cuDNN
9.19) for each of nine shapes measured, causal or not, grouped heads or not."""


def cudnn_attention_backward_workspace(
    query: tuple[int, ...], key: tuple[int, ...], value: tuple[int, ...], itemsize: int
) -> int:
    """What ``run_cudnn_SDP_bprop`` takes for cuDNN's graph, after the three gradients, and
    frees as it returns: the query's gradient accumulated in float32 and one float32 per query
    row (``4·B·Hq·Sq·(D+1)``), then, where keys and values have fewer heads than the query, their
    gradients per query head (``B·Hq·Sk·(Dk+Dv)·itemsize``), and 256 B. On an H200 (torch 2.11,
    cuDNN 9.19), exact for nine shapes: 8 x 12 x 1024 x 64 causal (25,559,296 B), lengths of 777
    and 1,000, a 512-long query over 1,024 keys, head sizes 32 to 128, 16 query heads over 4."""
    batch, heads, rows, dim = query
    _, kv_heads, keys, key_dim = key
    workspace = 4 * batch * heads * rows * (dim + 1) + CUDNN_ATTENTION_FORWARD_WORKSPACE
    if kv_heads != heads:
        workspace += batch * heads * keys * (key_dim + value[-1]) * itemsize
    return workspace


# -- FlashAttention-2's backward (aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp)


def _round_up(value: int, multiple: int) -> int:
    return _div_up(value, multiple) * multiple


def flash_backward_scratch(
    query: tuple[int, ...],
    key: tuple[int, ...],
    value: tuple[int, ...],
    itemsize: int,
    splits: int = 0,
) -> tuple[list[int], list[int]]:
    """What ``mha_bwd`` takes after the three gradients, in order, on dense (batch, heads,
    length, head) inputs: the row sums ``softmax_d`` (float32, ``B·Hq·Sq₁₂₈``) and the query
    gradient's float32 accumulator (``B·Sq₁₂₈·Hq·D₃₂``, lengths rounded up to 128 and head sizes
    to 32, 256 above 192; ``splits`` copies of it when the algorithms must be deterministic);
    then, where keys and values have fewer heads than the query, their gradients per query head,
    summed into the real ones and freed first. On an H200 (torch 2.11), exact for lengths 512 to
    1,024 with 777 and 1,000, head sizes 32 to 128, 16 query heads over 4."""
    batch, heads, rows, dim = query
    _, kv_heads, keys, key_dim = key
    rows_rounded = _round_up(rows, 128)
    dim_rounded = _round_up(dim, 32) if dim <= 192 else 256
    accumulator = batch * rows_rounded * heads * dim_rounded * 4
    kept = [batch * heads * rows_rounded * 4, accumulator * max(splits, 1)]
    expanded = []
    if kv_heads != heads:
        expanded = [batch * keys * heads * d * itemsize for d in (key_dim, value[-1])]
    return kept, expanded


def deterministic_splits(capability: tuple[int, int], batch: int, heads: int) -> int:
    """``nsplits`` of a deterministic ``mha_bwd``: the SMs spread over batch and heads."""
    return _div_up(multiprocessors(capability), batch * heads)


# -- memory-efficient attention's backward (transformers/cuda/attention_backward.cu)


class EfficientScratch(NamedTuple):
    """What ``_efficient_attention_backward`` takes beside the gradients: the temporaries that
    compute the row sums where the kernel does not (float32 inputs: ``grad_out * out`` and
    its sum, freed once the sums are copied), the row sums ``delta``, and the workspace."""

    delta_from: tuple[int, ...]
    delta: int
    workspace: int


def efficient_backward_scratch(
    query: tuple[int, ...], key: tuple[int, ...], value: tuple[int, ...], itemsize: int
) -> EfficientScratch:
    """The backward's scratch: the row sums (float32, ``B·H·Sq``), computed in the kernel for
    half inputs and by ``(grad_out.float() * out.float()).sum(-1).transpose(-2, -1)
    .contiguous()`` for float32 ones, and the workspace.

    For heads of up to 128 the workspace is the query gradient's float32 accumulator over query
    blocks (``4·B·H·Sq_I·D_J``: the length rounded up to the query block ``I``, the head size to
    ``J``, 64 and 64 for heads up to 64, 128 and 128 above) and, per query block of each batch
    and head, 16 B (32 B for float32 heads above 64). On an H200 (torch 2.11), exact for
    thirteen shapes: lengths 256 to 4,096 with 300, 777 and 1,000, a query over twice as many
    keys, head sizes 32 to 128, bf16, fp16 and float32. Above 128 it is
    :func:`_efficient_wide_workspace`'s."""
    batch, heads, rows, dim = query
    if max(dim, value[-1]) > 128:
        workspace = _efficient_wide_workspace(query, key[2], value[-1], itemsize)
    else:
        block = 64 if dim <= 64 else 128
        rows_rounded = _round_up(rows, block)
        per_block = 32 if itemsize == 4 and dim > 64 else 16
        workspace = 4 * batch * heads * rows_rounded * _round_up(dim, block)
        workspace += per_block * batch * heads * (rows_rounded // block)
    sums = batch * heads * rows * 4
    delta_from = (batch * heads * rows * dim * 4, sums) if itemsize == 4 else ()
    return EfficientScratch(delta_from, sums, workspace)


_WIDE_QUERY_BLOCK = 128
"""The query block (``kBlockSizeI``) of the backward kernel for heads above 128."""
_WIDE_KEY_BLOCK = 64
"""Its key block (``kBlockSizeJ``), and the columns of its query-gradient tiles."""
_SPLIT_KEYS_BUDGET = 200
"""``attention_backward.cu`` splits the keys of each batch and head into at most this many
blocks over all batches and heads where the key and value gradients need staging."""


def _efficient_wide_workspace(query: tuple[int, ...], keys: int, dim_v: int, itemsize: int) -> int:
    """The backward's workspace for heads above 128 (``AttentionBackwardKernel::
    workspace_size``), in float32 per batch and head, aligned to 4: the query gradient's tiles
    (``ceil(Sq/128)·ceil(D/64)`` of 128 x 64 values and a 16-byte counter each) and, for half
    inputs, the key and value gradients staged per split of the keys (``splits·64·D₁₂₈`` each,
    ``D₁₂₈`` the head size rounded up to 128); the splits are ``ceil(Sk/64)``, one where the
    batches and heads number 256 or more and the keys at most 128, and at most
    ``200 / (B·H)``. On an H200 (torch 2.11), exact for eight shapes: heads of 136 to 256,
    lengths 256 to 2,048 with 300, 777 and 1,000, a query over twice as many keys, 4 to 96
    batches x heads, bf16, fp16 and float32."""
    batch, heads, rows, dim = query
    tiles = _div_up(rows, _WIDE_QUERY_BLOCK) * _div_up(dim, _WIDE_KEY_BLOCK)
    per_head = tiles * (_WIDE_QUERY_BLOCK * _WIDE_KEY_BLOCK + 4)
    if itemsize != 4:  # the kernel's output is not its float32 accumulator: gK and gV staged
        splits = _div_up(keys, _WIDE_KEY_BLOCK)
        if batch * heads >= 256 and keys <= 2 * _WIDE_KEY_BLOCK:
            splits = 1
        splits = max(min(splits, _SPLIT_KEYS_BUDGET // (batch * heads)), 1)
        per_head += sum(
            splits * _WIDE_KEY_BLOCK * _round_up(d, _WIDE_QUERY_BLOCK) for d in (dim, dim_v)
        )
    return 4 * batch * heads * _round_up(per_head, 4)


def efficient_forward_accumulator(query: tuple[int, ...], dim_v: int, itemsize: int) -> int:
    """The float32 buffer ``_efficient_attention_forward`` takes after its output and row
    log-sum-exps and frees as it returns, where the kernel cannot keep the output in registers
    (heads above 128: ``kNeedsOutputAccumulatorBuffer``) and the output is not float32: the
    output's shape (``B·Sq·H·Dv``) in float32; 0 otherwise. On an H200 (torch 2.11), for six
    shapes with heads of 136 to 256 in bf16 and fp16, and none in float32."""
    batch, heads, rows, dim = query
    if itemsize == 4 or max(dim, dim_v) <= 128:
        return 0
    return batch * rows * heads * dim_v * 4
