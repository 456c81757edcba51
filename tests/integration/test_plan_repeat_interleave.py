"""``repeat_interleave`` with repeats held on the device runs under ``memforensics plan``.

A quantile likelihood's sampler (darts' ``QuantileRegression.sample``) repeats the edge
quantiles of a model's output with ``torch.repeat_interleave(output, repeats, dim=-1)``, the
repeats a list the script copied to the device. The indices' length is the repeats' sum, which
the ``meta`` kernel cannot know; the plan reads it from the repeats' known values, as the CUDA
kernel reads it from the device, and allocates ``repeat_interleave_common``'s blocks
(``aten/src/ATen/native/Repeat.h``): the repeats' int64 cumsum, a bool per repeat for its
non-negativity check and the check's result, then the indices, freed once ``index_select`` has
made the output.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

BATCH, STEPS, QUANTILES = 64, 24, 5
REPEATS = [2, 1, 1, 1, 2]
OUTPUT_BYTES = BATCH * STEPS * (QUANTILES + 2) * 4
"""43,008 B: the float32 output with the two edge quantiles repeated, a multiple of 512."""

SAMPLER = f"""
import json
import torch

output = torch.randn({BATCH}, {STEPS}, 1, {QUANTILES}, device="cuda")
repeats = torch.tensor({REPEATS}).to("cuda")
start = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
shifted = torch.repeat_interleave(output, repeats, dim=-1)
held = torch.cuda.memory_allocated() - start
rise = torch.cuda.max_memory_allocated() - start
flat = torch.repeat_interleave(torch.arange(4, device="cuda"), torch.tensor(3, device="cuda"))
print(json.dumps({{"shape": list(shifted.shape), "flat": list(flat.shape), "held": held,
                  "rise": rise}}))
"""


def test_repeats_on_the_device_give_the_gpu_shape_and_blocks(tmp_path: Path) -> None:
    """Repeats copied from a list, and one repeat count for every element, give the shapes the
    CPU computes; the call holds its output and rises by the output and the indices' block."""
    torch = pytest.importorskip("torch")
    expected = torch.repeat_interleave(
        torch.zeros(BATCH, STEPS, 1, QUANTILES), torch.tensor(REPEATS), dim=-1
    )
    flat = torch.repeat_interleave(torch.arange(4), torch.tensor(3))
    script(tmp_path, SAMPLER)
    facts = printed_facts(tmp_path, "--device-capability", "9.0")
    assert facts == {
        "shape": list(expected.shape),
        "flat": list(flat.shape),
        "held": OUTPUT_BYTES,
        "rise": OUTPUT_BYTES + 512,
    }
