"""Composites that ask whether a tensor is "subclass-like", answered as a GPU answers them.

ATen's ``isTensorSubclassLike`` (``ATen/TensorSubclassLikeUtils.h``) is true for every tensor
while a Python dispatch mode is active (``dispatch_mode_enabled()``) and for every ``meta``
tensor (``MetaBit`` is in ``kTensorSubclassLike``). A stand-in is both, so a composite that
asks it takes its subclass path under ``plan`` where a plain CUDA tensor takes the other.

``BatchLinearAlgebra.cpp``'s ``_may_require_fw_or_bw_grad(A)`` is grad mode with ``A``
requiring grad, or ``A`` carrying a forward-mode tangent, or ``isTensorSubclassLike(A)``; three
value-only composites ask it, to decide whether to compute the vectors a gradient would need:

- ``linalg_svdvals``: ``_linalg_svd(A, full_matrices=False, compute_uv=...)``, so on a GPU
  without a gradient ``U`` and ``Vh`` are empty and ``gesvdj`` takes its own scratch matrices
  (:mod:`~memforensics.plan.solver_scratch`); ``matrix_norm`` and ``norm`` of ord ``2``,
  ``-2`` and ``"nuc"``, ``cond`` and ``matrix_rank`` call it;
- ``linalg_eigvalsh``: ``_linalg_eigh(A, uplo, compute_v=...)``, so without a gradient there
  are no eigenvectors (``matrix_rank(hermitian=True)`` calls it);
- ``linalg_eigvals``: ``linalg_eig(A)`` and its first output where a gradient may be needed,
  else ``_linalg_eigvals(A)``, which makes no eigenvectors.

:func:`gpu_paths` registers, for the run, each composite with the same test as a GPU answers
it (:func:`may_require_grad`); the dispatcher runs it wherever ATen calls the composite, so a
norm or a rank reaches it too.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.autograd import forward_ad
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from memforensics.plan.eager_modes import EagerDispatchMode

_A = torch.ops.aten
_KEY = torch._C.DispatchKey
_SUBCLASS_LIKE_KEYS = (
    _KEY.Python,
    _KEY.Sparse,
    _KEY.SparseCsr,
    _KEY.FuncTorchGradWrapper,
    _KEY.FuncTorchBatched,
    _KEY.Functionalize,
)
"""``kTensorSubclassLike``'s keys a tensor carries (its ``MetaBit`` aside)."""


def subclass_like(tensor: torch.Tensor) -> bool:
    """``isTensorSubclassLike`` for the tensor a stand-in stands for: true under a dispatch
    mode that is not the plan's own (the script's, or a library's fake mode), and for a tensor
    whose keys meet ``kTensorSubclassLike`` (a ``__torch_dispatch__`` subclass's ``Python``, a
    sparse layout's, functorch's wrappers'). A stand-in's own ``meta`` and the plan's modes are
    no part of the answer."""
    if any(not isinstance(mode, EagerDispatchMode) for mode in _get_current_dispatch_mode_stack()):
        return True
    keys = torch._C._dispatch_keys(tensor)
    return any(keys.has(key) for key in _SUBCLASS_LIKE_KEYS)


def may_require_grad(tensor: torch.Tensor) -> bool:
    """``_may_require_fw_or_bw_grad``: grad mode on and ``tensor`` requiring grad, a
    forward-mode tangent on it, or :func:`subclass_like`."""
    if torch.is_grad_enabled() and tensor.requires_grad:
        return True
    if forward_ad._current_level >= 0:
        dual = forward_ad.unpack_dual(tensor)  # type: ignore[no-untyped-call, unused-ignore]  # untyped in torch
        if dual.tangent is not None:
            return True
    return subclass_like(tensor)


def linalg_svdvals(A: torch.Tensor, *, driver: str | None = None) -> Any:
    """``linalg_svdvals``: the singular values of ``_linalg_svd``, with vectors only where a
    gradient may need them."""
    return _A._linalg_svd.default(A, False, may_require_grad(A), driver=driver)[1]


def linalg_eigvalsh(A: torch.Tensor, UPLO: str = "L") -> Any:
    """``linalg_eigvalsh``: the eigenvalues of ``_linalg_eigh``, with eigenvectors only where
    a gradient may need them."""
    return _A._linalg_eigh.default(A, UPLO, may_require_grad(A))[0]


def linalg_eigvals(A: torch.Tensor) -> Any:
    """``linalg_eigvals``: ``linalg_eig``'s eigenvalues where a gradient may need the
    eigenvectors, else ``_linalg_eigvals``, which makes none."""
    if may_require_grad(A):
        return _A.linalg_eig.default(A)[0]
    return _A._linalg_eigvals.default(A)


_COMPOSITES = {
    "linalg_svdvals": linalg_svdvals,
    "linalg_eigvalsh": linalg_eigvalsh,
    "linalg_eigvals": linalg_eigvals,
}
"""The ``CompositeImplicitAutograd`` kernels registered for the run, by operator name."""


@contextmanager
def gpu_paths() -> Iterator[None]:
    """The composites of :data:`_COMPOSITES` with a GPU's answer to "may a gradient be
    needed?" inside; torch's own kernels again after."""
    library = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call, unused-ignore]  # untyped in torch
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
            for name, kernel in _COMPOSITES.items():
                library.impl(name, kernel, "CompositeImplicitAutograd")
        yield
    finally:
        library._destroy()  # type: ignore[no-untyped-call, unused-ignore]  # untyped in torch
