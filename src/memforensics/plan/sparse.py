"""Sparse COO tensors on the planned device: a sparse embedding's gradient and what the sparse
optimizers (``SGD``, ``SparseAdam``, ``Adagrad``) do with it.

A sparse tensor holds its memory in two dense tensors, its indices and its values, which the
plan tracks as any other (:func:`parts`). PyTorch's ``meta``
device has few sparse kernels: ``clone`` keeps none of the entries, and ``coalesce``,
``sparse_mask``, adding a sparse tensor into a dense one and ``to_dense`` are missing. Those are
answered here with the shapes CUDA's kernels give, so a sparse gradient holds as many entries as
the lookups that made it, and its optimizer step runs.
"""

from __future__ import annotations

from typing import Any

import torch

from memforensics.plan.known import Known
from memforensics.plan.values import Notes

_aten = torch.ops.aten
_META = torch.device("meta")

BOUND = (
    "a sparse gradient's coalesced entries are every lookup in a plan, where the lookups' "
    "indices are not the script's own"
)


def parts(tensor: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The dense tensors that hold a sparse tensor's memory: COO's indices and values, a
    compressed layout's two index tensors and values."""
    layout = tensor.layout
    if layout == torch.sparse_coo:
        return tensor._indices(), tensor._values()
    if layout in (torch.sparse_csr, torch.sparse_bsr):
        return tensor.crow_indices(), tensor.col_indices(), tensor.values()
    if layout in (torch.sparse_csc, torch.sparse_bsc):
        return tensor.ccol_indices(), tensor.row_indices(), tensor.values()
    return ()


def _coo(like: torch.Tensor, indices: torch.Tensor, values: torch.Tensor, coalesced: bool) -> Any:
    """A sparse COO tensor of ``like``'s size and dtype over ``indices`` and ``values``."""
    return _aten._sparse_coo_tensor_with_dims_and_tensors(
        like.sparse_dim(),
        like.dense_dim(),
        list(like.shape),
        indices,
        values,
        dtype=values.dtype,
        layout=torch.sparse_coo,
        device=_META,
        is_coalesced=coalesced,
    )


def _new_values(values: torch.Tensor, nnz: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    return torch.empty((nnz, *values.shape[1:]), dtype=dtype or values.dtype, device=_META)


def new(original: Any, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """``Tensor.new(indices, values, size)`` of a sparse tensor (the sparse optimizers build
    their updates so): a sparse tensor over them, which ``meta``'s legacy constructor refuses.
    Anything else is ``original``'s."""
    if tensor.layout != torch.sparse_coo or len(args) != 3 or kwargs:
        return original(tensor, *args, **kwargs)
    indices, values, size = args
    return _aten._sparse_coo_tensor_with_dims_and_tensors(
        indices.shape[0],
        values.dim() - 1,
        list(size),
        indices,
        values,
        dtype=values.dtype,
        layout=torch.sparse_coo,
        device=_META,
    )


class Sparse:
    """Answers for the sparse operators ``meta`` lacks or gets wrong; each passes a dense
    tensor on to the operator itself."""

    def __init__(self, notes: Notes, known: Known) -> None:
        self.notes = notes
        self.known = known

    def clone(self, tensor: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """``clone``: a sparse tensor's indices and values copied, as CUDA does (``meta``
        gives one with no entries)."""
        if tensor.layout != torch.sparse_coo:
            out: torch.Tensor = _aten.clone.default(tensor, **kwargs)
            return out
        indices = tensor._indices().clone(memory_format=torch.contiguous_format)
        self.known.copied(tensor._indices(), indices)
        values = tensor._values().clone(memory_format=torch.contiguous_format)
        return _coo(tensor, indices, values, tensor.is_coalesced())  # type: ignore[no-any-return, unused-ignore]

    def coalesce(self, tensor: torch.Tensor) -> torch.Tensor:
        """``_coalesce``: one entry per distinct index; counted from the indices where the
        script's own values decide them (the lookups of a sparse embedding), else every
        entry kept."""
        indices = tensor._indices()
        nnz = tensor._nnz()
        found = self.known.value(indices)
        if found is not None and nnz:
            nnz = int(torch.unique(found, dim=1).shape[1])
        elif nnz:
            self.notes.once("sparse", BOUND)
        merged = torch.empty((indices.shape[0], nnz), dtype=indices.dtype, device=_META)
        return _coo(tensor, merged, _new_values(tensor._values(), nnz), True)  # type: ignore[no-any-return, unused-ignore]

    def sparse_mask(self, dense: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``sparse_mask``: the dense tensor's values at the mask's indices, which it shares."""
        values = _new_values(mask._values(), mask._nnz(), dense.dtype)
        return _coo(mask, mask._indices(), values, mask.is_coalesced())  # type: ignore[no-any-return, unused-ignore]

    def add_(self, tensor: torch.Tensor, other: Any, **kwargs: Any) -> torch.Tensor:
        """``add_``: a sparse tensor added into a dense one writes in place (no memory)."""
        if isinstance(other, torch.Tensor) and other.layout == torch.sparse_coo:
            return tensor
        out: torch.Tensor = _aten.add_.Tensor(tensor, other, **kwargs)
        return out

    def to_dense(self, tensor: torch.Tensor, dtype: Any = None, **kwargs: Any) -> torch.Tensor:
        """``to_dense``: a dense tensor of the sparse one's shape."""
        return torch.empty(tensor.shape, dtype=dtype or tensor.dtype, device=_META)

    def answers(self) -> dict[Any, Any]:
        """The operators answered here, for the planned device's dispatch."""
        return {
            _aten.clone.default: self.clone,
            _aten._coalesce.default: self.coalesce,
            _aten.sparse_mask.default: self.sparse_mask,
            _aten.add_.Tensor: self.add_,
            _aten._to_dense.default: self.to_dense,
        }
