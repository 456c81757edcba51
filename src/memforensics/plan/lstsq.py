"""``torch.linalg.lstsq`` on stand-ins, as CUDA's ``gels`` path makes it.

``linalg_lstsq`` is ``CompositeExplicitAutograd`` over ``linalg_lstsq.out``, which has a ``CPU``
and a ``CUDA`` kernel and no ``meta`` one, so a stand-in stops there. On CUDA only the ``gels``
driver exists (``get_default_lstsq_driver`` refuses any other). ``linalg_lstsq_out`` and
``linalg_lstsq_out_info`` (``aten/src/ATen/native/BatchLinearAlgebra.cpp``) then make, in order:

- ``infos``, ``at::zeros`` of one ``int`` a matrix of ``A``'s batch, held until it returns;
- the solution, column-major (``(*, k, max(m, n))`` transposed; ``(*, max(m, n))`` for a vector
  ``B``) with the batch of ``A`` and ``B`` broadcast, ``B`` copied into its first ``m`` rows;
  the solution returned is its first ``n`` rows, a view keeping the whole padded storage;
- ``input_working_copy``, ``copyBatchedColumnMajor(A)``, freed as ``linalg_lstsq_out_info``
  returns;
- where ``m > n``, the residuals: the rows below ``n`` squared in place and summed over the
  rows into a new ``(*, k)`` tensor (``(*, 1)`` for a vector ``B``); otherwise an empty one.

``rank`` and ``singular_values`` stay empty (``gels`` sets neither). :func:`linalg_lstsq`
makes the outputs, :func:`before` and :func:`after` size the rest. The solver's own scratch
inside ``lstsq_stub`` (``geqrf``'s ``tau``, the broadcast copies of ``A`` and ``tau``,
cuSOLVER's workspace, cuBLAS's batched pointer arrays) is not taken.
"""

from __future__ import annotations

import math
from typing import Any

import torch

OPERATOR = torch.ops.aten.linalg_lstsq.default
_INFO = 4
"""Bytes of one ``int`` of ``infos``."""
_SOLVED = (torch.float32, torch.float64, torch.complex64, torch.complex128)
"""The dtypes CUDA's solvers dispatch on (``AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES``)."""


def _is_vector(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``linalg_solve_is_vector_rhs``: ``b`` is one vector per matrix of ``a``."""
    return bool(b.dim() == 1 or (b.dim() == a.dim() - 1 and b.shape == a.shape[:-1]))


def _checked(a: torch.Tensor, b: torch.Tensor, driver: str | None) -> None:
    """``linalg_lstsq_out``'s checks on CUDA, with its messages."""
    if a.dim() < 2:
        raise RuntimeError("torch.linalg.lstsq: input must have at least 2 dimensions.")
    if b.dim() < 1:
        raise RuntimeError("torch.linalg.lstsq: other must have at least 1 dimension.")
    if a.dtype != b.dtype:
        raise RuntimeError(
            "torch.linalg.lstsq: Expected input and other to have the same dtype, but got "
            f"input's dtype {a.dtype} and other's dtype {b.dtype}"
        )
    difference = a.dim() - b.dim()
    if difference not in (0, 1):
        raise RuntimeError(
            "torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and "
            "(input.dim() - other.dim()) <= 1"
        )
    rows = b.shape[-1] if difference else b.shape[-2]
    if a.shape[-2] != rows:
        raise RuntimeError(
            "torch.linalg.lstsq: input.size(-2) should match other.size(-1)"
            if difference
            else "torch.linalg.lstsq: input.size(-2) should match other.size(-2)"
        )
    if driver is not None and driver.lower() != "gels":
        raise RuntimeError(
            "torch.linalg.lstsq: `driver` other than `gels` is not supported on CUDA"
        )
    if a.dtype not in _SOLVED:
        raise RuntimeError(f"torch.linalg.lstsq: CUDA's gels does not solve {a.dtype}")


def linalg_lstsq(
    a: torch.Tensor, b: torch.Tensor, rcond: float | None = None, *, driver: str | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``linalg_lstsq``'s four outputs as CUDA's ``gels`` path makes them: the solution, a view
    of the first ``n`` rows of its column-major padded copy of ``B``; the residuals where
    ``m > n``, else empty; ``rank`` and ``singular_values`` empty."""
    _checked(a, b, driver)
    m, n = a.shape[-2], a.shape[-1]
    real = a.real.dtype if a.is_complex() else a.dtype
    vector = _is_vector(a, b)
    b2 = b.unsqueeze(-1) if vector else b
    batch = torch.broadcast_shapes(a.shape[:-2], b2.shape[:-2])  # type: ignore[no-untyped-call, unused-ignore]  # untyped in torch
    rows = max(m, n)
    if vector:
        solution = a.new_empty((*batch, rows)).narrow(-1, 0, n)
    else:
        solution = a.new_empty((*batch, b2.shape[-1], rows)).mT.narrow(-2, 0, n)
    residuals = a.new_empty((0,), dtype=real)
    if m > n:
        residuals = a.new_empty((*batch, b2.shape[-1]), dtype=real)
    rank = a.new_empty((0,), dtype=torch.int64)
    singular_values = a.new_empty((0,), dtype=real)
    return solution, residuals, rank, singular_values


def before(args: tuple[Any, ...]) -> list[int]:
    """The bytes of ``infos``, made before the outputs and held until the operator returns."""
    a = args[0] if args else None
    if not (isinstance(a, torch.Tensor) and a.is_meta and a.dim() >= 2):
        return []
    return [max(1, math.prod(a.shape[:-2])) * _INFO]


def after(args: tuple[Any, ...]) -> list[int]:
    """The bytes of ``input_working_copy``, ``A``'s column-major copy, held while ``gels``
    runs and freed as it returns."""
    a = args[0] if args else None
    if not (isinstance(a, torch.Tensor) and a.is_meta and a.dim() >= 2):
        return []
    return [a.numel() * a.element_size()]
