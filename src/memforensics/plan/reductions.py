"""The ATen reductions CUDA runs through ``gpu_reduce_kernel`` (``aten/src/ATen/native/cuda/
Reduce.cuh``), and what each allocates through the caching allocator beside its outputs.

Each operator's row holds the template arguments that size the staging buffer the kernel takes
when it splits one output across thread blocks (:func:`~memforensics.plan.scratch.
staging_bytes`): the accumulator's size (``sizeof(arg_t)``) and ``input_vec_size``. Rows also
say where the reduced dimensions are and which copy of its input the operator reduces where it
cannot read the input as it lies: the input cast to the output's dtype (``make_reduction_from_
out_ty``'s ``self.to(in_dtype)``), or, for a reduction over every element, the input made
contiguous (``max()``'s ``self.contiguous()``, ``argmax``'s ``self.reshape({-1})``). The copy is
made after the outputs and freed after the staging buffer (the iterator holding it dies as the
function returns). The kernel sources are those of the installed torch (2.13); docs/plan.md
quotes the lines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from memforensics.plan import scratch

_HALVES = (torch.float16, torch.bfloat16)


def _opmath(read: torch.dtype, out: torch.dtype) -> int:
    """``acc_t`` of the arithmetic reductions (``sum_functor``, ``MeanOps``, ``NanSumOps``,
    ``NormTwoOps`` and the other norms, ``prod``'s jitted ``opmath_type``): float32 for 16-bit
    floating outputs (``reduce_dispatch``), else the output's type (a complex input's norm is
    real: ``scalar_value_type``)."""
    return 4 if out in _HALVES else out.itemsize


def _welford(read: torch.dtype, out: torch.dtype) -> int:
    """``WelfordData<acc_type<scalar_t, true>, int32_t>`` (``std_var_kernel_impl``): mean, m2,
    n and nf, 16 B in float32, 32 B in float64 (the int32 padded)."""
    return 32 if out == torch.float64 else 16


def _element(read: torch.dtype, out: torch.dtype) -> int:
    """``func_wrapper<acc_t>(MaxNanFunctor<acc_t>)`` with ``acc_t = scalar_t``
    (``max_values_kernel_cuda_impl`` and its ``min`` twin): the input's own type."""
    return int(read.itemsize)


def _indexed(read: torch.dtype, out: torch.dtype) -> int:
    """``detail::pair<scalar_t, int64_t>`` (``MaxOps``, ``MinOps``, ``ArgMaxOps``,
    ``ArgMinOps``; 16-bit inputs compared as float): a value beside its int64 index, 16 B."""
    return 16


def _bounds(read: torch.dtype, out: torch.dtype) -> int:
    """``pair<scalar_t, scalar_t>`` (``MinMaxOps``, ``_min_max_values_kernel_cuda_impl``):
    the minimum and the maximum, each of the input's type."""
    return 2 * int(read.itemsize)


def _flag(read: torch.dtype, out: torch.dtype) -> int:
    """``func_wrapper<bool>`` (``and_kernel_cuda``, ``or_kernel_cuda``): one bool."""
    return 1


def _summed(read: torch.dtype) -> int:
    """``sum_functor``'s ``input_vec_size``: 8 where the input read is 16 bits wide, else
    ``vt0`` (4)."""
    return 8 if read.itemsize == 2 else 4


def _four(read: torch.dtype) -> int:
    """``input_vec_size`` left at ``vt0``'s default, 4."""
    return 4


def _two(read: torch.dtype) -> int:
    """Welford's ``vt0 = 2`` (``std_var_kernel_impl``: fewer registers), which
    ``input_vec_size`` defaults to."""
    return 2


class Reduction(NamedTuple):
    """One operator's row: ``accumulator(read, out)`` is ``sizeof(arg_t)`` for the dtype the
    kernel reads and the output's, ``input_vec(read)`` its ``input_vec_size``; ``dims`` the
    position and keyword of the reduced dimensions (None: every dimension); ``casts`` whether
    it reads the input cast to the output's dtype; ``flat`` whether, reducing every element,
    it reads the input made contiguous."""

    accumulator: Callable[[torch.dtype, torch.dtype], int]
    input_vec: Callable[[torch.dtype], int]
    dims: tuple[int, str] | None
    casts: bool = False
    flat: bool = False


_A = torch.ops.aten
_DIM = (1, "dim")
_SUM = Reduction(_opmath, _summed, None, casts=True)
_ARITHMETIC = Reduction(_opmath, _four, _DIM, casts=True)
_WELFORD = Reduction(_welford, _two, _DIM)
_INDEXED = Reduction(_indexed, _four, _DIM)
_EXTREME = Reduction(_element, _four, _DIM)
_LOGIC = Reduction(_flag, _four, _DIM)

TABLE: dict[Any, Reduction] = {
    _A.sum.default: _SUM,
    _A.sum.dim_IntList: _SUM._replace(dims=_DIM),
    _A.sum.IntList_out: _SUM._replace(dims=_DIM),
    _A.nansum.default: _ARITHMETIC,
    _A.mean.default: _ARITHMETIC._replace(dims=None),
    _A.mean.dim: _ARITHMETIC,
    _A.mean.out: _ARITHMETIC,
    _A.prod.default: _ARITHMETIC._replace(dims=None),
    _A.prod.dim_int: _ARITHMETIC,
    _A.linalg_vector_norm.default: _ARITHMETIC._replace(dims=(2, "dim")),
    _A.norm.Scalar: _ARITHMETIC._replace(dims=None),
    _A.norm.ScalarOpt_dim: _ARITHMETIC._replace(dims=(2, "dim")),
    _A.norm.ScalarOpt_dtype: _ARITHMETIC._replace(dims=None),
    _A.norm.ScalarOpt_dim_dtype: _ARITHMETIC._replace(dims=(2, "dim")),
    _A.var.correction: _WELFORD,
    _A.std.correction: _WELFORD,
    _A.var_mean.correction: _WELFORD,
    _A.std_mean.correction: _WELFORD,
    _A.amax.default: _EXTREME,
    _A.amin.default: _EXTREME,
    _A.max.default: _EXTREME._replace(dims=None, flat=True),
    _A.min.default: _EXTREME._replace(dims=None, flat=True),
    _A.max.dim: _INDEXED,
    _A.min.dim: _INDEXED,
    _A.argmax.default: _INDEXED._replace(flat=True),
    _A.argmin.default: _INDEXED._replace(flat=True),
    _A.aminmax.default: Reduction(_bounds, _four, (-1, "dim"), flat=True),
    _A.any.default: _LOGIC._replace(dims=None),
    _A.any.dim: _LOGIC,
    _A.any.dims: _LOGIC,
    _A.all.default: _LOGIC._replace(dims=None),
    _A.all.dim: _LOGIC,
    _A.all.dims: _LOGIC,
}
"""Reductions scripts call that CUDA runs through ``gpu_reduce_kernel`` (``logsumexp`` is run
as its ``amax`` and ``sum``: :mod:`~memforensics.plan.logsumexp`)."""


class Staged(NamedTuple):
    """What a reduction allocates beside its outputs: the bytes of the copy of its input it
    reads (0 where it reads the input), and the staging buffer and semaphores, if it splits."""

    copy: int
    staging: tuple[int, int] | None


def _reduced(row: Reduction, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The operator's dimensions argument, None where it reduces every dimension."""
    if row.dims is None:
        return None
    position, name = row.dims
    if 0 <= position < len(args):
        return args[position]
    return kwargs.get(name)


def _dense(tensor: torch.Tensor) -> bool:
    """Whether a copy keeps ``tensor``'s strides (``empty_like``'s ``preserve_format``)."""
    step = 1
    for size, stride in sorted(zip(tensor.shape, tensor.stride(), strict=True), key=_by_stride):
        if size != 1 and stride != step:
            return False
        step *= size
    return True


def _by_stride(dim: tuple[int, int]) -> int:
    """A ``(size, stride)`` pair's stride, fastest dimension first."""
    return dim[1]


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides, in elements, of a contiguous tensor of ``shape``."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def staged(
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    out: Any,
    capability: tuple[int, int],
) -> Staged | None:
    """What reduction ``func`` on ``args`` allocates beside ``out`` on a device of
    ``capability``, or None where it allocates nothing more."""
    row = TABLE[func]
    source = args[0]
    first = out[0] if isinstance(out, tuple) else out
    if not isinstance(source, torch.Tensor) or source.dim() == 0 or source.numel() == 0:
        return None
    if row.accumulator is _welford and source.is_complex():
        return None  # std_var_out reduces the real and imaginary parts apart (not modelled)
    read, written = source.dtype, first.dtype
    dims = _reduced(row, args, kwargs)
    if isinstance(dims, int):
        dims = [dims]
    ndim = source.dim()
    reduced = frozenset(d % ndim for d in dims) if dims else frozenset(range(ndim))
    shape, strides = tuple(source.shape), tuple(source.stride())
    offset = int(source.storage_offset())
    copy = 0
    if row.flat and not dims and not source.is_contiguous():
        shape, strides, offset, reduced = (source.numel(),), (1,), 0, frozenset({0})
        copy = source.numel() * read.itemsize
    widened = read in _HALVES and written == torch.float32
    if row.casts and read != written and not widened and not source.is_complex():
        read = written
        copy = source.numel() * read.itemsize
        if not _dense(source):
            strides = _contiguous(shape)
        offset = 0
    staging = scratch.staging_bytes(
        shape, strides, reduced, row.accumulator(read, written), offset, capability,
        input_vec=row.input_vec(read),
    )  # fmt: skip
    if not copy and staging is None:
        return None
    return Staged(copy, staging)


def take(found: Staged, malloc: Callable[[int], Any], free: Callable[[Any], None]) -> None:
    """A reduction's blocks beside its outputs, in ``gpu_reduce_kernel``'s order: the copy of
    its input it reads, if any; then, where it splits across thread blocks, a staging buffer
    and its semaphores for the kernel's length, freed in the reverse order; the copy last."""
    copy = malloc(found.copy) if found.copy else None
    if found.staging is not None:
        buffer = malloc(found.staging[0])
        semaphores = malloc(found.staging[1])
        free(semaphores)
        free(buffer)
    if copy is not None:
        free(copy)
