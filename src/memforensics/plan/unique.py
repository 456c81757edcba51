"""What ``torch.unique`` and ``torch.unique_consecutive`` allocate on CUDA, in their order,
which their ``meta`` forms (and the plan's answers for their shapes) never make.

Without ``dim``, ``unique_cuda_template`` (``aten/src/ATen/native/cuda/UniqueCub.cu``) takes,
over the n elements of ``e`` bytes:

- a contiguous copy of a non-contiguous input (``expect_contiguous``), held to the end;
- sorted (``unique``): the sorted copy (n * e), then CUB's ``SortKeys`` storage, or with
  ``return_inverse`` an ``arange`` and the sorted positions (n * 8 each) and CUB's
  ``SortPairs`` storage, the ``arange`` freed after; consecutive: the input itself;
- with ``return_inverse``, the inverse indices (an output, n * 8), then for ``unique`` their
  running sum (n * 8; the differences are written into the inverse's own storage), for
  ``unique_consecutive`` the differences (n ``int``) beside the inverse; CUB's
  ``inclusive_sum_truncating`` storage; the running sum or differences freed;
- the values out (an output, n * e: every element may be distinct), the one-element
  ``int64`` length, then CUB's ``DeviceSelect::Unique`` storage, or with ``return_counts`` the
  counts (an output, n * 8) and ``DeviceRunLengthEncode::Encode``'s storage;
- the length read back, the values and counts shrunk to it by ``resize_``, which keeps their
  blocks (the caching allocator never shrinks a block: the storage keeps its n elements);
- the length, the sorted positions, the sorted copy and the input's copy freed as the
  functions return.

Booleans sorted (``UniqueCub<bool>``) count their ``true`` values instead: a 4-byte count
(``DeviceArray<int>``) and ``DeviceReduce::Reduce``'s storage, then the values (2 B) and the
counts (16 B) whatever ``return_counts`` asks, both shrunk to the kinds present, the inverse
indices after them.

With ``dim`` (``unique_dim_cuda_template``, ``Unique.cu``) Thrust sorts the slices' positions:
the input moved to put ``dim`` first and made contiguous where that is not the input itself,
the positions (an ``arange`` of the m slices, 8 B each, later shrunk), for ``unique`` the
merge sort's storage; with ``return_inverse`` their running sum (m * 8) and the inverse (an
output, m * 8), ``adjacent_difference``'s and ``inclusive_scan``'s storage, the running sum
freed; without ``return_counts`` ``unique``'s storage, with it an ``arange`` of m + 1,
``unique_by_key``'s storage, the counts (an output, as many as the distinct slices) and
``adjacent_difference``'s storage, the ``arange`` freed; then ``index_select``'s output, the
positions and the copy freed. Thrust's storage (through ``ThrustAllocator``, one block a
call) is :mod:`~memforensics.plan.thrust_storage`'s.

CUB's sizes are :mod:`~memforensics.plan.cub_storage`'s; where it cannot size one, none is
taken. The outputs' shapes are the plan's answers (:mod:`~memforensics.plan.shapes`); each
is made at CUDA's full length and shrunk, so its block is the full one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch

from memforensics.plan import cub_storage, thrust_storage

if TYPE_CHECKING:
    from memforensics.plan.shapes import Shapes

UNIQUE2 = torch.ops.aten._unique2.default
UNIQUE_CONSECUTIVE = torch.ops.aten.unique_consecutive.default
UNIQUE_DIM = torch.ops.aten.unique_dim.default
UNIQUE_DIM_CONSECUTIVE = torch.ops.aten.unique_dim_consecutive.default
_INDEX = 8
"""Bytes of an ``int64`` index, length or count."""
_COUNT_TRUE = 4
"""Bytes of the boolean path's ``int`` count of ``true`` values."""
_NON_PRIMITIVE = (torch.float16, torch.bfloat16)
"""Element types CUB has no traits for (``c10::Half``, ``c10::BFloat16`` passed as they are)."""


def _none() -> torch.Tensor:
    """An output not asked for, ``at::empty({0}, options)``: no block."""
    return torch.empty((0,), dtype=torch.long, device="meta")


Shaped = Callable[..., tuple[torch.Tensor, ...]]
"""The plan's answer for an operator's output shapes."""


class Unique:
    """``unique``'s and ``unique_consecutive``'s blocks on the planned device: scratch through
    ``malloc`` and ``free``, outputs made within ``within`` (the mode that gives each new
    storage its block) at full length and shrunk; none for a tensor that is not
    ``planned`` (the script's own ``meta``, which has no memory on a GPU either)."""

    def __init__(
        self,
        within: AbstractContextManager[Any],
        malloc: Callable[[int], Any],
        free: Callable[[Any], None],
        capability: tuple[int, int],
        planned: Callable[[torch.Tensor], bool],
    ) -> None:
        self._within = within
        self._malloc = malloc
        self._free = free
        self._capability = capability
        self._planned = planned

    def answers(self, shapes: Shapes) -> dict[Any, Callable[..., Any]]:
        """The operators' answers on the planned device, each making what CUDA makes for the
        output shapes ``shapes`` answers."""
        return {
            UNIQUE2: functools.partial(self.unique2, shapes.unique),
            UNIQUE_CONSECUTIVE: functools.partial(self.consecutive, shapes.unique_consecutive),
            UNIQUE_DIM: functools.partial(self.unique_dim, shapes.unique_dim),
            UNIQUE_DIM_CONSECUTIVE: functools.partial(
                self.dim_consecutive, shapes.unique_dim_consecutive
            ),
        }

    def unique2(
        self,
        shaped: Shaped,
        tensor: torch.Tensor,
        sorted: bool = True,
        return_inverse: bool = False,
        return_counts: bool = False,
    ) -> tuple[torch.Tensor, ...]:
        """``_unique2`` (``torch.unique`` without ``dim``): CUDA sorts whatever ``sorted``
        says."""
        found = shaped(tensor, sorted, return_inverse, return_counts)
        return self._unique(found, tensor, False, return_inverse, return_counts)

    def consecutive(
        self,
        shaped: Shaped,
        tensor: torch.Tensor,
        return_inverse: bool = False,
        return_counts: bool = False,
        dim: int | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """``unique_consecutive``, along ``dim`` as ``unique_dim_consecutive`` where given."""
        found = shaped(tensor, return_inverse, return_counts, dim)
        if dim is None:
            return self._unique(found, tensor, True, return_inverse, return_counts)
        return self._dim(found, tensor, dim, True, return_inverse, return_counts)

    def unique_dim(
        self,
        shaped: Shaped,
        tensor: torch.Tensor,
        dim: int,
        sorted: bool = True,
        return_inverse: bool = False,
        return_counts: bool = False,
    ) -> tuple[torch.Tensor, ...]:
        """``unique_dim`` (``torch.unique`` with ``dim``)."""
        found = shaped(tensor, dim, sorted, return_inverse, return_counts)
        return self._dim(found, tensor, dim, False, return_inverse, return_counts)

    def dim_consecutive(
        self,
        shaped: Shaped,
        tensor: torch.Tensor,
        dim: int,
        return_inverse: bool = False,
        return_counts: bool = False,
    ) -> tuple[torch.Tensor, ...]:
        """``unique_dim_consecutive``."""
        found = shaped(tensor, dim, return_inverse, return_counts)
        return self._dim(found, tensor, dim, True, return_inverse, return_counts)

    def _made(self, full: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """An output made as CUDA makes it, ``full`` long, and shrunk by ``resize_`` to
        ``like``'s shape: its storage, and block, stay full."""
        with torch._C.DisableTorchFunction(), self._within:
            made = torch.empty(full, dtype=like.dtype, device="meta")
        return made.resize_(like.shape)

    def _cub(self, size: int | None) -> None:
        """CUB's storage taken and freed (``CUB_WRAPPER``), or Thrust's (a
        ``temporary_array`` through ``ThrustAllocator``), where it is sized."""
        if size is not None:
            self._free(self._malloc(size))

    def _unique(
        self,
        shaped: tuple[torch.Tensor, ...],
        tensor: torch.Tensor,
        consecutive: bool,
        inverse: bool,
        counts: bool,
    ) -> tuple[torch.Tensor, ...]:
        """``unique_cuda_template``'s blocks for ``tensor``, the outputs shaped as
        ``shaped``."""
        count = tensor.numel()
        if count == 0 or not self._planned(tensor):
            return shaped
        size = tensor.element_size()
        held = [] if tensor.is_contiguous() else [self._malloc(count * size)]
        if tensor.dtype == torch.bool and not consecutive:
            return self._booleans(shaped, tensor, inverse, held)
        malloc, free, capability = self._malloc, self._free, self._capability
        if not consecutive:
            held.append(malloc(count * size))
            if not inverse:
                self._cub(
                    cub_storage.radix_sort_keys(
                        count, 8 * size, capability, size, tensor.dtype == torch.float32
                    )
                )
            else:
                positions = malloc(count * _INDEX)
                held.append(malloc(count * _INDEX))
                self._cub(cub_storage.radix_sort_pairs(count, 8 * size, capability, size))
                free(positions)
        values, inverse_out, counts_out = shaped
        made_inverse = self._made(tuple(tensor.shape), inverse_out) if inverse else inverse_out
        if inverse:
            running = malloc(count * (4 if consecutive else _INDEX))
            self._cub(cub_storage.inclusive_sum_truncating(count, capability))
            free(running)
        made_values = self._made((count,), values)
        length = malloc(_INDEX)
        if counts:
            made_counts = self._made((count,), counts_out)
            self._cub(cub_storage.run_length_encode(count))
        else:
            made_counts = counts_out
            item = 4 if tensor.dtype == torch.bool else size
            primitive = tensor.dtype not in _NON_PRIMITIVE
            self._cub(cub_storage.select_unique(count, item, primitive, capability))
        free(length)
        for block in reversed(held):
            free(block)
        return made_values, made_inverse, made_counts

    def _booleans(
        self,
        shaped: tuple[torch.Tensor, ...],
        tensor: torch.Tensor,
        inverse: bool,
        held: list[Any],
    ) -> tuple[torch.Tensor, ...]:
        """``UniqueCub<bool>``: the count of ``true`` values and its reduction's storage, the
        values (2) and counts (2, whatever ``return_counts`` asks) shrunk to the kinds
        present, then the inverse."""
        values, inverse_out, _ = shaped
        true_count = self._malloc(_COUNT_TRUE)
        self._cub(cub_storage.reduce_sum(tensor.numel()))
        made_values = self._made((2,), values)
        kinds = torch.empty(values.shape, dtype=torch.long, device="meta")
        made_counts = self._made((2,), kinds)
        made_inverse = self._made(tuple(tensor.shape), inverse_out) if inverse else inverse_out
        self._free(true_count)
        for block in reversed(held):
            self._free(block)
        return made_values, made_inverse, made_counts

    def _dim(
        self,
        shaped: tuple[torch.Tensor, ...],
        tensor: torch.Tensor,
        dim: int,
        consecutive: bool,
        inverse: bool,
        counts: bool,
    ) -> tuple[torch.Tensor, ...]:
        """``unique_dim_cuda_template``'s blocks for ``tensor`` along ``dim``, Thrust's
        temporaries among them (:mod:`~memforensics.plan.thrust_storage`)."""
        slices = tensor.shape[dim] if tensor.dim() else 0
        if slices == 0 or 0 in tensor.shape or not self._planned(tensor):
            return shaped
        malloc, free, capability = self._malloc, self._free, self._capability
        moved = tensor.movedim(dim, 0)
        held = [] if moved.is_contiguous() else [malloc(tensor.numel() * tensor.element_size())]
        held.append(malloc(slices * _INDEX))
        if not consecutive:
            self._cub(thrust_storage.merge_sort_keys(slices, capability))
        values, inverse_out, counts_out = shaped
        made_inverse, made_counts = _none(), _none()  # CUDA's, where not asked for
        if inverse:
            running = malloc(slices * _INDEX)
            made_inverse = self._made((slices,), inverse_out)
            self._cub(thrust_storage.adjacent_difference())
            self._cub(thrust_storage.inclusive_sum(slices, capability))
            free(running)
        if not counts:
            self._cub(thrust_storage.unique(slices))
        else:
            ends = malloc((slices + 1) * _INDEX)
            self._cub(thrust_storage.unique_by_key(slices, capability))
            made_counts = self._made(tuple(counts_out.shape), counts_out)
            self._cub(thrust_storage.adjacent_difference())
            free(ends)
        made_values = self._made(tuple(values.shape), values)
        for block in reversed(held):
            free(block)
        return made_values, made_inverse, made_counts
