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
most as many as they hold distinct (:mod:`~memforensics.plan.picks`); of indices along a
dimension of size ``E`` (:mod:`~memforensics.plan.routing`: ``argmax`` over a classifier's ``E``
classes, a router's ``topk``), ``min(n, E)`` distinct, every class a balanced routing gives
(a metric's check that predictions hold no more classes than it was told passes, as on a
GPU). ``bincount`` has no
such bound (its length is the largest value plus one): of unknown values it has
``minlength`` bins, at least one, as CUDA's kernel gives when its own read of the largest
value (``self.max().item()``, torch's own code) reads zero, as every read by torch's code
does in a plan; said once.
"""

from __future__ import annotations

from typing import Any, TypeGuard

import torch

from memforensics.plan.known import MASK_DTYPES, Known
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
CLASSES = (
    "unique of indices along a dimension of E (an argmax over E classes) holds at most E "
    "distinct values, every class a balanced routing gives"
)
BINS = "bincount of values the script's own values do not decide has minlength bins (at least one)"

_META = torch.device("meta")
_INDEX = torch.ops.aten.index.Tensor
MASKED_SELECT = torch.ops.aten.masked_select.default
MASKED = frozenset(
    (
        _INDEX,
        MASKED_SELECT,
        torch.ops.aten.index_put_.default,
        torch.ops.aten._index_put_impl_.default,
    )
)
"""The operators whose CUDA kernels run ``nonzero`` of a mask inside
(:meth:`Shapes.inner_nonzeros`); ``index_put`` clones first, before it (made only where it
sorts, after its output: :class:`~memforensics.plan.kernel_scratch.SortedIndexing`)."""


def _empty(shape: Any, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=_META)


def _is_mask(index: object) -> TypeGuard[torch.Tensor]:
    """Whether ``index`` is a mask: a boolean one, or a ``uint8`` one."""
    return isinstance(index, torch.Tensor) and index.dtype in MASK_DTYPES


def _as_bool(index: torch.Tensor | None) -> torch.Tensor | None:
    """A ``uint8`` mask as the boolean one it indexes as, for ``meta``'s ``index``, which
    refuses ``uint8``; any other index as it is."""
    if index is None or index.dtype != torch.uint8:
        return index
    return _empty(index.shape, torch.bool)


def _broadcast(tensor: torch.Tensor, mask: torch.Tensor) -> torch.Size:
    """The shape ``masked_select`` selects over."""
    shape: torch.Size = torch.broadcast_shapes(tensor.shape, mask.shape)
    return shape


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
        return _empty((self._selected(tensor, mask),), tensor.dtype)

    def _selected(self, tensor: torch.Tensor, mask: torch.Tensor) -> int:
        """How many elements ``mask`` selects of ``tensor`` over their broadcast shape."""
        shape = _broadcast(tensor, mask)
        found = self.known.sized(mask)
        if found is not None:
            return int(torch.count_nonzero(found.broadcast_to(shape)))
        if mask.shape == shape:
            return self._at_most(mask)
        self._bound()
        return int(shape.numel())

    def _mask_count(self, mask: torch.Tensor) -> int | None:
        """How many positions a mask selects: known, or bounded where it is
        one-dimensional or a test of a router's choices; None where it takes its upper bound."""
        known = self.known.count(mask) if mask.is_meta else int(mask.count_nonzero())
        if known is not None:
            return known
        if mask.dim() == 1 or self.known.routing.share(mask) is not None:
            return self._at_most(mask)
        return None

    def index(self, tensor: torch.Tensor, indices: list[torch.Tensor | None]) -> torch.Tensor:
        """Indexing (``x[mask]``): a known mask (boolean or ``uint8``) selects what it holds (its
        coordinates index instead); an unknown one takes its upper bound."""
        if not any(_is_mask(i) for i in indices):
            return _INDEX(tensor, indices)
        replaced: list[torch.Tensor | None] = []
        for index in indices:
            if not _is_mask(index):
                replaced.append(index)
                continue
            count = self._mask_count(index)
            if count is None:
                self._bound()
                return _INDEX(tensor, [_as_bool(i) for i in indices])
            replaced.extend(_empty((count,), torch.long) for _ in range(index.dim()))
        return _INDEX(tensor, replaced)

    def inner_nonzeros(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> list[tuple[torch.Tensor, int]]:
        """The masks (boolean or ``uint8``) on the device whose ``nonzero`` CUDA runs inside
        ``func``, each with the positions it gives (as its answer counts them, every element
        where it takes its upper bound): ``expandTensors`` (``IndexingUtils.h``) replaces each
        mask of ``index`` and of ``index_put_`` by its ``nonzero`` (an accumulating one's in
        ``makeLinearIndex``, after its output); ``masked_select_out_cuda_impl`` indexes by the
        mask broadcast to the data's shape. A non-accumulating ``index_put_`` of one mask and
        a value of one element on the host is ``masked_fill_`` instead
        (``canDispatchToMaskedFill``), as the number ``x[mask] = 0`` is
        (:mod:`~memforensics.plan.assigned`)."""
        if func is MASKED_SELECT:
            tensor, mask = args[0], args[1]
            if not (isinstance(mask, torch.Tensor) and mask.is_meta):
                return []
            shape = _broadcast(tensor, mask) or torch.Size((1,))
            flags = mask.unsqueeze(0) if mask.dim() == 0 else mask
            return [(flags.expand(shape), self._selected(tensor, mask))]
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        masks = [i for i in indices if _is_mask(i) and i.is_meta and i.dim() > 0]
        if not masks:
            return []
        if func is not _INDEX:
            values = args[2] if len(args) > 2 else kwargs.get("values")
            accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
            defined = [i for i in indices if isinstance(i, torch.Tensor)]
            if (
                not accumulate
                and isinstance(values, torch.Tensor)
                and values.numel() == 1
                and not values.is_meta  # on the host
                and len(defined) == 1
                and defined[0] is masks[0]
            ):
                return []
        found = []
        for mask in masks:
            count = self._mask_count(mask)
            found.append((mask, mask.numel() if count is None else count))
        return found

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
        were gathered from hold (:meth:`~memforensics.plan.nonzero.NonzeroBounds.distinct`);
        indices along a dimension of ``E`` (an ``argmax`` over a classifier's ``E`` classes)
        at most ``E``, every class a balanced routing gives; else every element distinct."""
        found = self.known.value(tensor)
        if found is not None:
            computed = torch.ops.aten._unique2(found, sorted, return_inverse, return_counts)
            return _like(computed)
        numel = self.known.bounds.distinct(tensor)
        classes = self.known.routing.classes(tensor)
        if numel is not None:
            self.notes.once("nonzero", NONZERO)
        elif classes is not None:
            self.notes.once("classes", CLASSES)
            numel = min(tensor.numel(), classes)
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

    def unique_dim(
        self,
        tensor: torch.Tensor,
        dim: int,
        sorted: bool = True,
        return_inverse: bool = False,
        return_counts: bool = False,
    ) -> tuple[torch.Tensor, ...]:
        """``unique`` along ``dim``: the distinct slices; every slice distinct when
        unknown."""
        found = self.known.value(tensor)
        if found is not None:
            computed = torch.ops.aten.unique_dim(found, dim, sorted, return_inverse, return_counts)
            return _like(computed)
        return self.unique_consecutive(tensor, return_inverse, return_counts, dim)

    def unique_dim_consecutive(
        self,
        tensor: torch.Tensor,
        dim: int,
        return_inverse: bool = False,
        return_counts: bool = False,
    ) -> tuple[torch.Tensor, ...]:
        """``unique_consecutive`` along ``dim``."""
        return self.unique_consecutive(tensor, return_inverse, return_counts, dim)
