"""Under autocast ``F.cross_entropy`` with label smoothing or class probabilities,
``F.nll_loss`` of a 3-d input and ``F.linear_cross_entropy`` cast inside the composites they
are, as CUDA's autocast casts their inner operators: bfloat16 log-probabilities and logits,
float32 sums, a contiguous bfloat16 copy before ``nll_loss2d``'s float32 one."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import traced_calls

pytestmark = [pytest.mark.integration, pytest.mark.torch]

ROWS, COLUMNS = 64, 1000
HALF, SINGLE = ROWS * COLUMNS * 2, ROWS * COLUMNS * 4
WORKSPACE = 32 << 20  # cuBLAS's workspace on sm_90, taken at the first product

CALLS = """
logits = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16, requires_grad=True)
target = torch.randint(0, 1000, (64,), device="cuda")
probabilities = torch.rand(64, 1000, device="cuda", dtype=torch.bfloat16)
sequence = torch.randn(4, 16, 1000, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
sequence_target = torch.randint(0, 1000, (4, 16), device="cuda")
hidden = torch.randn(64, 256, device="cuda")
head = torch.nn.Linear(256, 1000, bias=False, device="cuda")
calls = {
    "linear": lambda: F.linear_cross_entropy(hidden, head.weight, target),
    "smoothed": lambda: F.cross_entropy(logits, target, label_smoothing=0.1),
    "probabilities": lambda: F.cross_entropy(logits, probabilities),
    "sequence": lambda: F.nll_loss(sequence, sequence_target),
}
"""


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[object]]:
    """Each call's result dtype and the sizes of the blocks it allocated, planned once."""
    folder: Path = tmp_path_factory.mktemp("calls")
    return traced_calls(folder, CALLS)


def test_label_smoothing_keeps_bfloat16_log_probabilities(found: dict[str, list[object]]) -> None:
    """``cross_entropy_loss_label_smoothing``: ``log_softmax`` in bfloat16, ``nll_loss``'s
    float32 copy, loss and total weight; the class sum into float32 a row, negated; the
    ignored mask, the sum, the kept mask, its count (the mask cast to int64 for the
    reduction, as ``sum`` reads a bool), the mean, and the two terms and their sum."""
    nll = [HALF, SINGLE, 4, 4]
    smooth = [ROWS * 4, ROWS * 4, ROWS, 4, ROWS, 8, ROWS * 8, 4]
    assert found["smoothed"] == ["torch.float32", *nll, *smooth, 4, 4, 4]


def test_class_probabilities_multiply_in_bfloat16_and_sum_into_float32(
    found: dict[str, list[object]],
) -> None:
    """``cross_entropy_loss_prob_target``: ``log_softmax`` in bfloat16, its product with the
    bfloat16 target in bfloat16, the sum into float32 (no float32 copy of the logits), its
    negation and the mean."""
    assert found["probabilities"] == ["torch.float32", HALF, HALF, 4, 4, 4]


def test_a_3d_nll_loss_is_made_contiguous_before_its_float32_cast(
    found: dict[str, list[object]],
) -> None:
    """``nll_loss_nd`` makes the transposed bfloat16 input contiguous in bfloat16, then
    ``nll_loss2d`` casts that to float32: one copy of each, not two float32 ones."""
    assert found["sequence"] == ["torch.float32", HALF, SINGLE, 4, 4]


def test_linear_cross_entropy_projects_in_bfloat16(found: dict[str, list[object]]) -> None:
    """``linear_cross_entropy`` without chunking options is ``linear`` then ``cross_entropy``:
    bfloat16 copies of the hidden states and the weight, bfloat16 logits (with cuBLAS's
    workspace at the first product), then the plain loss's blocks (it ran uncast, in
    float32)."""
    casts = [ROWS * 256 * 2, COLUMNS * 256 * 2]
    loss = [HALF, SINGLE, 4, 4]
    assert found["linear"] == ["torch.float32", *casts, HALF, WORKSPACE, *loss]
