"""The scratch of ``nn.Embedding``'s backward on CUDA, which its ``meta`` form never makes:
``embedding_dense_backward_cuda`` (``aten/src/ATen/native/cuda/Embedding.cu``) and the
``embedding_backward_cuda_kernel`` it calls (``EmbeddingBackwardKernel.cu``), as torch 2.13
takes them through the caching allocator, in their order:

- the ids made contiguous where they are not, and the output's gradient where it is not (a
  gradient expanded from a sum), held to the end;
- for 3,072 ids or fewer without ``scale_grad_by_freq``, nothing more: one kernel accumulates
  the rows in shared memory;
- otherwise the sorted ids, their original positions and an ``arange`` (an id's bytes each),
  and CUB's radix sort of the ids beside their positions on every bit of the id (the
  ``nbits`` of the number of rows is commented out in the call), the ``arange`` freed after;
- with ``scale_grad_by_freq``, each id's count, computed by two scans by key (a sum, then a
  maximum in reverse), each with CUB's storage;
- then the output (zeros), the start of each run of equal ids (``segment_offsets``, an id's
  bytes per id) and their number (8 B); ``unique_by_key``'s own keys out (an id's bytes per
  id) and CUB's storage, both freed as it returns;
- for at most ``min(ids, rows)`` runs, the partial segments of ten ids each per run, their
  offsets (``exclusive_sum``, with CUB's storage) and their number (8 B), and each partial
  segment's start, for at most ``ids // 10 + min(ids, rows)`` of them;
- the partial sums of those segments, a row each in the accumulation type (float for half and
  bfloat16), summed and scattered into the output; or, where few runs would leave the SMs idle
  (``sum_and_scatter``'s blocks fewer than four per SM and a quarter of the partial segments)
  and deterministic algorithms are off, each partial segment's run instead and, for half and
  bfloat16, a float copy of the output (zeros) the partial sums are added into atomically;
- all freed as the kernels return, the output kept.

``embedding_bag``'s backward in ``sum`` and ``mean`` modes
(``_embedding_bag_dense_backward_cuda``, ``EmbeddingBag.cu``) takes the same after a contiguous
copy of its gradient, whatever the number of ids (it has no shared-memory kernel) and never
atomically (``offset2bag`` is defined); in ``max`` mode, or ``sparse``, it takes none here
(``int32`` ids beside ``int64`` offsets, which ``promoteIndicesAndOffsets`` widens first, are
not copied here either).
``padding_idx`` changes what the kernels write, not what they take. CUB's storage is
:mod:`~memforensics.plan.cub_storage`'s, over ``index_t`` keys and values
(``AT_DISPATCH_INDEX_TYPES``): for ``int32`` ids the sort is of 4-byte keys beside 4-byte
positions on all 32 bits, the scans and ``unique_by_key`` of 4-byte keys, ``exclusive_sum``
of ``int`` counts, each with its own tuning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from memforensics.plan import cub_storage, scratch

EMBEDDING_DENSE_BACKWARD = torch.ops.aten.embedding_dense_backward.default
EMBEDDING_BAG_BACKWARD = torch.ops.aten._embedding_bag_backward.default
EMBEDDING_BAG_DENSE_BACKWARD = torch.ops.aten._embedding_bag_dense_backward.default
OPERATORS = frozenset(
    (EMBEDDING_DENSE_BACKWARD, EMBEDDING_BAG_BACKWARD, EMBEDDING_BAG_DENSE_BACKWARD)
)
"""The backwards sized here: the device mode sees ``_embedding_bag_backward`` itself, whose
composite calls ``_embedding_bag_dense_backward`` on CUDA unless ``sparse``."""
_NAMES = {
    EMBEDDING_DENSE_BACKWARD: ("grad_output", "indices", "num_weights", "padding_idx",
                               "scale_grad_by_freq"),
    EMBEDDING_BAG_BACKWARD: ("grad", "indices", "offsets", "offset2bag", "bag_size",
                             "maximum_indices", "num_weights", "scale_grad_by_freq", "mode",
                             "sparse", "per_sample_weights", "padding_idx"),
    EMBEDDING_BAG_DENSE_BACKWARD: ("grad", "indices", "offset2bag", "bag_size",
                                   "maximum_indices", "num_weights", "scale_grad_by_freq",
                                   "mode", "per_sample_weights", "padding_idx"),
}  # fmt: skip
"""Each operator's arguments by name, in its schema's order."""
MODE_MAX = 2
"""``embedding_bag``'s ``mode="max"``, whose backward adds atomically into its output alone."""
FEATURE_KERNEL_IDS = 3072
"""Ids the shared-memory kernel (``embedding_backward_feature_kernel``) takes at most."""
NROWS_PER_THREAD = 10
"""Ids in a partial segment."""
MAX_BLOCK_SIZE = 1024
"""``MAX_BLOCK_SIZE`` (``SortingCommon.cuh``) on CUDA."""
WARP = 32
MAX_ATOMIC_ACCUM_BLOCKS_PER_SM = 4
"""``sum_and_scatter``'s blocks per SM below which the atomic path is taken."""
_COUNT = 8
"""Bytes of the ``int64`` counts CUB writes (``num_of_segments``)."""


class EmbeddingBackward(NamedTuple):
    """What ``embedding_dense_backward_cuda`` takes beside its output, for one call."""

    ids: int
    id_bytes: int
    ids_copy: int
    """Bytes of the ids' contiguous copy, or 0."""
    grad_copy: int
    """Bytes of the output gradient's contiguous copy, or 0."""
    sorted: bool
    """Whether it sorts (more than :data:`FEATURE_KERNEL_IDS` ids, or counts)."""
    counts: bool
    rows: int
    width: int
    partial_bytes: int
    """Bytes of an element of the accumulation type."""
    widened: bool
    """Whether the accumulation type is wider than the gradient's (half, bfloat16)."""
    bags: bool
    """Whether it is ``embedding_bag``'s (which never adds atomically)."""

    @classmethod
    def of(
        cls, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> EmbeddingBackward | None:
        """The figures of a call of ``func`` (one of :data:`OPERATORS`) on stand-ins, or None
        where it is not sized here (``embedding_bag``'s ``max`` mode takes no scratch)."""
        bags = func is not EMBEDDING_DENSE_BACKWARD
        bound = dict(zip(_NAMES[func], args, strict=False)) | kwargs
        grad, ids = bound.get("grad" if bags else "grad_output"), bound.get("indices")
        if not (isinstance(grad, torch.Tensor) and grad.is_meta and grad.dim() > 0):
            return None
        if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int64, torch.int32):
            return None
        if bags and (int(bound["mode"]) == MODE_MAX or bound.get("sparse", False)):
            return None
        rows, counts = int(bound["num_weights"]), bool(bound.get("scale_grad_by_freq", False))
        count = ids.numel()
        opmath = torch.float32 if grad.dtype in (torch.float16, torch.bfloat16) else grad.dtype
        partial = torch.empty((), dtype=opmath, device="meta").element_size()
        return cls(
            ids=count,
            id_bytes=ids.element_size(),
            ids_copy=0 if ids.is_contiguous() else count * ids.element_size(),
            grad_copy=0 if grad.is_contiguous() else grad.numel() * grad.element_size(),
            sorted=count > 0 and (bags or count > FEATURE_KERNEL_IDS or counts),
            counts=counts,
            rows=rows,
            width=grad.shape[-1],
            partial_bytes=partial,
            widened=opmath != grad.dtype,
            bags=bags,
        )

    @property
    def runs(self) -> int:
        """``max_segments``: the runs of equal ids there can be."""
        return min(self.ids, self.rows)

    @property
    def partial_segments(self) -> int:
        """``max_partial_segment``: the partial segments there can be."""
        return self.ids // NROWS_PER_THREAD + self.runs

    def atomic(self, capability: tuple[int, int]) -> bool:
        """``use_fused_kernel``: whether the partial sums are added into the output atomically
        (few runs for the SMs, many partial segments, deterministic algorithms off)."""
        warped = -(-self.width // WARP) * WARP
        block = min(warped, MAX_BLOCK_SIZE)
        grid = -(-self.runs * warped // block) if block else 0
        occupancy = scratch.multiprocessors(capability) * MAX_ATOMIC_ACCUM_BLOCKS_PER_SM
        return (
            not self.bags
            and grid < occupancy
            and self.partial_segments > grid * 4
            and not torch.are_deterministic_algorithms_enabled()
        )


def _cub(size: int | None, malloc: Callable[[int], Any], free: Callable[[Any], None]) -> None:
    """CUB's storage taken and freed (``CUB_WRAPPER``), where it is sized."""
    if size is not None:
        free(malloc(size))


class EmbeddingScratch:
    """``embedding_dense_backward_cuda``'s blocks, taken from and given back to the planned
    device: :meth:`before` its output, :meth:`after` it."""

    def __init__(
        self,
        malloc: Callable[[int], Any],
        free: Callable[[Any], None],
        capability: tuple[int, int],
    ) -> None:
        self._malloc = malloc
        self._free = free
        self._capability = capability

    def before(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The blocks taken before the output and held to the end, in the order they are
        freed last to first: the contiguous copies, the sorted ids and their positions, the
        counts; the ``arange`` and CUB's storage taken and freed between them."""
        found = EmbeddingBackward.of(func, args, kwargs)
        if found is None:
            return []
        malloc, free = self._malloc, self._free
        copies = (
            (found.grad_copy, found.ids_copy) if found.bags else (found.ids_copy, found.grad_copy)
        )
        held = [malloc(n) for n in copies if n]
        if not found.sorted:
            return held
        size, capability = found.id_bytes, self._capability
        vector = found.ids * size
        held += [malloc(vector), malloc(vector)]
        positions = malloc(vector)
        sort = cub_storage.radix_sort_pairs(found.ids, 8 * size, capability, size, size)
        _cub(sort, malloc, free)
        free(positions)
        if found.counts:
            held.append(malloc(vector))
            for _ in range(2):
                _cub(cub_storage.scan_by_key(found.ids, capability, size), malloc, free)
        return held

    def after(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``embedding_backward_cuda_kernel``'s blocks after the output, each freed as the
        kernel returns."""
        found = EmbeddingBackward.of(func, args, kwargs)
        if found is None or not found.sorted:
            return
        malloc, free, capability = self._malloc, self._free, self._capability
        size = found.id_bytes
        vector = found.ids * size
        held = [malloc(vector), malloc(_COUNT)]
        keys = malloc(vector)
        _cub(cub_storage.unique_by_key(found.ids, capability, size), malloc, free)
        free(keys)
        runs = found.runs * size
        held += [malloc(runs), malloc(runs)]
        _cub(cub_storage.exclusive_scan(found.runs, capability, size), malloc, free)
        partials = found.partial_segments
        held += [malloc(_COUNT), malloc(partials * found.id_bytes)]
        if found.atomic(capability):
            owner = malloc(partials * found.id_bytes)
            if found.widened:
                free(malloc(found.rows * found.width * 4))
            free(owner)
        elif found.width:
            free(malloc(partials * found.width * found.partial_bytes))
        for block in reversed(held):
            free(block)
