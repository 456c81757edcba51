"""The linear-algebra operators plan with the blocks CUDA's kernels take beside their outputs
(``aten/src/ATen/native/BatchLinearAlgebra.cpp``, ``aten/src/ATen/native/cuda/linalg/``):
``info``, ``tau``, column-major clones, cuBLAS's pointer arrays, ``_linalg_check_errors``'
``any`` and the determinants' permutation sign, each sized here from the source's arithmetic."""

from __future__ import annotations

import pytest
from planned import printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

CALLS = """
import json
import torch

L = torch.linalg
pivots = torch.ones(256, dtype=torch.int32, device="cuda")
cases = {
    "cholesky": (L.cholesky, [(16, 32, 32)]),
    "solve_triangular": (
        lambda a, b: L.solve_triangular(a, b, upper=False), [(16, 32, 32), (16, 32, 8)]
    ),
    "eigh": (L.eigh, [(256, 256)]),
    "svd": (lambda a: L.svd(a, full_matrices=False), [(512, 256)]),
    "svd_small": (lambda a: L.svd(a, full_matrices=False), [(8, 24, 16)]),
    "qr": (L.qr, [(32, 64, 48)]),
    "qr_single": (L.qr, [(512, 256)]),
    "inv": (L.inv, [(256, 256)]),
    "solve": (L.solve, [(256, 256), (256, 64)]),
    "solve_small": (L.solve, [(32, 16, 16), (32, 16, 4)]),
    "lu_factor": (L.lu_factor, [(128, 16, 16)]),
    "det": (L.det, [(256, 256)]),
    "slogdet": (L.slogdet, [(4, 16, 16)]),
    "lu_solve": (lambda lu, b: L.lu_solve(lu, pivots, b), [(256, 256), (256, 64)]),
}
found = {}
for name, (call, shapes) in cases.items():
    operands = [torch.randn(*shape, device="cuda") for shape in shapes]
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = call(*operands)
    found[name] = {
        "held": torch.cuda.memory_allocated() - start,
        "peak": torch.cuda.max_memory_allocated() - start,
    }
    del operands, out
print(json.dumps(found))
"""
FLOAT, INT, INDEX, POINTER, BOOL, LONG, BLOCK = 4, 4, 8, 8, 1, 8, 512


def _block(size: int) -> int:
    """A request as the caching allocator's blocks hold it: 512-byte multiples."""
    return -(-size // BLOCK) * BLOCK


EXPECTED = {
    # L; info (an output, dropped by linalg.cholesky); potrfBatched's pointer array
    "cholesky": (
        16 * 32 * 32 * FLOAT,
        16 * 32 * 32 * FLOAT + _block(16 * INT) + _block(16 * POINTER),
    ),
    # the solution; trsmBatched's pointer arrays of A and of the solution (16 > 8 matrices)
    "solve_triangular": (16 * 32 * 8 * FLOAT, 16 * 32 * 8 * FLOAT + 2 * _block(16 * POINTER)),
    # eigenvectors and eigenvalues; info; check_errors' any
    "eigh": (256 * 256 * FLOAT + 256 * FLOAT, 256 * 256 * FLOAT + 256 * FLOAT + 2 * BLOCK),
    # U, S, Vh; info; gesvdj's clone of A
    "svd": (
        (512 * 256 + 256 + 256 * 256) * FLOAT,
        (512 * 256 + 256 + 256 * 256) * FLOAT + BLOCK + 512 * 256 * FLOAT,
    ),
    # U, S, Vh; info; gesvdjBatched's clone of A and its square U (24 x 24 a matrix)
    "svd_small": (
        8 * (24 * 16 + 16 + 16 * 16) * FLOAT,
        8 * (24 * 16 + 16 + 16 * 16) * FLOAT + BLOCK + 8 * (24 * 16 + 24 * 24) * FLOAT,
    ),
    # Q, R; tau; geqrf_batched_cublas' pointer arrays of the matrices and of tau
    "qr": (
        32 * (64 * 48 + 48 * 48) * FLOAT,
        32 * (64 * 48 + 48 * 48 + 48) * FLOAT + 2 * _block(32 * POINTER),
    ),
    # Q, R; tau; looped geqrf's one-int infos (then orgqr's, freed in between)
    "qr_single": (
        (512 * 256 + 256 * 256) * FLOAT,
        (512 * 256 + 256 * 256 + 256) * FLOAT + BLOCK,
    ),
    # the inverse; info; LU and pivots; lu_solve_triangular's permutation (int64) and, A being
    # contiguous (factored transposed), its clone of the solution
    "inv": (
        256 * 256 * FLOAT,
        2 * 256 * 256 * FLOAT + BLOCK + 256 * INT + 256 * INDEX + 256 * 256 * FLOAT,
    ),
    # the solution, LU, pivots, info; the permutation and the solution's clone (n > 128)
    "solve": (
        256 * 64 * FLOAT,
        (256 * 64 + 256 * 256) * FLOAT + 256 * INT + BLOCK + 256 * INDEX + 256 * 64 * FLOAT,
    ),
    # the solution, LU, pivots, info; getrsBatched's pointer arrays (n <= 64, k <= 8)
    "solve_small": (
        32 * 16 * 4 * FLOAT,
        32 * (16 * 4 + 16 * 16) * FLOAT + 32 * 16 * INT + BLOCK + 2 * _block(32 * POINTER),
    ),
    # LU, pivots; info (an output, freed after check_errors); getrfBatched's pointer array
    # (order 16), larger than check_errors' any
    "lu_factor": (
        128 * 16 * 16 * FLOAT + 128 * 16 * INT,
        128 * 16 * 16 * FLOAT + 128 * 16 * INT + 128 * INT + _block(128 * POINTER),
    ),
    # det, LU, pivots; info; prod(diag); lu_det_P's arange, its != pivots, their int64 sum and
    # the bools cast to int64 for it
    "det": (
        BLOCK,
        BLOCK
        + 256 * 256 * FLOAT
        + 256 * INT
        + BLOCK
        + BLOCK
        + 256 * INT
        + _block(256 * BOOL)
        + BLOCK
        + 256 * LONG,
    ),
    # sign, logabsdet, LU, pivots; info; (getrfBatched's pointer array, freed) lu_det_P's
    # arange, its != pivots, their int64 sum and the bools cast to int64 for it
    "slogdet": (
        2 * BLOCK,
        2 * BLOCK
        + 4 * 16 * 16 * FLOAT
        + _block(4 * 16 * INT)
        + _block(4 * INT)
        + _block(16 * INT)
        + _block(4 * 16 * BOOL)
        + _block(4 * LONG)
        + 4 * 16 * LONG,
    ),
    # the solution; LU's column-major clone (a row-major LU); lu_solve_triangular's
    # permutation, identity and inverse permutation (int64) and the permuted B (n > 128)
    "lu_solve": (
        256 * 64 * FLOAT,
        256 * 64 * FLOAT + 256 * 256 * FLOAT + 3 * 256 * INDEX + 256 * 64 * FLOAT,
    ),
}


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Per operator, the memory held after it and reached during it, planned once."""
    folder = tmp_path_factory.mktemp("solvers")
    script(folder, CALLS)
    return printed_facts(folder, "--device-capability", "9.0")


@pytest.mark.parametrize("case", list(EXPECTED))
def test_peak_holds_the_kernels_own_blocks(found: dict[str, object], case: str) -> None:
    """Each operator holds its outputs after it returns, and at its peak also the blocks its
    CUDA kernel takes beside them, as the source sizes them."""
    held, peak = EXPECTED[case]
    assert found[case] == {"held": held, "peak": peak}
