"""Under autocast the losses and functions of ``torch.nn.functional`` written in Python cast
where their inner operators' CUDA autocast kernels sit: ``F.mse_loss`` and its kin cast the
target after ``broadcast_tensors`` has expanded it, ``F.gaussian_nll_loss``,
``F.multilabel_soft_margin_loss``, ``F.local_response_norm``, ``F.lp_pool2d`` and
``F.triplet_margin_with_distance_loss`` reach float32 ``log``, ``pow``, ``sum`` and ``norm``."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import plan, script, traced_calls

pytestmark = [pytest.mark.integration, pytest.mark.torch]

ROWS, COLUMNS = 64, 1000
HALF, SINGLE = ROWS * COLUMNS * 2, ROWS * COLUMNS * 4
IMAGE = 2 * 8 * 16 * 16  # elements of the (2, 8, 16, 16) image

CALLS = """
x = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16)
row = torch.randn(1000, device="cuda", dtype=torch.bfloat16)
image = torch.randn(2, 8, 16, 16, device="cuda", dtype=torch.bfloat16)
calls = {
    "mse_loss": lambda: F.mse_loss(x, row),
    "l1_loss": lambda: F.l1_loss(x, row),
    "smooth_l1_loss": lambda: F.smooth_l1_loss(x, row),
    "huber_loss": lambda: F.huber_loss(x, row),
    "gaussian_nll_loss": lambda: F.gaussian_nll_loss(x, x, torch.ones_like(x)),
    "multilabel_soft_margin_loss": lambda: F.multilabel_soft_margin_loss(x, x),
    "local_response_norm": lambda: F.local_response_norm(image, 2),
    "lp_pool2d": lambda: F.lp_pool2d(image, 2, 2),
    "triplet_margin_with_distance_loss": lambda: F.triplet_margin_with_distance_loss(x, x, x),
}
"""


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[object]]:
    """Each call's result dtype and the sizes of the blocks it allocated, planned once."""
    folder: Path = tmp_path_factory.mktemp("calls")
    return traced_calls(folder, CALLS)


def test_regression_losses_cast_the_target_expanded(found: dict[str, list[object]]) -> None:
    """The kernel (and its autocast cast) sees the row target expanded to the input's shape:
    its float32 copy is input-sized (a view with a zero stride copies into a dense tensor),
    not row-sized; then the float32 elementwise blocks CUDA's kernels make: ``mse_loss``'s
    and ``smooth_l1_loss``'s output at the input's shape (made a number in place) and their
    elementwise loss, ``huber_loss``'s elementwise loss and its mean."""
    for name in ("mse_loss", "smooth_l1_loss"):
        assert found[name] == ["torch.float32", SINGLE, SINGLE, SINGLE, SINGLE], name
    assert found["huber_loss"] == ["torch.float32", SINGLE, SINGLE, SINGLE, 4]
    # l1_loss is a composite: the difference and its absolute value, then the mean
    assert found["l1_loss"] == ["torch.float32", SINGLE, SINGLE, SINGLE, SINGLE, 4]


def test_python_losses_reach_float32_log_pow_and_sum(found: dict[str, list[object]]) -> None:
    """``gaussian_nll_loss``: its variance (``ones_like``), the negativity check and its
    clone in bfloat16, then ``log``'s float32 copy and result, the bfloat16 difference,
    ``** 2``'s float32 copy and result, the quotient, sum and half in float32, the mean.
    ``multilabel_soft_margin_loss``: its bfloat16 terms, then a float32 sum a row (it was
    bfloat16), its quotient and the mean."""
    variance = [HALF, ROWS * COLUMNS, 1, HALF]
    logged = [SINGLE, SINGLE, HALF, SINGLE, SINGLE, SINGLE, SINGLE, SINGLE, 4]
    assert found["gaussian_nll_loss"] == ["torch.float32", *variance, *logged]
    soft = found["multilabel_soft_margin_loss"]
    assert soft[0] == "torch.float32"
    assert soft[-3:] == [ROWS * 4, ROWS * 4, 4]


def test_local_response_norm_reaches_a_float32_pow(found: dict[str, list[object]]) -> None:
    """``local_response_norm``: the square, padded, pooled, scaled and shifted in bfloat16,
    then ``pow``'s float32 copy and result and the float32 quotient."""
    padded = 2 * 9 * 16 * 16 * 2  # the squares padded by one channel, in a 5-d view
    assert found["local_response_norm"] == [
        "torch.float32", IMAGE * 2, padded, IMAGE * 2, IMAGE * 2, IMAGE * 2,
        IMAGE * 4, IMAGE * 4, IMAGE * 4,
    ]  # fmt: skip


def test_lp_pool_and_triplet_distance_loss_cast_inside(found: dict[str, list[object]]) -> None:
    """``lp_pool2d``: ``input.pow(2)``'s float32 copy and result, pooled in float32 (it was
    bfloat16 throughout). ``triplet_margin_with_distance_loss``: each ``pairwise_distance``'s
    bfloat16 difference and ``+ eps``, then a float32 distance a row; the margin, difference
    and clamp a row in float32, the mean."""
    pooled = found["lp_pool2d"]
    assert pooled[:4] == ["torch.float32", IMAGE * 4, IMAGE * 4, IMAGE * 4 // 4]
    distance = [HALF, HALF, ROWS * 4]
    triplet = ["torch.float32", *distance, *distance, ROWS * 4, ROWS * 4, ROWS * 4, 4]
    assert found["triplet_margin_with_distance_loss"] == triplet


BANNED = """
import torch
import torch.nn.functional as F

x = torch.rand(64, 1000, device="cuda")
with torch.autocast("cuda", dtype=torch.bfloat16):
    try:
        F.binary_cross_entropy(x, x)
    except RuntimeError as refused:
        print(str(refused).splitlines()[0])
print(F.binary_cross_entropy(x, x).dtype)
"""


def test_binary_cross_entropy_is_refused_under_autocast(tmp_path: Path) -> None:
    """``F.binary_cross_entropy`` under ``autocast("cuda")`` raises what CUDA's autocast
    kernel for it raises (``binary_cross_entropy_banned``), even of float32 inputs; outside
    autocast it runs."""
    script(tmp_path, BANNED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == [
        "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.",
        "torch.float32",
    ]
