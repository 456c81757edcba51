"""The LayerNorm and RMSNorm kernels' own allocations, against ``layer_norm_kernel.cu``'s rules."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")

from memforensics.plan import norm_scratch  # noqa: E402  (after the skip without torch)

HOPPER = (9, 0)
"""An H100: 132 SMs, so the two-pass sum needs fewer than 66 tiles of 32 columns."""


@pytest.mark.parametrize(
    ("rows", "columns", "partial"),
    [
        (131072, 64, 4096),  # ceil(131072 / 32) blocks, under 32768 / 2 tiles
        (1 << 22, 64, 16384),  # capped at max_grid_size / blocks.x = 32768 / 2
        (131072, 2080, 504),  # 65 tiles: 32768 // 65 blocks
        (65536, 64, 0),  # not more than 64 Ki rows
        (131072, 2112, 0),  # 66 tiles: not fewer than half of 132 SMs
    ],
)
def test_the_two_pass_sum_runs_for_many_rows_of_few_columns(
    rows: int, columns: int, partial: int
) -> None:
    """``LaunchGammaBetaBackwardCUDAKernel`` sums in two passes for more than 64 Ki rows of
    fewer than ``sm_count / 2`` tiles of 32 columns, one partial row per block of 32 rows, at
    most ``32768 / tiles`` blocks."""
    assert norm_scratch.partial_rows(rows, columns, HOPPER) == partial


def test_an_operand_that_is_not_contiguous_is_copied_before_the_outputs() -> None:
    """``expect_contiguous()`` copies a transposed input (its bytes) and nothing that is
    contiguous."""
    x = torch.empty(256, 1024, device="meta").t()
    w = torch.empty(256, device="meta")
    forward = torch.ops.aten.native_layer_norm.default
    assert norm_scratch.before(forward, (x, [256], w, w, 1e-5)) == [256 * 1024 * 4]
    assert norm_scratch.before(forward, (x.contiguous(), [256], w, w, 1e-5)) == []
