"""``F.logsigmoid`` under ``memforensics plan`` holds what CUDA's kernel holds: its result only.

``log_sigmoid_forward_cuda`` (``aten/src/ATen/native/cuda/Activation.cu``) returns an empty
``buffer`` beside the result; the CPU kernel, which ``meta`` follows, fills an input-sized one
that autograd keeps to the backward. The script plans a ``logsigmoid`` of a float32 tensor that
requires grad through the real console command and reads the planned allocator's figures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

ROWS, COLS = 256, 1000
INPUT_BYTES = ROWS * COLS * 4
"""1,024,000 B: a multiple of 512, so the block is exactly the tensor."""

LOGSIGMOID = f"""
import json
import torch
import torch.nn.functional as F

x = torch.randn({ROWS}, {COLS}, device="cuda", requires_grad=True)
start = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
y = F.logsigmoid(x)
held = torch.cuda.memory_allocated() - start
rise = torch.cuda.max_memory_allocated() - start
y.sum().backward()
print(json.dumps({{"held": held, "rise": rise, "grad": list(x.grad.shape)}}))
"""


def test_logsigmoid_keeps_only_its_result_for_the_backward(tmp_path: Path) -> None:
    """A logsigmoid's forward holds one input-sized block (its result), not the CPU's buffer too,
    and its backward still runs."""
    script(tmp_path, LOGSIGMOID)
    done = plan(tmp_path, "--device-capability", "8.0", "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    assert facts == {"held": INPUT_BYTES, "rise": INPUT_BYTES, "grad": [ROWS, COLS]}
