"""GroupNorm under ``memforensics plan`` takes the vectors CUDA's kernels take beside their
outputs (``aten/src/ATen/native/cuda/group_norm_kernel.cu``): the forward's fused scale and
shift (and, for a half-precision input, its float32 statistics), the backward's per-channel
sums and per-group coefficients, each freed before the operator returns."""

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

x = torch.randn({shape}, device="cuda", dtype=torch.{dtype}, requires_grad=True)
w = torch.ones({channels}, device="cuda", dtype=torch.{dtype}, requires_grad=True)
b = torch.zeros({channels}, device="cuda", dtype=torch.{dtype}, requires_grad=True)
g = torch.randn({shape}, device="cuda", dtype=torch.{dtype})
start = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
y = F.group_norm(x, {groups}{affine})
kept = torch.cuda.memory_allocated() - start
forward_peak = torch.cuda.max_memory_allocated() - start
torch.cuda.memory._record_memory_history(max_entries=100000)
torch.cuda.reset_peak_memory_stats()
before = torch.cuda.memory_allocated()
y.backward(g)
torch.cuda.memory._dump_snapshot("backward.pickle")
print(json.dumps({{
    "kept": kept,
    "forward_peak": forward_peak,
    "backward_rise": torch.cuda.max_memory_allocated() - before,
}}))
"""

N, C, G = 32, 1280, 32
"""A Stable Diffusion UNet's widest GroupNorm: 32 groups of 1,280 channels, for 32 samples."""
PER_CHANNEL = N * C * 4
"""One float32 per sample and channel: ``a``, ``b``, ``ds``, ``db``, ``c1`` (160 KiB)."""
PER_GROUP = N * G * 4
"""One float32 per sample and group: ``mean_acc``, ``rstd_acc``, ``c2``, ``c3`` (4 KiB)."""


def _group_norm(
    folder: Path,
    positions: tuple[int, ...] = (8, 8),
    *,
    dtype: str = "float32",
    affine: bool = True,
) -> tuple[dict[str, Any], list[int]]:
    """What the planned script measured, and the sizes its backward allocated, in order."""
    body = NORM.format(
        shape=", ".join(str(n) for n in (N, C, *positions)),
        channels=C,
        dtype=dtype,
        groups=G,
        affine=", w, b" if affine else "",
    )
    script(folder, body)
    found = printed_facts(folder, "--device-capability", "9.0")
    return found, allocated(folder / "backward.pickle")


def test_an_affine_forward_takes_the_fused_scale_and_shift(tmp_path: Path) -> None:
    """``GroupNormKernelImplInternal`` with a weight and bias over 8x8 positions: the output,
    the mean and ``rstd`` (N x G each) kept; ``a`` and ``b`` (N x C float32 each) on top at the
    peak; the backward's gradients, then ``ds``, ``db``, ``c2``, ``c3`` and ``c1``."""
    found, sizes = _group_norm(tmp_path)
    output = N * C * 64 * 4
    assert found["kept"] == output + 2 * PER_GROUP
    assert found["forward_peak"] == output + 2 * PER_GROUP + 2 * PER_CHANNEL
    gradients = [output, C * 4, C * 4]
    assert sizes == [*gradients, PER_CHANNEL, PER_CHANNEL, PER_GROUP, PER_GROUP, PER_CHANNEL]
    assert found["backward_rise"] == sum(sizes)


def test_a_forward_without_weight_or_bias_takes_nothing_more(tmp_path: Path) -> None:
    """Without an affine weight or bias the forward normalises with the statistics alone, and
    the backward's ``c1`` (the weight times ``rstd``) is not made: ``ds``, ``db``, ``c2`` and
    ``c3`` after the input's gradient."""
    found, sizes = _group_norm(tmp_path, affine=False)
    output = N * C * 64 * 4
    assert found["forward_peak"] == found["kept"] == output + 2 * PER_GROUP
    assert sizes == [output, PER_CHANNEL, PER_CHANNEL, PER_GROUP, PER_GROUP]


def test_a_bfloat16_forward_keeps_its_statistics_in_float32(tmp_path: Path) -> None:
    """A bfloat16 input's mean and ``rstd`` are computed into float32 vectors (N x G each)
    before ``a`` and ``b``, also float32; the outputs' statistics are bfloat16. The backward's
    vectors are float32 as for a float32 input."""
    found, sizes = _group_norm(tmp_path, dtype="bfloat16")
    output = N * C * 64 * 2
    assert found["kept"] == output + 2 * (PER_GROUP // 2)
    assert found["forward_peak"] == found["kept"] + 2 * PER_GROUP + 2 * PER_CHANNEL
    gradients = [output, C * 2, C * 2]
    assert sizes == [*gradients, PER_CHANNEL, PER_CHANNEL, PER_GROUP, PER_GROUP, PER_CHANNEL]


def test_one_position_per_channel_takes_the_sums_it_does_not_read(tmp_path: Path) -> None:
    """An input of (N, C), one position per channel: the forward normalises without ``a`` and
    ``b``; the backward makes ``ds`` and ``db`` before it turns to ``GroupNorm1dBackward``,
    which takes ``c2`` and ``c3`` and no ``c1``."""
    found, sizes = _group_norm(tmp_path, positions=())
    output = N * C * 4
    assert found["forward_peak"] == found["kept"] == output + 2 * PER_GROUP
    gradients = [output, C * 4, C * 4]
    assert sizes == [*gradients, PER_CHANNEL, PER_CHANNEL, PER_GROUP, PER_GROUP]
