"""``F.mse_loss``, ``F.smooth_l1_loss`` and ``F.huber_loss`` reduced to a number allocate the
elementwise loss on the way, as CUDA's kernels do, and the structured two keep an input-sized
block under the number for as long as it lives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

LOSSES = """
import json

import torch
import torch.nn.functional as F

a = torch.randn(4096, 4096, device="cuda")
b = torch.randn(4096, 4096, device="cuda")
found = {}
for loss in (F.mse_loss, F.smooth_l1_loss, F.huber_loss):
    for reduction in ("mean", "sum"):
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = loss(a, b, reduction=reduction)
        held = torch.cuda.memory_allocated() - before
        found[f"{loss.__name__} {reduction}"] = [held, torch.cuda.max_memory_allocated() - before]
        del out
print(json.dumps(found))
"""

MIB_64 = 4096 * 4096 * 4
STAGING = 2560 + 512  # gpu_reduce_kernel's staging (2,112 B) and semaphores (4 B), in 512-B blocks


def test_reduced_losses_make_the_elementwise_loss_first(tmp_path: Path) -> None:
    """On two float32 4096x4096 tensors ``mse_loss`` and ``smooth_l1_loss`` hold 64 MiB under
    their number (the output made at the broadcast shape, then resized) and peak at two such
    blocks with the reduction's staging; ``huber_loss`` holds its number alone after peaking
    at its elementwise loss, its number and the staging."""
    script(tmp_path, LOSSES)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    for name in ("mse_loss", "smooth_l1_loss"):
        for reduction in ("mean", "sum"):
            assert found[f"{name} {reduction}"] == [MIB_64, 2 * MIB_64 + STAGING], name
    for reduction in ("mean", "sum"):
        assert found[f"huber_loss {reduction}"] == [512, MIB_64 + 512 + STAGING]
