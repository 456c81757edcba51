"""Value-only decompositions plan as a plain CUDA tensor runs them: ``linalg_svdvals``,
``linalg_eigvalsh`` and ``linalg_eigvals`` compute vectors only where a gradient may need them
(``_may_require_fw_or_bw_grad``, ``aten/src/ATen/native/BatchLinearAlgebra.cpp``), which a
stand-in, subclass-like to ATen under the plan's dispatch mode, answered yes to every time."""

from __future__ import annotations

import pytest
from planned import printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

CALLS = """
import json
import torch

L = torch.linalg
cases = {
    "svdvals": (L.svdvals, (8, 24, 16), False),
    "norm2": (lambda a: L.matrix_norm(a, ord=2), (8, 24, 16), False),
    "svdvals_grad": (L.svdvals, (8, 24, 16), True),
    "svdvals_inference": (torch.inference_mode()(L.svdvals), (8, 24, 16), False),
    "eigvalsh": (L.eigvalsh, (256, 256), False),
    "eigvals": (L.eigvals, (64, 64), False),
}
found = {}
for name, (call, shape, grad) in cases.items():
    a = torch.randn(*shape, device="cuda", requires_grad=grad)
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = call(a)
    found[name] = {
        "held": torch.cuda.memory_allocated() - start,
        "peak": torch.cuda.max_memory_allocated() - start,
    }
    del a, out
print(json.dumps(found))
"""
FLOAT, COMPLEX, BLOCK = 4, 8, 512
BATCH, M, N = 8, 24, 16
"""The batch ``svd_cusolver`` hands to ``gesvdjBatched`` (both sides at most 32)."""
S = BATCH * N * FLOAT  # 512: the singular values
INFO = BLOCK  # one int a matrix, in one block
ANY = BLOCK  # _linalg_check_errors' one-byte bool
CLONE = BATCH * M * N * FLOAT  # gesvdj's column-major copy of A
SVDVALS_PEAK = S + INFO + CLONE + BATCH * (M * M + N * N) * FLOAT
"""``S``, ``info``, ``A``'s clone and the whole batch's ``m x m`` and ``n x n`` matrices
``gesvdjBatched`` takes without vectors."""


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, int]]:
    """Per call, the memory held after it and reached during it, planned once."""
    folder = tmp_path_factory.mktemp("subclass_like")
    script(folder, CALLS)
    return printed_facts(folder, "--device-capability", "9.0")  # type: ignore[return-value]


def test_svdvals_makes_no_vectors_without_a_gradient(found: dict[str, dict[str, int]]) -> None:
    """Without a gradient ``svdvals`` asks ``_linalg_svd`` for no ``U`` and ``Vh``: its peak is
    :data:`SVDVALS_PEAK`, and it keeps ``S``."""
    assert found["svdvals"] == {"held": S, "peak": SVDVALS_PEAK}


def test_a_spectral_norm_reaches_the_same_composite(found: dict[str, dict[str, int]]) -> None:
    """``matrix_norm(ord=2)`` calls ``linalg_svdvals`` inside ATen, and takes the same path;
    it keeps the batch's eight norms (``amax`` of ``S``), in one block."""
    assert found["norm2"] == {"held": BLOCK, "peak": SVDVALS_PEAK}


def test_inference_mode_takes_the_same_path(found: dict[str, dict[str, int]]) -> None:
    """Under ``inference_mode`` the composite reaches the plan whole and is run in its parts,
    by the same kernel: no vectors."""
    assert found["svdvals_inference"] == {"held": S, "peak": SVDVALS_PEAK}


def test_svdvals_makes_vectors_for_a_gradient(found: dict[str, dict[str, int]]) -> None:
    """With ``A`` requiring grad ``svdvals`` computes the reduced ``U`` and ``Vh``, held for
    backward, and ``gesvdjBatched`` takes its square ``U`` for the rectangular batch."""
    outputs = BATCH * (M * N + N * N) * FLOAT + S
    peak = outputs + INFO + CLONE + BATCH * M * M * FLOAT
    assert found["svdvals_grad"] == {"held": outputs, "peak": peak}


def test_eigvalsh_works_in_a_clone_of_a(found: dict[str, dict[str, int]]) -> None:
    """Without eigenvectors ``_linalg_eigh`` solves in a column-major clone of ``A``, then
    takes ``info`` and ``any``; it keeps the eigenvalues alone."""
    values = 256 * FLOAT
    assert found["eigvalsh"] == {"held": values, "peak": values + 256 * 256 * FLOAT + INFO + ANY}


def test_eigvals_makes_no_eigenvectors(found: dict[str, dict[str, int]]) -> None:
    """Without a gradient ``eigvals`` runs ``_linalg_eigvals``, never ``linalg_eig``: no
    ``n x n`` complex eigenvector block is taken, and the complex eigenvalues are kept."""
    assert found["eigvals"]["held"] == 64 * COMPLEX
    assert found["eigvals"]["peak"] < 64 * 64 * COMPLEX
