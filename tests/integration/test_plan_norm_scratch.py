"""LayerNorm and RMSNorm under ``memforensics plan`` take the blocks CUDA's kernels take
beside their outputs (``aten/src/ATen/native/cuda/layer_norm_kernel.cu``): a contiguous copy
of an input that is not contiguous, in the forward and again in the backward; a contiguous
copy of the output's gradient; and, for many rows of few columns, the two-pass sum's partial
sums of the weight's and the bias's gradients."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from planned import allocated, printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

torch = pytest.importorskip("torch")

NORM = """
import json
import torch
import torch.nn.functional as F

x = torch.randn({shape}, device="cuda", requires_grad=True)
w = torch.ones({cols}, device="cuda", requires_grad=True)
b = torch.zeros({cols}, device="cuda", requires_grad=True)
g = torch.randn({rows}, {cols}, device="cuda")
start = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
y = {call}
kept = torch.cuda.memory_allocated() - start
forward_peak = torch.cuda.max_memory_allocated() - start
torch.cuda.memory._record_memory_history(max_entries=100000)
torch.cuda.reset_peak_memory_stats()
before = torch.cuda.memory_allocated()
{backward}
torch.cuda.memory._dump_snapshot("backward.pickle")
print(json.dumps({{
    "kept": kept,
    "forward_peak": forward_peak,
    "backward_rise": torch.cuda.max_memory_allocated() - before,
}}))
"""


def _norm(
    folder: Path,
    rows: int,
    cols: int,
    *,
    transposed: bool = False,
    call: str = "F.layer_norm(x{t}, ({cols},), w, b)",
    backward: str = "y.backward(g)",
) -> tuple[dict[str, Any], list[int]]:
    """What the planned script measured, and the sizes its backward allocated, in order."""
    shape = f"{cols}, {rows}" if transposed else f"{rows}, {cols}"
    body = NORM.format(
        shape=shape,
        rows=rows,
        cols=cols,
        call=call.format(t=".t()" if transposed else "", cols=cols),
        backward=backward,
    )
    script(folder, body)
    found = printed_facts(folder, "--device-capability", "9.0")
    return found, allocated(folder / "backward.pickle")


ROWS, COLS = 1024, 256
FULL = ROWS * COLS * 4
STATS = 2 * ROWS * 4
"""``mean`` and ``rstd``: one float32 per row each."""


def test_a_transposed_input_is_copied_in_the_forward_and_the_backward(tmp_path: Path) -> None:
    """``layer_norm_cuda`` copies an input that is not contiguous before making its outputs
    and frees the copy as it returns; the backward copies the saved input again."""
    found, sizes = _norm(tmp_path, ROWS, COLS, transposed=True)
    assert found["kept"] == FULL + STATS
    assert found["forward_peak"] == 2 * FULL + STATS
    # the input's copy, its gradient, then ``AccumulateGrad``'s copy of that gradient
    # transposed back into the layout of ``x``
    assert sizes.count(FULL) == 3
    # the copy, the input's gradient, the weight's and the bias's (1 KiB each)
    assert found["backward_rise"] == 2 * FULL + 2 * 1024


def test_a_contiguous_input_is_read_where_it_lies(tmp_path: Path) -> None:
    """A contiguous input and gradient take no copy: the forward makes its three outputs, the
    backward its three gradients."""
    found, sizes = _norm(tmp_path, ROWS, COLS)
    assert found["kept"] == found["forward_peak"] == FULL + STATS
    assert sizes.count(FULL) == 1
    assert found["backward_rise"] == FULL + 2 * 1024


def test_the_gradient_of_a_sum_is_copied_contiguous(tmp_path: Path) -> None:
    """``LayerNormBackwardKernelImpl`` runs on ``dY.contiguous()``: the gradient of ``sum``,
    expanded from one value, is copied after the outputs."""
    found, sizes = _norm(tmp_path, ROWS, COLS, backward="y.sum().backward()")
    assert sizes.count(FULL) == 2  # the input's gradient, then the copy
    # and the sum and its 0-dim seed (512 B each)
    assert found["backward_rise"] == 2 * FULL + 2 * 1024 + 2 * 512


@pytest.mark.parametrize(
    ("call", "partials"),
    [
        ("F.layer_norm(x, ({cols},), w, b)", 2),  # the weight's and the bias's
        ("F.rms_norm(x, ({cols},), w)", 1),  # the weight's only
    ],
)
def test_many_rows_of_few_columns_sum_the_weights_gradient_in_two_passes(
    tmp_path: Path, call: str, partials: int
) -> None:
    """131,072 rows of 64 float32 columns on an H100: ``dgamma_blocks`` (and ``dbeta_blocks``)
    of ``min(32768 / 2, 131072 / 32)`` = 4,096 rows of 64, 1 MiB each, after the input's
    gradient; none for 1,024 rows."""
    rows, cols = 131072, 64
    _, sizes = _norm(tmp_path, rows, cols, call=call)
    gradient = sizes.index(rows * cols * 4)
    assert sizes[gradient + 1 :].count(4096 * 64 * 4) == partials
    _, few = _norm(tmp_path, ROWS, cols, call=call)
    assert 4096 * 64 * 4 not in few
