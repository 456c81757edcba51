"""Sparse tensors on the planned device: a sparse embedding's gradient and what the sparse
optimizers (``SGD``, ``SparseAdam``, ``Adagrad``) do with it, a graph's adjacency times its
features, and the product of two CSR matrices.

A sparse tensor holds its memory in two dense tensors, its indices and its values, which the
plan tracks as any other (:func:`parts`). PyTorch's ``meta``
device has few sparse kernels: ``clone`` keeps none of the entries, and ``coalesce``,
``sparse_mask``, adding a sparse tensor into a dense one and ``to_dense`` are missing. Those are
answered here with the shapes CUDA's kernels give, so a sparse gradient holds as many entries as
the lookups that made it, and its optimizer step runs.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import torch

from memforensics.plan.known import Known
from memforensics.plan.values import Notes

_aten = torch.ops.aten
_META = torch.device("meta")

_COMPRESSED = (torch.sparse_csr, torch.sparse_csc)

BOUND = (
    "a sparse gradient's coalesced entries are every lookup in a plan, where the lookups' "
    "indices are not the script's own"
)
SPREAD = (
    "a product of two sparse CSR matrices whose indices are not the script's own holds in a "
    "plan the entries of matrices whose entries are spread evenly (each entry of the first "
    "meets the second's average row; at most every element), not an upper bound: a GPU makes "
    "more where a few rows hold most entries; cuSPARSE's two work buffers are not counted"
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


def copied_onto_device(tensor: Any, kwargs: dict[str, Any]) -> Any:
    """``_to_copy`` of a host sparse COO tensor onto the device (``.to("cuda")``): its indices
    and values copied, in the dtype asked for, as ``_to_copy``'s sparse branch
    (``aten/src/ATen/native/TensorConversions.cpp``) copies both onto a CUDA device, where
    its copy onto ``meta`` is ``zeros_like``, with no entries. None for any other copy."""
    if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.sparse_coo:
        return None
    if tensor.is_meta or torch.device(kwargs.get("device") or tensor.device).type != "meta":
        return None
    indices = tensor._indices().to(_META, copy=True)
    values = tensor._values().to(_META, dtype=kwargs.get("dtype") or tensor.dtype, copy=True)
    return _coo(tensor, indices, values, tensor.is_coalesced())


def transpose(
    within: AbstractContextManager[Any],
    original: Any,
    tensor: torch.Tensor,
    dim0: int = 0,
    dim1: int = 1,
) -> Any:
    """``t`` and ``transpose`` of a sparse COO tensor, as ``transpose``
    (``aten/src/ATen/native/TensorShape.cpp``) makes it: a clone, its indices and values
    copied, then ``sparse_transpose_`` swaps two rows of the clone's indices through a zeroed
    temporary row (``nnz`` int64, freed) and marks it uncoalesced; made within ``within``.
    ``meta``'s keeps no entries. Any other tensor's is the operator's own (``original``)."""
    if tensor.layout != torch.sparse_coo:
        return original(tensor) if original is _aten.t.default else original(tensor, dim0, dim1)
    dim0, dim1 = dim0 % tensor.dim(), dim1 % tensor.dim()
    with torch._C.DisableTorchFunction(), within:
        copy = tensor.clone()
        if dim0 != dim1 and copy._nnz():
            row = torch.zeros_like(copy._indices().select(0, dim0))
            del row
    if dim0 == dim1:
        return copy
    shape = list(tensor.shape)
    shape[dim0], shape[dim1] = shape[dim1], shape[dim0]
    return _aten._sparse_coo_tensor_with_dims_and_tensors(
        tensor.sparse_dim(),
        tensor.dense_dim(),
        shape,
        copy._indices(),
        copy._values(),
        dtype=tensor.dtype,
        layout=torch.sparse_coo,
        device=_META,
        is_coalesced=False,
    )


def _coo_dense_mm(
    within: AbstractContextManager[Any], first: torch.Tensor, second: torch.Tensor
) -> Any:
    """``mm`` of a sparse COO matrix by a dense one (``torch.spmm``, a graph convolution's
    adjacency times its features), which ``meta`` cannot run, with what CUDA allocates on the
    way, made within ``within`` (the mode that gives them blocks); any other ``mm`` is the
    operator's own. ``_sparse_mm`` (``aten/src/ATen/native/sparse/SparseTensorMath.cpp``) adds
    into a zeroed ``m x n`` tensor; ``s_addmm_out_sparse_dense_cuda``
    (``sparse/cuda/SparseCUDATensorMath.cu``) makes the ``m x n`` result, coalesces the
    matrix (a copy where it is not coalesced), turns its row indices into int32 CSR offsets
    (``m + 1``, through an int32 copy of the ``nnz`` row indices, freed at once) and its column
    indices into int32 (``nnz``); ``s_addmm_out_csr_sparse_dense_cuda_worker``
    (``SparseBlasLegacy.cpp``) computes into a column-major copy of the result, copied back,
    and reads the dense matrix as it is where it is row- or column-major, else a contiguous
    copy. Each temporary is freed as its function returns, the last made first. cuSPARSE's own
    buffer for the product is not known here."""
    if first.layout != torch.sparse_coo or second.layout != torch.strided:
        return _aten.mm.default(first, second)
    m, n = first.shape[0], second.shape[1]
    with torch._C.DisableTorchFunction(), within:
        zeros = second.new_zeros((m, n))
        result = second.new_empty((m, n))
        coalesced = first.coalesce()
        nnz = coalesced._nnz()
        if nnz == 0:
            del coalesced, zeros
            return result
        rows = second.new_empty((nnz,), dtype=torch.int32)
        offsets = second.new_empty((m + 1,), dtype=torch.int32)
        del rows
        columns = second.new_empty((nnz,), dtype=torch.int32)
        column_major = None if (n == 1 and m == 1) else second.new_empty((n, m))
        row_or_column_major = second.stride(1) == 1 and second.stride(0) == n
        row_or_column_major |= second.stride(0) == 1 and second.stride(1) == second.shape[0]
        copied = None if row_or_column_major else second.contiguous()
        del copied, column_major, columns, offsets, coalesced, zeros
    return result


def _blas_ordered(matrix: torch.Tensor) -> bool:
    """Whether cuSPARSE reads a dense matrix as it is: row- or column-major with a leading
    dimension at least its rows' or columns' length (``is_blas_compatible_*_order``)."""
    rows, columns = (int(size) for size in matrix.shape)
    strides: tuple[int, ...] = matrix.stride()
    row_major = strides[1] == 1 and strides[0] >= max(1, columns)
    return row_major or (strides[0] == 1 and strides[1] >= max(1, rows))


def _csr_dense_addmm(
    within: AbstractContextManager[Any], added: torch.Tensor, first: torch.Tensor, second: Any
) -> Any:
    """``addmm`` of a dense matrix and a sparse CSR (or CSC) matrix by a dense one, as CUDA
    makes it: ``addmm_sparse_compressed_dense``
    (``aten/src/ATen/native/sparse/SparseCsrTensorMath.cpp``) makes an empty result that
    ``addmm_out_sparse_compressed_cuda`` (``sparse/cuda/SparseBlas.cpp``) resizes to
    ``m x n`` (``added``'s dtype) and copies ``added`` into; where the matrix has entries,
    ``addmm_out_sparse_csr`` (``sparse/cuda/SparseBlasImpl.cpp``) makes a CSC matrix CSR
    (:func:`_csc_to_csr`) and ``spmm`` hands cuSPARSE the matrix's own int64 indices (no int32
    copies), writes into the result in place (contiguous, so no copy of it) and reads the
    dense matrix as it is where it is row- or column-major, else a contiguous copy; each is
    freed on return. cuSPARSE's work buffer (``cusparseSpMM_bufferSize``'s size, taken from
    the caching allocator) is not known here and not counted."""
    m, n = first.shape[0], second.shape[1]
    with torch._C.DisableTorchFunction(), within:
        result = added.new_empty((m, n))
    if first._nnz() and m and n:
        flipped = _csc_to_csr(within, first) if first.layout == torch.sparse_csc else None
        with torch._C.DisableTorchFunction(), within:
            copied = None if _blas_ordered(second) else second.contiguous()
        del copied, flipped
    return result


def _csc_to_csr(within: AbstractContextManager[Any], matrix: torch.Tensor) -> Any:
    """A sparse CSC matrix as CSR, as ``sparse_compressed_to_flipped``
    (``aten/src/ATen/native/TensorConversions.cpp``) makes it on CUDA for one matrix: the
    ``nnz`` offset (one element, and its ``cumsum``), the ``columns + 1`` column offsets,
    COO indices from them (``2 x nnz`` int64, through a quotient and a product of ``nnz``),
    their flat hash (``flatten_indices``: a product of ``2 x nnz``, summed), its sort, the
    indices and values gathered in order, and the row offsets from the sorted rows
    (``compressed_to_batched_compressed_indices`` zeroes them and copies in a difference).
    The CSR matrix's column indices are a row of the gathered ``2 x nnz`` indices, which it
    holds; the COO indices, their hash and its order live until the function returns, the
    other temporaries (the sort's keys among them) until the expression or lambda that made
    them ends."""
    ccol, row, values = matrix.ccol_indices(), matrix.row_indices(), matrix.values()
    rows, columns = matrix.shape
    nnz = row.shape[0]
    with torch._C.DisableTorchFunction(), within:
        wrapped = ccol.new_full((1,), nnz)
        offset = wrapped.expand(1).cumsum(-1)
        offset.sub_(wrapped)
        del wrapped
        shifted = ccol[:-1].add(offset)
        compressed = ccol.new_empty((columns + 1,))
        compressed[:-1].copy_(shifted)
        del shifted
        coo = _aten._convert_indices_from_csr_to_coo(
            compressed, row, out_int32=ccol.dtype == torch.int32, transpose=True
        )
        quotient = coo[1].div(rows, rounding_mode="trunc")
        coo[1].fmod_(rows)
        coo[0].add_(quotient * columns)
        del quotient
        strides = ccol.new_empty((2, 1), dtype=torch.int64)
        hashed = coo.mul(strides).sum(0)
        del strides
        order = hashed.sort()[1]
        ordered = coo.index_select(1, order)
        gathered = values.index_select(0, order)
        offsets = _aten._convert_indices_from_coo_to_csr(
            ordered[0], rows, out_int32=ccol.dtype == torch.int32
        )
        crow = torch.zeros_like(offsets)
        difference = offsets[1:].sub(offsets[:-1])
        crow[1:].copy_(difference)
        del difference, offsets, order, hashed, coo, compressed, offset
    return _csr(crow, ordered[1], gathered, [rows, columns])


def _csr(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, size: list[int]) -> Any:
    """A sparse CSR matrix of ``size`` over ``crow``, ``col`` and ``values``, on ``meta``."""
    return _aten._sparse_csr_tensor_unsafe(
        crow, col, values, size, dtype=values.dtype, layout=torch.sparse_csr, device=_META
    )


def _on_cpu(known: Known, matrix: torch.Tensor, values: bool) -> torch.Tensor | None:
    """``matrix`` as a CPU CSR tensor where its indices are the script's own (``values``: its
    values too, else ones, which give the same entries); None where they are not."""
    crow = known.decided(matrix.crow_indices())
    col = known.decided(matrix.col_indices())
    found = known.decided(matrix.values()) if values else None
    if crow is None or col is None or (values and found is None):
        return None
    held = found if found is not None else torch.ones(col.shape, dtype=matrix.dtype)
    return torch.sparse_csr_tensor(crow, col, held, list(matrix.shape))


class Product:
    """``mm`` of sparse matrices, which ``meta`` cannot run, with what CUDA makes on the way."""

    def __init__(self, within: AbstractContextManager[Any], notes: Notes, known: Known) -> None:
        self.within = within
        self.notes = notes
        self.known = known

    def mm(self, first: torch.Tensor, second: torch.Tensor) -> Any:
        """``mm`` of two sparse CSR matrices (:meth:`csr`), of a sparse CSR or CSC matrix by a
        dense one (:meth:`compressed_dense`), of a sparse COO matrix by a dense one
        (:func:`_coo_dense_mm`); any other ``mm`` is the operator's own."""
        if first.layout == torch.sparse_csr and second.layout == torch.sparse_csr:
            return self.csr(first, second)
        if first.layout in _COMPRESSED and second.layout == torch.strided:
            return self.compressed_dense(first, second)
        if first.layout == torch.sparse_coo and second.layout == torch.strided:
            return _coo_dense_mm(self.within, first, second)
        return _aten.mm.default(first, second)

    def compressed_dense(self, first: torch.Tensor, second: torch.Tensor) -> Any:
        """``mm`` of a sparse CSR matrix by a dense one (``csr @ x``; a CSC matrix, the
        transposed adjacency of its backward, made CSR first by :func:`_csc_to_csr`), as
        ``_sparse_csr_mm`` (``SparseCsrTensorMath.cpp``) makes it: a zeroed ``m x n`` matrix
        (the sparse matrix's dtype) that ``addmm`` adds into (:func:`_csr_dense_addmm`),
        freed on return."""
        flipped = _csc_to_csr(self.within, first) if first.layout == torch.sparse_csc else None
        with torch._C.DisableTorchFunction(), self.within:
            zeros = second.new_zeros((first.shape[0], second.shape[1]), dtype=first.dtype)
        result = _csr_dense_addmm(self.within, zeros, first if flipped is None else flipped, second)
        del zeros, flipped
        return result

    def addmm(
        self, added: torch.Tensor, first: torch.Tensor, second: torch.Tensor, **kwargs: Any
    ) -> Any:
        """``_sparse_addmm`` (``torch.sparse.mm``'s, after its zeros) of a sparse CSR or CSC
        matrix by a dense one: ``_sparse_csr_addmm``'s ``addmm`` (:func:`_csr_dense_addmm`);
        any other is the operator's own."""
        if first.layout not in _COMPRESSED or second.layout != torch.strided:
            return _aten._sparse_addmm.default(added, first, second, **kwargs)
        return _csr_dense_addmm(self.within, added, first, second)

    def dense_addmm(
        self, added: torch.Tensor, first: torch.Tensor, second: torch.Tensor, **kwargs: Any
    ) -> Any:
        """``addmm`` of a dense matrix (a bias) and a sparse CSR or CSC matrix by a dense one
        (:func:`_csr_dense_addmm`); ``NotImplemented`` for any other, which the planned
        device runs as it runs every ``addmm``."""
        if first.layout not in _COMPRESSED or second.layout != torch.strided:
            return NotImplemented
        return _csr_dense_addmm(self.within, added, first, second)

    def answers(self) -> dict[Any, Any]:
        """The operators answered here, for the planned device's dispatch."""
        return {
            _aten.mm.default: self.mm,
            _aten._sparse_addmm.default: self.addmm,
            _aten.addmm.default: self.dense_addmm,
        }

    def _entries(self, first: torch.Tensor, second: torch.Tensor) -> tuple[Any, bool]:
        """The product's entries and whether its values are known: computed on the CPU where
        both matrices' indices are the script's own (with their values where those are too),
        else their count where entries are spread evenly (:data:`SPREAD`), said once. The
        upper bound, each entry of the first meeting a full row of the second, would make a
        graph's squared adjacency dense after its first pooling, whose picks are unknown."""
        for values in (True, False):
            pair = _on_cpu(self.known, first, values), _on_cpu(self.known, second, values)
            if pair[0] is not None and pair[1] is not None:
                return pair[0] @ pair[1], values
        self.notes.once("sparse product", SPREAD)
        rows, inner, columns = first.shape[0], first.shape[1], second.shape[1]
        met = -(-first._nnz() * second._nnz() // inner) if inner else 0
        return min(rows * columns, met), False

    def csr(self, first: torch.Tensor, second: torch.Tensor) -> Any:
        """``mm`` of two sparse CSR matrices, as CUDA makes it: ``_sparse_csr_mm``
        (``aten/src/ATen/native/sparse/SparseCsrTensorMath.cpp``) adds into a zero CSR matrix
        (its ``m + 1`` int64 row offsets); ``addmm`` makes the result empty (one offset) and
        ``addmm_out_sparse_csr_dense_cuda`` (``sparse/cuda/SparseBlas.cpp``) resizes it to the
        zeros' offsets and copies them; ``spgemm`` (``sparse/cuda/SparseBlasImpl.cpp``) copies
        both matrices' offsets and column indices to int32, swaps the result's indices for
        int32 ones, and once cuSPARSE has counted the entries resizes its column indices and
        values to them. The result keeps int32 indices; the int32 copies and the zeros are
        freed as the functions return. Where a matrix has no entries the result has none."""
        rows, columns = first.shape[0], second.shape[1]
        entries: Any = 0
        valued = False
        if first._nnz() and second._nnz():
            entries, valued = self._entries(first, second)
        nnz = entries if isinstance(entries, int) else entries._nnz()
        int64, int32 = torch.int64, torch.int32
        with torch._C.DisableTorchFunction(), self.within:
            zeros = torch.zeros(rows + 1, dtype=int64, device=_META)
            empty = torch.zeros(1, dtype=int64, device=_META)
            offsets = torch.empty(rows + 1, dtype=int64, device=_META)
            del empty
            if not nnz:
                col = torch.empty(0, dtype=int64, device=_META)
                values = torch.empty(0, dtype=second.dtype, device=_META)
                del zeros
                return _csr(offsets, col, values, [rows, columns])
            copies = [
                torch.empty(matrix.shape[0] + 1, dtype=int32, device=_META)
                if part == 0
                else torch.empty(matrix._nnz(), dtype=int32, device=_META)
                for matrix in (first, second)
                for part in (0, 1)
            ]
            crow = torch.empty(rows + 1, dtype=int32, device=_META)
            del offsets
            col = torch.empty(nnz, dtype=int32, device=_META)
            values = torch.empty(nnz, dtype=second.dtype, device=_META)
            del copies, zeros
        if not isinstance(entries, int):
            self.known.computed(
                [
                    (crow, entries.crow_indices().to(int32), first.crow_indices()),
                    (col, entries.col_indices().to(int32), first.col_indices()),
                ]
            )
            if valued:
                self.known.computed([(values, entries.values(), first.values())])
        return _csr(crow, col, values, [rows, columns])


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
