"""``nll_loss2d`` under ``memforensics plan`` takes the contiguous copies CUDA's kernels make
(``aten/src/ATen/native/cuda/LossNLL2d.cu``): a reduced loss of an input that is not
contiguous copies it after the loss and its total weight, and frees the copy as it returns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

torch = pytest.importorskip("torch")

LOSS = """
import json
import torch
import torch.nn.functional as F

scores = torch.randn(8, 64, 64, 21, device="cuda")
target = torch.randint(0, 21, (8, 64, 64), device="cuda")
x = scores.permute(0, 3, 1, 2){layout}
start = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
loss = F.nll_loss(x, target, reduction="{reduction}")
print(json.dumps({{
    "kept": torch.cuda.memory_allocated() - start,
    "peak": torch.cuda.max_memory_allocated() - start,
}}))
"""

INPUT = 8 * 21 * 64 * 64 * 4
"""The float32 scores, 8 samples of 21 classes over 64x64 positions (2.625 MiB)."""
NUMBER = 512
"""A loss or total weight of one float32, in the allocator's smallest block. The loss is kept;
the total weight, which nothing saves for a backward, is freed as the operator returns."""


def _loss(folder: Path, *, layout: str = "", reduction: str = "mean") -> dict[str, int]:
    """What the planned script measured."""
    script(folder, LOSS.format(layout=layout, reduction=reduction))
    done = plan(folder, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    found: dict[str, int] = json.loads(done.stdout.splitlines()[0])
    return found


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_a_reduced_loss_of_a_permuted_input_copies_it(tmp_path: Path, reduction: str) -> None:
    """``nll_loss2d_forward_out_cuda_template`` makes the loss and its total weight, then reads
    ``input.contiguous()``: the permuted scores' copy is on top of the two numbers at the peak,
    and only the loss is kept."""
    found = _loss(tmp_path, reduction=reduction)
    assert found["kept"] == NUMBER
    assert found["peak"] == 2 * NUMBER + INPUT


def test_a_contiguous_input_is_read_where_it_lies(tmp_path: Path) -> None:
    """The same scores made contiguous before the loss take no copy inside it."""
    found = _loss(tmp_path, layout=".contiguous()")
    assert found["kept"] == NUMBER
    assert found["peak"] == 2 * NUMBER


def test_an_unreduced_loss_reads_the_input_through_its_strides(tmp_path: Path) -> None:
    """Without a reduction the kernel reads the permuted input through a strided accessor: the
    per-position losses and the total weight (``resize_({})``, one number), and no copy."""
    found = _loss(tmp_path, reduction="none")
    losses = 8 * 64 * 64 * 4
    assert found["kept"] == losses
    assert found["peak"] == losses + NUMBER
