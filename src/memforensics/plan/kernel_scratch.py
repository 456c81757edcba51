"""What CUDA kernels allocate through the caching allocator beside their outputs, which their
``meta`` forms never make: cuDNN attention's graph workspaces, flash attention's contiguous
copies, row sums and accumulators, memory-efficient attention's output accumulator (heads above
128), its copy of the output's gradient, row sums and workspace; ``_foreach_norm``'s partial
norms (``clip_grad_norm_``'s); the index vectors and CUB's temporary storage of
``index_put_with_sort_kernel`` (an accumulating ``index_put_``, ``x[ids]``'s backward); a long
row's ``sort``'s positions or pairs and CUB's storage; CUB's storage for a one-row ``cumsum``
or ``cumprod``; ``nonzero``'s count, input copy and CUB's storage; ``pow(Scalar, Tensor)``'s
base, which ``pow_Scalar_out`` wraps as a zero-dimensional tensor on the exponent's device;
through :mod:`~memforensics.plan.embedding_backward`, ``nn.Embedding``'s backward's; and,
through :mod:`~memforensics.plan.norm_scratch`, LayerNorm's and RMSNorm's contiguous copies and
partial sums; through :mod:`~memforensics.plan.group_norm_scratch`, GroupNorm's per-sample
vectors; through :mod:`~memforensics.plan.nll_loss2d_copies`, ``nll_loss2d``'s contiguous copies;
through :mod:`~memforensics.plan.lstsq`, ``linalg_lstsq``'s ``infos`` and working copy of ``A``;
through :mod:`~memforensics.plan.cufft_copies`, the FFTs' input clones and working buffers;
through :mod:`~memforensics.plan.solver_scratch`, the linear-algebra kernels' ``info``, ``tau``,
clones and pointer arrays.
Each is taken where the CUDA kernel takes it and freed as it returns; the sizes are
:mod:`~memforensics.plan.scratch`'s and :mod:`~memforensics.plan.cub_storage`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from memforensics.plan import (
    attention,
    cub_storage,
    cufft_copies,
    embedding_backward,
    group_norm_scratch,
    inplace,
    lstsq,
    nll_loss2d_copies,
    norm_scratch,
    reductions,
    scratch,
    solver_scratch,
)
from memforensics.plan.known import MASK_DTYPES
from memforensics.plan.shapes import MASKED

FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_backward.default
EFFICIENT_FORWARD = torch.ops.aten._scaled_dot_product_efficient_attention.default
EFFICIENT_BACKWARD = torch.ops.aten._scaled_dot_product_efficient_attention_backward.default
CUDNN_FORWARD = torch.ops.aten._scaled_dot_product_cudnn_attention.default
CUDNN_BACKWARD = torch.ops.aten._scaled_dot_product_cudnn_attention_backward.default
FOREACH_NORM = torch.ops.aten._foreach_norm.Scalar
EMBEDDING_BACKWARDS = embedding_backward.OPERATORS
POW_SCALAR = torch.ops.aten.pow.Scalar
NONZERO = torch.ops.aten.nonzero.default
NONZERO_CHUNK = 2**31 - 1
"""``nonzero_cuda_out_impl`` counts and selects inputs of this many elements or more in chunks
(not sized here)."""
_FAST_NORMS = (1.0, 2.0, math.inf)
"""The orders ``foreach_tensor_norm_cuda`` computes with its own kernel (``use_slowpath``); any
other is a ``linalg_vector_norm`` per tensor."""
INDEX_PUTS = frozenset(
    (
        torch.ops.aten.index_put_.default,
        torch.ops.aten.index_put.default,
        torch.ops.aten._index_put_impl_.default,
    )
)
"""The operators ``_index_put_impl_`` runs, which sort their indices on CUDA where they
accumulate (:class:`SortedIndexing`)."""
_PUT = torch.ops.aten.index_put_.default
"""The put whose masks' counts :meth:`KernelScratch.index_put` asks for, whichever of
:data:`INDEX_PUTS` it makes."""
INDEX_BACKWARD = "IndexBackward0"
"""The node whose ``index_backward`` (``FunctionsManual.cpp``) puts the gradient with
``_index_put_impl_(…, accumulate=true, unsafe=true)`` on CUDA: no range check. Under the plan
its ``areAnyTensorSubclassLike`` answers true and it calls ``index_put``, which has no
``unsafe``, so the node tells it apart."""
AMINMAX = torch.ops.aten.aminmax.default
"""The reduction ``wrapIndexOnce`` checks an index's range with."""
SORT = torch.ops.aten.sort.default
SORTS = frozenset((SORT, torch.ops.aten.sort.stable))
"""``sort`` (and ``argsort``, which sorts), whose long rows CUDA sorts with CUB
(:meth:`KernelScratch.sort`)."""
SCANS = frozenset(
    getattr(getattr(torch.ops.aten, name), overload)
    for name in ("cumsum", "cumprod", "cumsum_", "cumprod_")
    for overload in getattr(torch.ops.aten, name).overloads()
)
"""``cumsum`` and ``cumprod``, which scan a tensor of one row with CUB
(:meth:`KernelScratch.scan`)."""
MAX_CUB_SCAN = 2**30
"""``impl::max_cub_size``: ``inclusive_scan`` scans longer inputs in chunks of this many."""
_PRIMITIVE_ACCUMULATORS = frozenset(
    (
        torch.float32,
        torch.float64,
        torch.int8,
        torch.uint8,
        torch.int16,
        torch.int32,
        torch.int64,
    )
)
"""The dtypes whose C++ type CUB's traits call primitive (``is_primitive``), which its scan's tile
states pack with their status (:func:`~memforensics.plan.cub_storage.inclusive_scan`)."""
SMALL_SORT = 4096
"""``should_use_small_sort``: rows this long or shorter sort in place, without scratch."""
LARGE_SEGMENT = 1_000_000
"""Rows this long sort one at a time whatever their number (``launch_stable_sort_kernel``)."""
_INDEX = 8
"""Bytes of an ``int64`` index, the type every index vector of the sort is made in."""
KERNELS = frozenset(
    (
        FLASH_BACKWARD,
        EFFICIENT_FORWARD,
        EFFICIENT_BACKWARD,
        CUDNN_FORWARD,
        CUDNN_BACKWARD,
        POW_SCALAR,
        NONZERO,
        *norm_scratch.BACKWARDS,
        *group_norm_scratch.OPERATORS,
        *nll_loss2d_copies.OPERATORS,
        lstsq.OPERATOR,
        *cufft_copies.OPERATORS,
        *solver_scratch.OPERATORS,
    )
)
"""The kernels that take scratch of their own after their outputs
(:meth:`AttentionScratch.after`)."""


def _dense(*tensors: object) -> bool:
    """Whether every one is a four-dimensional stand-in (batch, heads, length, head)."""
    return all(isinstance(t, torch.Tensor) and t.is_meta and t.dim() == 4 for t in tensors)


def _wrapped_base(base: object) -> int:
    """Bytes of the zero-dimensional tensor ``wrapped_scalar_tensor`` makes of a Python number
    (``scalar_to_tensor``: a float as float64, an int as int64, a bool as bool, a complex as
    complex128), or 0 for a base of 1, whose ``pow_Scalar_out`` only fills its output."""
    if isinstance(base, bool):
        return 0 if base else 1
    if isinstance(base, complex):
        return 0 if base == 1 else 16
    if isinstance(base, (int, float)):
        return 0 if base == 1 else 8
    return 0


def _foreach_norm_partials(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """Bytes of the partial norms ``foreach_tensor_norm_cuda`` zeroes before its outputs, or 0
    where it takes its slow path (``use_slowpath``: another order, integer or complex tensors,
    or tensors not all of one dtype, dense and strided, which ``can_use_fast_route`` asks)."""
    tensors = args[0]
    order = args[1] if len(args) > 1 else kwargs.get("ord", 2)
    dtype = args[2] if len(args) > 2 else kwargs.get("dtype")
    if not tensors or not all(isinstance(t, torch.Tensor) and t.is_meta for t in tensors):
        return 0
    first = tensors[0].dtype
    if float(order) not in _FAST_NORMS or not (first.is_floating_point or first.is_complex):
        return 0
    if first.is_complex or not all(
        t.dtype == first and t.layout == torch.strided and inplace.dense(t) for t in tensors
    ):
        return 0
    out = dtype if isinstance(dtype, torch.dtype) else first
    opmath = 8 if out == torch.float64 else 4
    return scratch.foreach_norm_partials([t.numel() for t in tensors], opmath)


def _as_long(index: torch.Tensor) -> torch.Tensor:
    """``index`` as ``makeLinearIndex`` holds it: an ``int32`` one made ``int64`` by ``to``
    (its strides kept where dense), an ``int64`` one as it is (a mask's column of its
    ``nonzero``, strided)."""
    return index if index.dtype == torch.long else torch.empty_like(index, dtype=torch.long)


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The shape ``expand_outplace`` gives index tensors of ``shapes``."""
    rank = max(len(shape) for shape in shapes)
    out = [1] * rank
    for shape in shapes:
        for d, size in enumerate(shape, start=rank - len(shape)):
            out[d] = size if out[d] == 1 else out[d]
    return tuple(out)


def sorts(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``_index_put_impl_`` (``TensorAdvancedIndexing.cpp``) runs
    ``index_put_with_sort_kernel`` on CUDA for these arguments: where it accumulates, or under
    deterministic algorithms for more than one value."""
    values = args[2] if len(args) > 2 else kwargs.get("values")
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    return bool(accumulate) or (
        torch.are_deterministic_algorithms_enabled()
        and isinstance(values, torch.Tensor)
        and values.numel() > 1
    )


class SortedIndexing(NamedTuple):
    """What ``index_put_with_sort_kernel`` (``aten/src/ATen/native/cuda/Indexing.cu``) takes,
    which ``_index_put_impl_`` runs on CUDA where it accumulates, or under deterministic
    algorithms for more than one value (``TensorAdvancedIndexing.cpp``):

    - a contiguous copy of a non-contiguous ``self`` (``self_``), held to the end;
    - each ``int32`` index made ``int64`` (``makeLinearIndex``), held while the linear index is
      computed;
    - per indexed dimension (``computeLinearIndex``), over the broadcast indices: the
      index wrapped by ``remainder`` and that times the dimension's stride, the first freed at
      once; the first dimension's product is the linear index, each later one is added into it
      and freed (an index on the host is wrapped there and only its product copied over);
    - the values made contiguous where their broadcast to the indexed shape is not;
    - where the indexed dimensions are not adjacent, ``self`` transposed to bring them to the
      front and made contiguous (``src_``);
    - the sorted indices, their original positions and an ``arange``, 8 B each per index, and
      CUB's radix sort's temporary storage (:func:`~memforensics.plan.cub_storage.
      radix_sort_pairs`) on the bits of ``self``'s largest slice index.

    A mask (boolean or ``uint8``) on the device is first replaced by its ``nonzero``
    (``makeLinearIndex``'s ``expandTensors``), one index per dimension it covers, whose
    ``(count, ndim)`` positions ``makeLinearIndex`` holds until it returns, as the ``int64``
    copies; one on the host runs its ``nonzero`` there, and only each dimension's product is
    copied over.

    A forward ``index_put_`` (``unsafe`` false) checks each index on the device before it is
    wrapped (``wrapIndexOnce``): ``aminmax`` of the broadcast index (its two 8-B bounds and
    the reduction's own copy and staging, :func:`~memforensics.plan.reductions.staged`), then
    ``_assert_async`` of ``max < size`` and of ``min >= -size`` (a 1-B ``bool`` each, freed
    after its assert), the bounds freed after both. The backward's put (``unsafe``) checks
    none."""

    indices: int
    """Indices after broadcasting."""
    masks: tuple[tuple[torch.Tensor, int], ...]
    """Each mask on the device, with the positions its ``nonzero`` gives."""
    self_copy: int
    widened: tuple[int, ...]
    dimensions: tuple[bool, ...]
    """Per indexed dimension, whether its index is on the device (wrapped there)."""
    checked: tuple[torch.Tensor | None, ...]
    """Per indexed dimension, the broadcast ``int64`` index whose range is checked on the
    device, None where none is (an index on the host, or an ``unsafe`` put)."""
    value_copy: int
    permuted_copy: int
    slice_size: int
    """Elements each index selects (``nElemAfter``)."""
    largest_slice: int
    """``largestIndex(self_) / sliceSize``, the largest key the sort sees."""

    @classmethod
    def of(
        cls,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        masks: Sequence[tuple[torch.Tensor, int]] = (),
        *,
        unsafe: bool = False,
    ) -> SortedIndexing | None:
        """The scratch of ``_index_put_impl_``'s arguments on stand-ins, with the count of
        each mask on the device (:meth:`~memforensics.plan.shapes.Shapes.inner_nonzeros`), or
        None where it does not sort (:func:`sorts`) or is not sized here. ``unsafe``: the put
        checks no index's range, whatever its arguments say (:data:`INDEX_BACKWARD`)."""
        target, indices, values = args[0], args[1], args[2]
        if not (isinstance(target, torch.Tensor) and target.is_meta) or not sorts(args, kwargs):
            return None
        counts = {id(mask): count for mask, count in masks}
        placed: list[torch.Tensor | None] = []
        for index in indices:
            if not (isinstance(index, torch.Tensor) and index.dtype in MASK_DTYPES):
                placed.append(index)
            elif not index.is_meta and index.dim():  # its ``nonzero`` runs on the host
                selected = torch.empty((int(torch.count_nonzero(index)),), dtype=torch.long)
                placed += [selected] * index.dim()
            elif id(index) not in counts:
                return None  # a zero-dimensional mask
            else:  # ``nonzero(mask).select(1, j)`` for each dimension it covers
                found = torch.empty(
                    (counts[id(index)], index.dim()), dtype=torch.long, device="meta"
                )
                placed += [found.select(1, j) for j in range(index.dim())]
        placed += [None] * (target.dim() - len(placed))
        defined = [i for i in placed if isinstance(i, torch.Tensor)]
        if not defined:
            return None
        shape = _broadcast([tuple(i.shape) for i in defined])
        taken = [d for d, index in enumerate(placed) if index is not None]
        together = taken == list(range(taken[0], taken[-1] + 1))
        rest = [s for d, s in enumerate(target.shape) if d not in taken]
        before = list(target.shape[: taken[0]]) if together else []
        after = list(target.shape[taken[-1] + 1 :]) if together else rest
        value_shape = [*before, *shape, *after]
        value_copy = 0
        if (
            isinstance(values, torch.Tensor)
            and values.is_meta
            and not values.expand(value_shape).is_contiguous()
        ):
            value_copy = math.prod(value_shape) * values.element_size()
        size = target.numel() * target.element_size()
        slice_size = math.prod(after)
        unsafe = unsafe or bool(args[4] if len(args) > 4 else kwargs.get("unsafe", False))
        checked = tuple(
            None if unsafe or not i.is_meta else _as_long(i).expand(shape) for i in defined
        )
        return cls(
            indices=math.prod(shape),
            masks=tuple(masks),
            self_copy=0 if target.is_contiguous() else size,
            widened=tuple(
                i.numel() * _INDEX for i in defined if i.is_meta and i.dtype == torch.int32
            ),
            dimensions=tuple(i.is_meta for i in defined),
            checked=checked,
            value_copy=value_copy,
            permuted_copy=0 if together else size,
            slice_size=slice_size,
            largest_slice=max(target.numel() - 1, 0) // slice_size if slice_size else 0,
        )


def _sort_scratch(
    malloc: Callable[[int], Any],
    free: Callable[[Any], None],
    rows: int,
    length: int,
    key: int,
    capability: tuple[int, int],
) -> None:
    """``launch_stable_sort_kernel``'s blocks for ``rows`` rows of ``length`` keys of ``key``
    bytes (:mod:`~memforensics.plan.cub_storage` sizes CUB's storage, where it can):

    - one row, or rows of :data:`LARGE_SEGMENT` or more (``segmented_sort_large_segments``):
      the positions ``0 … n-1`` (8 B each, a ``DeviceArray``), then per row CUB's radix-sort
      storage for the row's keys beside them, on every bit of the key;
    - fewer than 128 rows (``segmented_sort_pairs_by_full_sort``): each element's position and
      row (8 B, ``int2``) and a second array of them, the sorted keys ``radix_sort_pairs``
      makes for itself (its ``keys_out`` is null) and CUB's storage for the keys beside the
      pairs, then, those keys freed, CUB's storage for sorting the pairs as 8-byte keys on the
      row's bits (``segment_bits``);
    - more rows (``segmented_sort_pairs``): the positions of every element (8 B each), then
      CUB's segmented radix sort's storage (its alternate keys and values).

    Each is freed as its sort returns, the rest as the kernel returns."""
    count = rows * length
    if rows == 1 or length >= LARGE_SEGMENT:
        storage = cub_storage.radix_sort_pairs(length, 8 * key, capability, key)
        positions = malloc(length * _INDEX)
        for _ in range(rows if storage is not None else 0):
            free(malloc(storage or 1))
        free(positions)
    elif rows < 128:
        pairs = cub_storage.radix_sort_pairs(count, 8 * key, capability, key)
        keys = cub_storage.radix_sort_keys(count, (rows - 1).bit_length(), capability)
        first, second, sorted_keys = malloc(count * 8), malloc(count * 8), malloc(count * key)
        if pairs is not None:
            free(malloc(pairs))
        free(sorted_keys)
        if keys is not None:
            free(malloc(keys))
        free(second)
        free(first)
    else:
        positions = malloc(count * _INDEX)
        free(malloc(cub_storage.segmented_radix_sort_pairs(count, key)))
        free(positions)


_COPIES: dict[Any, Callable[[Any, tuple[Any, ...]], list[int]]] = {
    **dict.fromkeys(nll_loss2d_copies.OPERATORS, nll_loss2d_copies.copied),
    lstsq.OPERATOR: lambda _func, args: lstsq.after(args),
    **dict.fromkeys(cufft_copies.OPERATORS, cufft_copies.copied),
}
"""The kernels whose buffers beside their outputs are all made after them and held until they
return, each with what sizes them (bytes in the order made)."""


_BEFORE = frozenset(
    (
        *EMBEDDING_BACKWARDS,
        *MASKED,
        *norm_scratch.OPERATORS,
        NONZERO,
        FOREACH_NORM,
        FLASH_BACKWARD,
        EFFICIENT_BACKWARD,
        lstsq.OPERATOR,
    )
)
"""The operators that take anything before their outputs (:meth:`KernelScratch.before`): one
lookup for every other operator, which each test in turn would hash again."""


class KernelScratch:
    """The scratch of CUDA kernels whose ``meta`` forms make only their outputs, taken from and
    given back to the planned device through ``malloc`` and ``free``."""

    def __init__(
        self,
        malloc: Callable[[int], Any],
        free: Callable[[Any], None],
        capability: tuple[int, int],
        masks: Callable[[Any, tuple[Any, ...], dict[str, Any]], list[tuple[Any, int]]]
        | None = None,
    ) -> None:
        self._malloc = malloc
        self._free = free
        self._capability = capability
        self._masks = masks
        """The boolean masks an operator's kernel runs ``nonzero`` of, with their counts
        (:meth:`~memforensics.plan.shapes.Shapes.inner_nonzeros`)."""
        self.embedding = embedding_backward.EmbeddingScratch(malloc, free, capability)
        """``nn.Embedding``'s backward's sort and segments."""

    def before(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """What ``func`` takes before its outputs, to be freed once it has returned:
        ``_foreach_norm``'s partial norms; contiguous copies, seen as (batch, length, heads,
        head) as the kernel reads them, where that view is not contiguous (a gradient laid out
        as (batch, heads, length, head), or expanded from a sum): ``_flash_attention_backward``'s
        of the output's gradient and of the output, ``_efficient_attention_backward``'s of the
        output's gradient; an embedding's backward's copies, sorted ids and counts
        (:meth:`~memforensics.plan.embedding_backward.EmbeddingScratch.before`)."""
        copied: tuple[Any, ...]
        if func not in _BEFORE:
            return []
        if func in EMBEDDING_BACKWARDS:
            return self.embedding.before(func, args, kwargs)
        if func is NONZERO:
            return self._nonzero_count(args)
        if func in norm_scratch.OPERATORS:
            return [self._malloc(n) for n in norm_scratch.before(func, args)]
        if func in MASKED and self._masks is not None:
            if func in INDEX_PUTS and sorts(args, kwargs):
                return []  # ``makeLinearIndex`` runs them, after the output (:meth:`index_put`)
            return self._inner_nonzeros(self._masks(func, args, kwargs))
        if func is lstsq.OPERATOR:
            return [self._malloc(n) for n in lstsq.before(args)]
        if func is FOREACH_NORM:
            partials = _foreach_norm_partials(args, kwargs)
            return [self._malloc(partials)] if partials else []
        if func is FLASH_BACKWARD:
            copied = (args[0], args[4])
        elif func is EFFICIENT_BACKWARD:
            copied = (args[0],)
        else:
            return []
        if not _dense(*copied):
            return []
        return [
            self._malloc(t.numel() * t.element_size())
            for t in copied
            if not t.transpose(1, 2).is_contiguous()
        ]

    def after(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> None:
        """What ``func`` takes after its outputs and frees as it returns."""
        if func is FLASH_BACKWARD:
            self._flash(args)
        elif func is EFFICIENT_FORWARD:
            self._efficient_forward(args)
        elif func is EFFICIENT_BACKWARD:
            self._efficient(args)
        elif func in (CUDNN_FORWARD, CUDNN_BACKWARD):
            self._cudnn(func, args)
        elif func is POW_SCALAR:
            self._pow_base(args)
        elif func is NONZERO:
            self._nonzero_select(args)
        elif func in norm_scratch.BACKWARDS:
            norm_scratch.after(func, args, self._capability, self._malloc, self._free)
        elif func in group_norm_scratch.OPERATORS:
            group_norm_scratch.after(func, args, self._malloc, self._free)
        elif func in solver_scratch.OPERATORS:
            solver_scratch.after(func, args, kwargs or {}, self._malloc, self._free)
        elif func in _COPIES:
            for block in reversed([self._malloc(n) for n in _COPIES[func](func, args)]):
                self._free(block)

    def _nonzero_count(self, args: tuple[Any, ...]) -> list[Any]:
        """``nonzero_cuda_out_impl``'s (``aten/src/ATen/native/cuda/Nonzero.cu``) blocks before
        its output: a contiguous copy of a non-contiguous input (``self.contiguous()``), the
        ``int`` count (``num_nonzeros``), and ``DeviceReduce::Sum``'s storage counting the
        non-zero elements into it, freed at once
        (:func:`~memforensics.plan.cub_storage.reduce_sum`; not made past one tile). The copy
        and the count are held until it returns."""
        source = args[0] if args else None
        if not (isinstance(source, torch.Tensor) and source.is_meta):
            return []
        count = source.numel()
        if count >= NONZERO_CHUNK:
            return []
        held = []
        if not source.is_contiguous():
            held.append(self._malloc(count * source.element_size()))
        held.append(self._malloc(4))
        storage = cub_storage.reduce_sum(count)
        if storage is not None:
            self._free(self._malloc(storage))
        return held

    def _nonzero_select(self, args: tuple[Any, ...]) -> None:
        """``nonzero``'s ``DeviceSelect::Flagged`` storage, after its output, freed as it returns
        (:func:`~memforensics.plan.cub_storage.select_flagged`); none for a zero-dimensional
        input."""
        source = args[0] if args else None
        if not (isinstance(source, torch.Tensor) and source.is_meta and source.dim() > 0):
            return
        count = source.numel()
        if count < NONZERO_CHUNK:
            self._free(self._malloc(cub_storage.select_flagged(count, self._capability)))

    def _inner_nonzeros(self, masks: list[tuple[Any, int]]) -> list[Any]:
        """The ``nonzero`` of each mask that indexing by it runs first (``expandTensors``), as
        ``nonzero`` runs alone (:meth:`_nonzero_count`, its ``(count, ndim)`` ``int64`` output,
        :meth:`_nonzero_select`, its count and copy freed); its output is held, as the index
        iterator's operand, until the indexing kernel has run and the operator returns."""
        held = []
        for mask, count in masks:
            scratch = self._nonzero_count((mask,))
            held.append(self._malloc(count * mask.dim() * _INDEX))
            self._nonzero_select((mask,))
            for block in reversed(scratch):
                self._free(block)
        return held

    def _pow_base(self, args: tuple[Any, ...]) -> None:
        """``pow_Scalar_out``'s base (``2.0 ** t``, ``torch.pow(10000.0, t)``): after the output,
        ``wrapped_scalar_tensor(base, exp.device())`` puts the number on the device for
        ``pow_out`` to read, and frees it as the kernel returns."""
        exponent = args[1] if len(args) > 1 else None
        if not (isinstance(exponent, torch.Tensor) and exponent.is_meta):
            return
        size = _wrapped_base(args[0])
        if size:
            self._free(self._malloc(size))

    def index_put(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], node: str | None = None
    ) -> None:
        """``index_put_with_sort_kernel``'s scratch, in its order (:class:`SortedIndexing`):
        the copies held to the end, the linear index computed dimension by dimension, the sort's
        vectors and CUB's temporary storage, freed as the sort returns; the rest freed as the
        kernel returns, the linear index last but ``self``'s copy. A mask's ``nonzero``
        (:meth:`_inner_nonzeros`) runs after the copy, its positions freed with the ``int64``
        copies."""
        if not sorts(args, kwargs):
            return
        masks = self._masks(_PUT, args, kwargs) if self._masks is not None else []
        found = SortedIndexing.of(args, kwargs, masks, unsafe=node == INDEX_BACKWARD)
        if found is None:
            return
        count = found.indices
        held = [self._malloc(found.self_copy)] if found.self_copy else []
        widened = self._inner_nonzeros(list(found.masks))
        widened += [self._malloc(n) for n in found.widened]
        linear = self._linear_index(found)
        for block in widened:
            self._free(block)
        held.append(linear)
        if found.value_copy:
            held.append(self._malloc(found.value_copy))
        if count and found.slice_size:
            sort = [self._malloc(found.permuted_copy)] if found.permuted_copy else []
            sort += [self._malloc(count * _INDEX) for _ in range(3)]
            storage = cub_storage.radix_sort_pairs(
                count, cub_storage.num_bits(found.largest_slice), self._capability
            )
            if storage is not None:
                self._free(self._malloc(storage))
            for block in reversed(sort):
                self._free(block)
        for block in reversed(held):
            self._free(block)

    def _linear_index(self, found: SortedIndexing) -> Any:
        """``computeLinearIndex``'s blocks: per indexed dimension its range check
        (:meth:`_range_check`), the index wrapped on the device (freed at once) and its
        product with the stride, each product after the first added into the first and freed;
        the first, the linear index, is returned."""
        count, linear = found.indices, None
        for on_device, checked in zip(found.dimensions, found.checked, strict=True):
            if checked is not None and count:
                self._range_check(checked)
            wrapped = self._malloc(count * _INDEX) if on_device else None
            product = self._malloc(count * _INDEX)
            if wrapped is not None:
                self._free(wrapped)
            if linear is None:
                linear = product
            else:
                self._free(product)
        return linear

    def _range_check(self, index: torch.Tensor) -> None:
        """``wrapIndexOnce``'s check of ``index`` on the device: ``aminmax``'s two bounds and
        the reduction's own blocks, the two compared ``bool`` scalars (each freed after its
        ``_assert_async``), then the bounds, the minimum first (the tuple's first element)."""
        low, high = self._malloc(_INDEX), self._malloc(_INDEX)
        bound = torch.empty((), dtype=torch.long, device="meta")
        found = reductions.staged(AMINMAX, (index,), {}, (bound, bound), self._capability)
        if found is not None:
            reductions.take(found, self._malloc, self._free)
        for _ in range(2):
            self._free(self._malloc(1))
        self._free(low)
        self._free(high)

    def sort(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``sort_cuda_kernel``'s scratch (``aten/src/ATen/native/cuda/Sort.cpp``,
        ``SortStable.cu``) for a contiguous input sorted along its last dimension, longer than
        :data:`SMALL_SORT`, after the values and indices, by ``launch_stable_sort_kernel``'s
        three ways (:func:`_sort_scratch`)."""
        target = args[0]
        dim = args[1] if func is SORT and len(args) > 1 else kwargs.get("dim", -1)
        if not (isinstance(target, torch.Tensor) and target.is_meta and target.dim() > 0):
            return
        length, count = target.shape[dim], target.numel()
        if length <= SMALL_SORT or count > 2**31 - 1 or not target.is_contiguous():
            return
        if target.stride(dim) != 1:
            return
        _sort_scratch(self._malloc, self._free, count // length, length,
                      target.element_size(), self._capability)  # fmt: skip

    def scan(self, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """``scan_dim``'s (``aten/src/ATen/native/cuda/ScanUtils.cuh``) CUB storage for a
        ``cumsum`` or ``cumprod`` of an input whose every element lies along the scanned
        dimension (a 1-D tensor, a row), contiguous or converted to another dtype (a
        contiguous copy): ``cuda::cub::inclusive_scan`` of it in the
        result's dtype (:func:`~memforensics.plan.cub_storage.inclusive_scan`), taken after the
        result and the input's conversion and freed as it returns. Other shapes scan in
        ATen's own kernels, which take none."""
        source = args[0]
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        if not (
            isinstance(source, torch.Tensor)
            and source.is_meta
            and isinstance(out, torch.Tensor)
            and isinstance(dim, int)
            and source.dim() > 0
        ):
            return
        count = source.numel()
        if not 0 < count <= MAX_CUB_SCAN or source.shape[dim] != count:
            return
        if not source.is_contiguous() and source.dtype == out.dtype:
            return  # its contiguous copy (``expect_contiguous``) is not made here
        primitive = out.dtype in _PRIMITIVE_ACCUMULATORS
        size = cub_storage.inclusive_scan(count, out.element_size(), primitive)
        self._free(self._malloc(size))

    def _flash(self, args: tuple[Any, ...]) -> None:
        """``mha_bwd``'s row sums and accumulator, and with grouped keys and values their
        per-query-head gradients, freed first (:func:`scratch.flash_backward_scratch`)."""
        query, key, value = args[1:4]
        if not _dense(query, key, value):
            return
        splits = (
            scratch.deterministic_splits(self._capability, query.shape[0], query.shape[1])
            if attention.strictly_deterministic()
            else 0
        )
        kept, expanded = scratch.flash_backward_scratch(
            tuple(query.shape), tuple(key.shape), tuple(value.shape), query.element_size(), splits
        )
        blocks = [self._malloc(n) for n in kept]
        for block in [self._malloc(n) for n in expanded]:
            self._free(block)
        for block in reversed(blocks):
            self._free(block)

    def _efficient_forward(self, args: tuple[Any, ...]) -> None:
        """``_efficient_attention_forward``'s float32 output accumulator, where it takes one
        (:func:`scratch.efficient_forward_accumulator`)."""
        query, value = args[0], args[2]
        if not _dense(query, value):
            return
        size = scratch.efficient_forward_accumulator(
            tuple(query.shape), value.shape[-1], query.element_size()
        )
        if size:
            self._free(self._malloc(size))

    def _efficient(self, args: tuple[Any, ...]) -> None:
        """``_efficient_attention_backward``'s row sums (and, for float32 inputs, the
        temporaries computing them, freed once they are copied), then its workspace; both freed
        as it returns (:func:`scratch.efficient_backward_scratch`)."""
        query, key, value = args[1:4]
        if not _dense(query, key, value):
            return
        found = scratch.efficient_backward_scratch(
            tuple(query.shape), tuple(key.shape), tuple(value.shape), query.element_size()
        )
        temporaries = [self._malloc(n) for n in found.delta_from]
        delta = self._malloc(found.delta)
        for block in reversed(temporaries):
            self._free(block)
        workspace = self._malloc(found.workspace)
        self._free(delta)
        self._free(workspace)

    def _cudnn(self, func: Any, args: tuple[Any, ...]) -> None:
        """cuDNN attention's workspace for its graph (``run_cudnn_SDP_fprop`` /
        ``run_cudnn_SDP_bprop``)."""
        query, key, value = args[:3] if func is CUDNN_FORWARD else args[1:4]
        if not all(isinstance(t, torch.Tensor) and t.is_meta for t in (query, key, value)):
            return
        if func is CUDNN_FORWARD:
            size = scratch.CUDNN_ATTENTION_FORWARD_WORKSPACE
        else:
            size = scratch.cudnn_attention_backward_workspace(
                tuple(query.shape), tuple(key.shape), tuple(value.shape), query.element_size()
            )
        self._free(self._malloc(size))
