"""Data-dependent shapes on the planned device: ``nonzero``, ``masked_select``, ``unique``,
``bincount`` and indexing by a boolean mask make as many elements as the values say.

Where the script's own values decide those values (:mod:`memforensics.plan.known`: a mask made
from ``arange``, from lengths copied from the host, from a fill), the shape is the one the GPU
gives, computed on the CPU copies; the output's values then are known too. So it is where a
partition of unknown values decides them (a one-hot of a router's choices, every row at class 0:
:meth:`~memforensics.plan.known.Known.sized`): its slices' sizes sum to its rows. Otherwise it takes
its upper bound (every element counted, selected, distinct), said once: memory is never
under-counted for want of values. ``unique`` of values the script decided, gathered at
unknown positions (a detector's class labels at the boxes a score threshold keeps), has at
most as many as they hold distinct (:mod:`~memforensics.plan.picks`). ``bincount`` has no
such bound (its length is the largest value plus one): of unknown values it has
``minlength`` bins, at least one, as CUDA's kernel gives when its own read of the largest
value (``self.max().item()``, torch's own code) reads zero, as every read by torch's code
does in a plan; said once.
"""

from __future__ import annotations

from typing import Any

import torch

from memforensics.plan.known import Known
from memforensics.plan.periodic import covers
from memforensics.plan.values import Notes

BOUND = "a data-dependent shape takes its upper bound in a plan"
NONZERO = (
    "a mask of unknown values selects at most the entries the script's code set in it "
    "(a sampler's picks), or of values gathered at such picks those whose tests let them "
    "through, never more than it holds; values the script's own code decides, gathered at "
    "unknown positions, only those values (unique)"
)
SHARE = (
    "a test of a router's unknown choices against one expert selects its share of a balanced "
    "routing (the choices spread evenly over the experts)"
)
BINS = "bincount of values the script's own values do not decide has minlength bins (at least one)"

_META = torch.device("meta")
_INDEX = torch.ops.aten.index.Tensor


def _empty(shape: Any, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=_META)


def _like(computed: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """Stand-ins shaped as the results computed on the CPU."""
    return tuple(_empty(t.shape, t.dtype) for t in computed)


class Shapes:
    """The operators whose output's shape depends on their input's values, answered on the
    planned device from the known values where there are some, else at their upper bound."""

    def __init__(self, notes: Notes, known: Known) -> None:
        self.notes = notes
        self.known = known

    def _bound(self) -> None:
        self.notes.once("bound", BOUND)

    def _at_most(self, tensor: torch.Tensor) -> int:
        """How many of ``tensor``'s unknown elements can be non-zero: its bound where the
        script's code bounds it (:mod:`~memforensics.plan.nonzero`), else all of them, said;
        of a test of indices against one class, its share (:mod:`~memforensics.plan.routing`)."""
        share = self.known.routing.share(tensor)
        if share is not None:
            self.notes.once("share", SHARE)
            return share
        bound = self.known.bounds.at_most(tensor)
        if bound is not None:
            self.notes.once("nonzero", NONZERO)
            return bound
        self._bound()
        return int(tensor.numel())

    def nonzero(self, tensor: torch.Tensor) -> torch.Tensor:
        """``nonzero``: ``(count, ndim)`` indices; every element counted when unknown."""
        count = self.known.count(tensor)
        if count is not None:
            return _empty((count, tensor.dim()), torch.long)
        return _empty((self._at_most(tensor), tensor.dim()), torch.long)

    def masked_select(self, tensor: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``masked_select``: the elements the mask selects over the broadcast shape; every
        one when the mask is unknown."""
        shape = torch.broadcast_shapes(tensor.shape, mask.shape)
        found = self.known.sized(mask)
        if found is not None:
            return _empty((int(torch.count_nonzero(found.broadcast_to(shape))),), tensor.dtype)
        if mask.shape == shape:
            return _empty((self._at_most(mask),), tensor.dtype)
        self._bound()
        return _empty((shape.numel(),), tensor.dtype)

    def index(self, tensor: torch.Tensor, indices: list[torch.Tensor | None]) -> torch.Tensor:
        """Indexing (``x[mask]``): a known boolean mask selects what it holds (its
        coordinates index instead); an unknown one takes its upper bound."""
        if not any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices):
            return _INDEX(tensor, indices)
        replaced: list[torch.Tensor | None] = []
        for index in indices:
            if not (isinstance(index, torch.Tensor) and index.dtype == torch.bool):
                replaced.append(index)
                continue
            known = self.known.count(index) if index.is_meta else int(index.count_nonzero())
            if known is not None:
                count = known
            elif index.dim() == 1 or self.known.routing.share(index) is not None:
                count = self._at_most(index)
            else:
                self._bound()
                return _INDEX(tensor, indices)
            replaced.extend(_empty((count,), torch.long) for _ in range(index.dim()))
        return _INDEX(tensor, replaced)

    def bincount(
        self,
        tensor: torch.Tensor,
        weights: torch.Tensor | None = None,
        minlength: int = 0,
    ) -> torch.Tensor:
        """``bincount``: one bin per value up to the largest (at least ``minlength``), counts
        in ``int64``, or sums of ``float32`` weights in ``float32`` and of others in
        ``float64`` (``_bincount_cuda``); ``minlength`` bins, at least one, when unknown."""
        found = self.known.value(tensor)
        classes = self.known.routing.classes(tensor)
        if found is not None:
            largest = int(found.max()) + 1 if found.numel() else 0
        elif classes is not None and covers(tensor):  # a router's choices, balanced
            largest = min(tensor.numel(), classes)
        else:
            self.notes.once("bins", BINS)
            largest = 1 if tensor.numel() else 0
        dtype = torch.long
        if weights is not None:
            dtype = torch.float32 if weights.dtype == torch.float32 else torch.float64
        return _empty((max(largest, minlength),), dtype)

    def unique(
        self,
        tensor: torch.Tensor,
        sorted: bool = True,
        return_inverse: bool = False,
        return_counts: bool = False,
    ) -> tuple[torch.Tensor, ...]:
        """``unique``: the distinct values; when unknown, at most as many as the values they
        were gathered from hold (:meth:`~memforensics.plan.nonzero.NonzeroBounds.distinct`),
        else every element distinct."""
        found = self.known.value(tensor)
        if found is not None:
            computed = torch.ops.aten._unique2(found, sorted, return_inverse, return_counts)
            return _like(computed)
        numel = self.known.bounds.distinct(tensor)
        if numel is not None:
            self.notes.once("nonzero", NONZERO)
        else:
            self._bound()
            numel = tensor.numel()
        return (
            _empty((numel,), tensor.dtype),
            _empty(tensor.shape if return_inverse else (0,), torch.long),
            _empty((numel if return_counts else 0,), torch.long),
        )

    def unique_consecutive(
        self,
        tensor: torch.Tensor,
        return_inverse: bool = False,
        return_counts: bool = False,
        dim: int | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """``unique_consecutive``: runs of equal elements (or slices along ``dim``) kept
        once; none equal to the one before when unknown."""
        found = self.known.value(tensor)
        if found is not None:
            computed = torch.ops.aten.unique_consecutive(
                found, return_inverse=return_inverse, return_counts=return_counts, dim=dim
            )
            return _like(computed)
        self._bound()
        if dim is None:
            out = _empty((tensor.numel(),), tensor.dtype)
            kept = tensor.numel()
        else:
            out = torch.empty_like(tensor, memory_format=torch.contiguous_format)
            kept = tensor.shape[dim]
        inverse_shape = (tensor.shape if dim is None else (kept,)) if return_inverse else (0,)
        return (
            out,
            _empty(inverse_shape, torch.long),
            _empty((kept if return_counts else 0,), torch.long),
        )

    def unique_dim_consecutive(
        self,
        tensor: torch.Tensor,
        dim: int,
        return_inverse: bool = False,
        return_counts: bool = False,
    ) -> tuple[torch.Tensor, ...]:
        """``unique_consecutive`` along ``dim``."""
        return self.unique_consecutive(tensor, return_inverse, return_counts, dim)
