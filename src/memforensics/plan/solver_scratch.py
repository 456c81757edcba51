"""What CUDA's linear-algebra kernels allocate through the caching allocator beside their
outputs, where shapes and dtypes alone size it.

The structured ``linalg`` operators make their outputs first (their ``meta`` forms make those
alone); the CUDA kernels (``aten/src/ATen/native/BatchLinearAlgebra.cpp``,
``aten/src/ATen/native/cuda/linalg/BatchLinearAlgebra.cpp`` and ``BatchLinearAlgebraLib.cpp``)
then take, in this order:

- ``_linalg_check_errors``: ``infos.any()``, a one-byte ``bool`` read back with ``.item()``
  and freed at once; ``linalg_cholesky_ex(check_errors=True)``, ``_linalg_eigh`` and
  ``_linalg_svd`` run it inside, last;
- ``linalg_cholesky_ex`` on a batch (``cholesky_helper_cusolver``: ``potrfBatched`` past one
  matrix): the batch's pointer array, ``get_device_pointers``' ``arange`` of one ``int64`` a
  matrix;
- ``linalg_solve_triangular`` on more than 8 matrices or matrices narrower than 64
  (``triangular_solve_kernel``'s ``triangular_solve_batched_cublas``): the pointer arrays of
  ``A`` and of the solution;
- ``_linalg_eigh``: without eigenvectors (``linalg_eigvalsh``), ``A``'s column-major clone
  (``cloneBatchedColumnMajor``), then ``info``, ``at::zeros`` of one ``int`` a matrix, both
  held until it returns;
- ``_linalg_svd`` with the default driver (``gesvdj``, ``svd_cusolver``): ``info``, then
  ``A``'s column-major clone, held while the solver runs; matrices of 32 or fewer rows and
  columns go to ``gesvdjBatched`` (``svd_cusolver_gesvdjBatched``), which takes the square ``U``
  (more rows) or ``V`` (more columns) the kernel writes where reduced vectors are asked of a
  rectangular batch, and, without vectors, ``U`` and ``V`` of the whole batch
  (``batch x m x m``, ``batch x n x n``); larger ones go to ``gesvdj``, which without vectors
  takes one matrix's (``m x k``, ``n x k``);
- ``linalg_qr``: ``tau`` (``A.new_empty``, ``k`` values a matrix), held until it returns; a
  column-major clone of ``A`` where neither ``Q`` nor ``R`` holds an ``m x n`` matrix (mode
  ``"r"`` of a tall ``A``); where ``geqrf_kernel`` picks ``geqrf_batched_cublas`` (at most
  256 rows and at least ``max(2, m / 16)`` matrices), the pointer arrays of the matrices and of
  ``tau``, else looped ``geqrf``'s one-``int`` ``infos``; then, where ``Q`` is asked,
  ``orgqr``'s one-``int`` ``info``; each freed as its call returns;
- ``_linalg_solve_ex`` (``linalg.solve``) and ``linalg_inv_ex`` (``linalg.inv``, a solve of the
  identity in place, which makes the factors ``LU`` and ``pivots`` it does not return): where
  every build factors a batch with ``getrfBatched``, its pointer array; then what
  ``lu_solve_kernel``'s heuristic takes, by the order ``n``, the right-hand sides ``k`` and the
  batch: ``getrsBatched``'s two pointer arrays, or ``lu_solve_triangular``'s permutations,
  permuted or cloned solution and triangular solves (:func:`_lu_solve_triangular`);
- ``linalg_lu_solve`` (``linalg.lu_solve``, ``lu_solve``): ``LU``'s column-major clone where it
  is not F-contiguous (``borrow_else_clone``), held until it returns, then the LU solve as for
  ``linalg.solve``, transposed where ``adjoint`` is asked;
- ``linalg_lu_factor_ex`` (``linalg.lu_factor``): ``getrfBatched``'s pointer array where every
  build factors a batch with it, then ``check_errors``' ``any``;
- ``_linalg_det`` and ``_linalg_slogdet`` (``linalg.det``, ``linalg.slogdet``, ``logdet``): the
  LU ``info`` (``at::empty({0})``, one ``int`` a matrix once ``linalg_lu_factor_ex_out`` sizes
  it), held until they return, ``getrfBatched``'s pointer array, then the permutation's sign
  (``lu_det_P``, :func:`_det_p`) and the diagonal's product (det: ``prod``; slogdet: ``sgn``,
  its ``prod``, then ``abs`` for the logarithm's ``sum``).

Each is freed as its C++ scope ends, the rest as the operator returns. The workspaces cuSOLVER
sizes on the device (``*_bufferSize``: ``potrf``, ``getrf``, ``geqrf``, ``orgqr``, ``syevd``,
``syevj``, ``gesvdj``) are not taken, nor the paths a build with MAGMA may take instead
(``lu_factor`` of larger batches, ``lu_solve`` of order 8 or less), nor
``linalg_lu_factor_ex``'s identity pivots without pivoting. Where one call's arguments are
temporaries, they are made right to left, as
GCC, which builds PyTorch's Linux wheels, evaluates them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

_A = torch.ops.aten
CHECK_ERRORS = _A._linalg_check_errors.default
CHOLESKY = _A.linalg_cholesky_ex.default
SOLVE_TRIANGULAR = _A.linalg_solve_triangular.default
EIGH = _A._linalg_eigh.default
SVD = _A._linalg_svd.default
QR = _A.linalg_qr.default
SOLVE = _A._linalg_solve_ex.default
INVERSE = _A.linalg_inv_ex.default
LU_FACTOR = _A.linalg_lu_factor_ex.default
DET = _A._linalg_det.default
SLOGDET = _A._linalg_slogdet.default
LU_SOLVE = _A.linalg_lu_solve.default
OPERATORS = frozenset(
    (
        CHECK_ERRORS,
        CHOLESKY,
        SOLVE_TRIANGULAR,
        EIGH,
        SVD,
        QR,
        SOLVE,
        INVERSE,
        LU_FACTOR,
        DET,
        SLOGDET,
        LU_SOLVE,
    )
)
POP = 0
"""A step that frees the latest block still held."""
UNDER = -1
"""A step that frees the block made before the latest one still held (a temporary that a copy
of it outlives)."""
_POINTER = 8
"""Bytes of one ``int64`` of ``get_device_pointers``' ``arange``."""
_INFO = 4
"""Bytes of one ``int`` of ``info``."""
_ANY = 1
"""Bytes of ``infos.any()``'s zero-dimensional ``bool``."""
_LOOPED_TRSM_BATCH, _LOOPED_TRSM_WIDTH = 8, 64
"""``triangular_solve_kernel`` loops ``trsm`` over at most this many matrices this wide or wider."""
_BATCHED_GESVDJ = 32
"""``svd_cusolver`` hands matrices with both sides at most this long to ``gesvdjBatched``."""
_BATCHED_GEQRF_ROWS = 256
"""``geqrf_kernel`` picks ``geqrf_batched_cublas`` only for matrices of at most this many rows."""
_INDEX = 8
"""Bytes of one ``int64`` of ``lu_solve_triangular``'s permutations."""
_PIVOT = 4
"""Bytes of one ``int`` of ``arange(1, n + 1, pivots.options())``."""
_FLAG = 1
"""Bytes of one ``bool`` of ``arange != pivots``."""
_COUNT = 8
"""Bytes of one ``int64`` of the pivots' ``sum(-1, dtype=kLong)`` and of the ``bool``s
``make_reduction`` casts to that type first (``self.to(in_dtype)``)."""
_REAL = frozenset((torch.float32, torch.float64))
"""The dtypes whose LU solve transposes no conjugate (a complex ``A`` is factored as it lies)."""


def _batch(shape: tuple[int, ...]) -> int:
    """``batchCount``: the number of matrices of a ``(*, m, n)`` shape."""
    return math.prod(shape[:-2])


def _argument(
    args: tuple[Any, ...], kwargs: dict[str, Any], position: int, name: str, default: Any
) -> Any:
    """An argument given by position or by name, else its schema's default."""
    if len(args) > position:
        return args[position]
    return kwargs.get(name, default)


def _stand_in(value: object) -> bool:
    """Whether ``value`` is a stand-in tensor with elements."""
    return isinstance(value, torch.Tensor) and value.is_meta and value.numel() > 0


def _cholesky(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[int]:
    """``potrfBatched``'s pointer array past one matrix, then ``check_errors``' ``any``."""
    a = args[0]
    steps = [_batch(a.shape) * _POINTER, POP] if _batch(a.shape) > 1 else []
    if _argument(args, kwargs, 2, "check_errors", False):
        steps += [_ANY, POP]
    return steps


def _solve_triangular(args: tuple[Any, ...]) -> list[int]:
    """``trsmBatched``'s two pointer arrays (``A``'s, then the solution's) where
    ``triangular_solve_kernel`` does not loop ``trsm``; none where ``A`` and ``B`` broadcast
    their batches (the copies ``linalg_solve_triangular_out`` then makes are not modelled)."""
    a, b = args[0], args[1]
    if not (_stand_in(b) and a.shape[:-2] == b.shape[:-2]):
        return []
    batch = _batch(a.shape)
    if batch <= _LOOPED_TRSM_BATCH and a.shape[-1] >= _LOOPED_TRSM_WIDTH:
        return []
    return [batch * _POINTER, batch * _POINTER]


def _eigh(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[int]:
    """Without eigenvectors, ``A``'s column-major clone the solver works in (with them, it
    works in the eigenvector output); then ``info`` and ``_linalg_check_errors``' ``any``."""
    a = args[0]
    vectors = bool(_argument(args, kwargs, 2, "compute_v", True))
    clone = [] if vectors else [a.numel() * a.element_size()]
    return [*clone, max(1, _batch(a.shape)) * _INFO, _ANY, POP]


def _svd(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[int]:
    """``info``, ``A``'s clone and the matrices ``gesvdjBatched`` or ``gesvdj`` take for
    themselves, then ``_linalg_check_errors``' ``any``; ``info`` alone for a driver other than
    ``gesvdj``."""
    a = args[0]
    full = bool(_argument(args, kwargs, 1, "full_matrices", False))
    vectors = bool(_argument(args, kwargs, 2, "compute_uv", True))
    driver = kwargs.get("driver")
    info = max(1, _batch(a.shape)) * _INFO
    if driver not in (None, "gesvdj"):
        return [info]
    m, n = a.shape[-2], a.shape[-1]
    k, batch, size = min(m, n), _batch(a.shape), a.element_size()
    steps = [info, a.numel() * size]
    if m <= _BATCHED_GESVDJ and n <= _BATCHED_GESVDJ:
        square = vectors and not full and m != n
        if square:
            steps.append(batch * max(m, n) ** 2 * size)
        if not vectors:
            steps += [batch * m * m * size, batch * n * n * size, POP, POP]
        if square:
            steps.append(POP)
    elif not vectors:
        steps += [m * k * size, n * k * size, POP, POP]
    return [*steps, POP, _ANY, POP]


def _qr(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[int]:
    """``tau``, the clone of ``A`` geqrf works in where neither output holds it, then
    ``geqrf_batched_cublas``' pointer arrays or looped ``geqrf``'s one ``int`` of ``infos``
    (``apply_geqrf``), and, where ``Q`` is asked, ``orgqr``'s (``apply_orgqr``), each freed
    as its call returns."""
    a = args[0]
    mode = _argument(args, kwargs, 1, "mode", "reduced")
    m, n = a.shape[-2], a.shape[-1]
    batch, size = _batch(a.shape), a.element_size()
    steps = [batch * min(m, n) * size]
    if mode == "r" and m > n:
        steps.append(a.numel() * size)
    if m <= _BATCHED_GEQRF_ROWS and batch >= max(2, m // 16):
        steps += [batch * _POINTER, batch * _POINTER, POP, POP]
    else:
        steps += [_INFO, POP]
    if mode != "r":
        steps += [_INFO, POP]
    return steps


def _trsm(batch: int, n: int) -> list[int]:
    """One ``linalg_solve_triangular_out`` on an F-contiguous solution and factor, as
    ``lu_solve_triangular`` runs it: ``trsmBatched``'s pointer arrays where
    ``triangular_solve_kernel`` does not loop ``trsm``, freed as it returns."""
    if batch <= _LOOPED_TRSM_BATCH and n >= _LOOPED_TRSM_WIDTH:
        return []
    return [batch * _POINTER, batch * _POINTER, POP, POP]


def _lu_solve_triangular(batch: int, n: int, solution: int, transposed: bool) -> list[int]:
    """``lu_solve_kernel``'s ``lu_solve_triangular``: the permutation, ``arange(n)`` made
    contiguous over the batch (a copy, the ``arange`` then freed, past one matrix); without a
    transpose the identity ``arange(n)``, the inverse permutation (``perm.scatter``) and ``B``
    permuted (``B.scatter``, ``solution`` bytes) before the two triangular solves; with one the
    two solves, then ``B.clone()`` for the permuting ``scatter_``, freed at once."""
    found = [n * _INDEX]
    if batch > 1:
        found += [batch * n * _INDEX, UNDER]
    if transposed:
        return [*found, *_trsm(batch, n), *_trsm(batch, n), solution, POP]
    return [*found, n * _INDEX, batch * n * _INDEX, solution, *_trsm(batch, n), *_trsm(batch, n)]


def _lu_solve(batch: int, n: int, k: int, solution: int, transposed: bool) -> list[int]:
    """What ``lu_solve_kernel``'s default heuristic takes for ``batch`` systems of order ``n``
    with ``k`` right-hand sides: ``lu_solve_batched_cublas``' two pointer arrays (``getrsBatched``
    for the factors and the solution) or :func:`_lu_solve_triangular`; nothing modelled where it
    loops ``getrs`` (``lu_solve_looped_cusolver``) or where a build with MAGMA may pick MAGMA
    (``n <= 8``, ``k != n``)."""
    cublas = [batch * _POINTER, batch * _POINTER, POP, POP]
    if n == k:
        if n <= 16:
            return cublas
        return _lu_solve_triangular(batch, n, solution, transposed)
    if n <= 8:
        return []
    if n <= 64:
        if batch <= 2 and (k <= 64 or transposed or n <= 32):
            return []
        return cublas if k <= 8 else _lu_solve_triangular(batch, n, solution, transposed)
    if n <= 128:
        if batch <= 2 and k <= 2:
            return []
        return cublas if k <= 2 else _lu_solve_triangular(batch, n, solution, transposed)
    return _lu_solve_triangular(batch, n, solution, transposed)


def _lu_factor(batch: int, n: int) -> list[int]:
    """``getrfBatched``'s pointer array where every build factors a batch with it: square
    matrices of order 16 or less, or 128 or less in batches of 16 or fewer, which a build with
    MAGMA hands to cuSOLVER too (``lu_factor``), whose ``lu_factor_batched_cublas`` takes them
    short of 512 rows; looped ``getrf`` (one matrix) takes only its workspace."""
    if batch > 1 and (n <= 16 or (n <= 128 and batch <= 16)):
        return [batch * _POINTER, POP]
    return []


def _solve(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[int]:
    """``_linalg_solve_ex_out``: the factorisation's pointer array (:func:`_lu_factor`),
    ``check_errors``' ``any``, then the LU
    solve (:func:`_lu_solve`), which transposes where ``A`` is contiguous and real (it factors
    ``A.mT()``); nothing more modelled for a right-side solve, for batches that broadcast (the
    factors' copy ``maybe_expand_lu`` makes) or for complex systems."""
    a, b = args[0], args[1]
    left = bool(_argument(args, kwargs, 2, "left", True))
    checked = bool(_argument(args, kwargs, 3, "check_errors", False))
    found = _lu_factor(_batch(a.shape), a.shape[-1]) + ([_ANY, POP] if checked else [])
    if not (_stand_in(b) and left and a.dtype in _REAL):
        return found
    vector = b.dim() == 1 or (b.dim() == a.dim() - 1 and b.shape == a.shape[:-1])
    shape = (*b.shape, 1) if vector else tuple(b.shape)
    if tuple(a.shape[:-2]) != shape[:-2]:
        return found
    solution = math.prod(shape) * b.element_size()
    n, k = a.shape[-1], shape[-1]
    return [*found, *_lu_solve(_batch(shape), n, k, solution, a.is_contiguous())]


def _inverse(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[int]:
    """``linalg_inv_ex_out``, a ``linalg_solve_ex_out`` of the identity in place: the factors
    ``LU`` and ``pivots`` it makes (``new_empty``, sized by ``_linalg_solve_ex``), held until it
    returns, the factorisation's pointer array (:func:`_lu_factor`), the LU solve of ``n``
    right-hand sides (:func:`_solve`), then ``check_errors``' ``any``."""
    a = args[0]
    checked = bool(_argument(args, kwargs, 1, "check_errors", False))
    batch, n, size = _batch(a.shape), a.shape[-1], a.element_size()
    found = [a.numel() * size, batch * n * _INFO, *_lu_factor(batch, n)]
    if a.dtype in _REAL:
        found += _lu_solve(batch, n, n, a.numel() * size, a.is_contiguous())
    return [*found, _ANY, POP] if checked else found


def _linalg_lu_solve(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[int]:
    """``linalg_lu_solve_out``: ``LU``'s column-major clone where ``LU`` is not F-contiguous,
    then the LU solve (:func:`_lu_solve`) of ``B`` copied into the F-contiguous solution,
    transposed where ``adjoint``; nothing for an empty solution, which returns first; nothing
    more modelled for a right-side or complex solve or for batches that broadcast
    (``maybe_expand_lu``'s copy)."""
    lu, b = args[0], args[2]
    left = bool(_argument(args, kwargs, 3, "left", True))
    adjoint = bool(_argument(args, kwargs, 4, "adjoint", False))
    if not _stand_in(b):
        return []
    found = [] if lu.mT.is_contiguous() else [lu.numel() * lu.element_size()]
    if not (left and lu.dtype in _REAL and lu.shape[:-2] == b.shape[:-2]):
        return found
    solution = b.numel() * b.element_size()
    return [*found, *_lu_solve(_batch(b.shape), lu.shape[-1], b.shape[-1], solution, adjoint)]


def _lu_factor_ex(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[int]:
    """``linalg_lu_factor_ex_out``: the factorisation's pointer array (:func:`_lu_factor`; a
    rectangular batch is looped, ``lu_factor_looped_cusolver``), then ``check_errors``' ``any``."""
    a = args[0]
    m, n = a.shape[-2], a.shape[-1]
    found = _lu_factor(_batch(a.shape), n) if m == n else []
    if _argument(args, kwargs, 2, "check_errors", False):
        found += [_ANY, POP]
    return found


def _det_p(batch: int, n: int) -> list[int]:
    """``lu_det_P``: ``arange(1, n + 1)``, its ``!=`` with the pivots, their ``sum`` in
    ``int64`` (over a copy of the ``bool``s cast to it, freed as the ``sum`` returns); the
    ``arange`` and the ``bool``s end with its return statement, the ``sum`` is returned."""
    return [
        n * _PIVOT,
        batch * n * _FLAG,
        batch * _COUNT,
        batch * n * _COUNT,
        POP,
        UNDER,
        UNDER,
    ]


def _determinant(args: tuple[Any, ...], logarithm: bool) -> list[int]:
    """``_linalg_det_out`` or ``_linalg_slogdet_out``: ``info`` and the factorisation's pointer
    array, then det's ``mul_out(result, lu_det_P(pivots), prod(diag))`` (the ``prod`` made
    first), or slogdet's ``mul_out(sign, diag.sgn().prod(-1), lu_det_P(pivots))`` (the sign of
    the permutation first) and ``sum_out(logabsdet, diag.abs().log_(), -1)``, each statement's
    temporaries freed as it ends."""
    a = args[0]
    batch, n, size = _batch(a.shape), a.shape[-1], a.element_size()
    found = [max(1, batch) * _INFO, *_lu_factor(batch, n)]
    if not logarithm:
        return [*found, batch * size, *_det_p(batch, n), POP, POP]
    real = size // 2 if a.is_complex() else size
    return [
        *found,
        *_det_p(batch, n),
        batch * n * size,
        batch * size,
        POP,
        POP,
        POP,
        batch * n * real,
        POP,
    ]


def steps(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[int]:
    """What ``func`` takes after its outputs, in order: a positive number allocates that many
    bytes, :data:`POP` frees the latest block still held; the rest are freed in the reverse of
    their making as the operator returns. Empty for an empty input, where each returns first."""
    first = args[0] if args else None
    if not _stand_in(first):
        return []
    if func is CHECK_ERRORS:
        return [_ANY]
    if func is CHOLESKY:
        return _cholesky(args, kwargs)
    if func is SOLVE_TRIANGULAR:
        return _solve_triangular(args)
    if func is EIGH:
        return _eigh(args, kwargs)
    if func is SVD:
        return _svd(args, kwargs)
    if func is QR:
        return _qr(args, kwargs)
    if func is SOLVE:
        return _solve(args, kwargs)
    if func is INVERSE:
        return _inverse(args, kwargs)
    if func is LU_FACTOR:
        return _lu_factor_ex(args, kwargs)
    if func is LU_SOLVE:
        return _linalg_lu_solve(args, kwargs)
    if func in (DET, SLOGDET):
        return _determinant(args, func is SLOGDET)
    return []


def after(
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    malloc: Callable[[int], Any],
    free: Callable[[Any], None],
) -> None:
    """Take and give back ``func``'s blocks beside its outputs (:func:`steps`)."""
    held: list[Any] = []
    for step in steps(func, args, kwargs):
        if step == POP:
            free(held.pop())
        elif step == UNDER:
            free(held.pop(-2))
        else:
            held.append(malloc(step))
    for block in reversed(held):
        free(block)
