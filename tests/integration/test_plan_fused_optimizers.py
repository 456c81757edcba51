"""DeepSpeed's fused optimizers under plan: their CUDA extension, built with nvcc at first use,
cannot be built on the planning machine; its kernels allocate nothing, so the plan stands in
for them. The script imports the shared fake of DeepSpeed (``tests/integration/fakes``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

FAKES = Path(__file__).parent / "fakes"

FUSED = """
import json
import torch
from deepspeed.ops.adam import FusedAdam

model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 256)).cuda()
params = sum(p.numel() * p.element_size() for p in model.parameters())
model(torch.randn(64, 1024, device="cuda")).sum().backward()
before = torch.cuda.memory_allocated()
optimizer = FusedAdam(model.parameters(), lr=1e-4)
made = torch.cuda.memory_allocated() - before
optimizer.step()
stepped = torch.cuda.memory_allocated() - before - made
optimizer.step()
again = torch.cuda.memory_allocated() - before - made - stepped
print(json.dumps({"params": params, "made": made, "stepped": stepped, "again": again}))
"""


def test_deepspeeds_fused_adam_runs_and_holds_its_two_states(tmp_path: Path) -> None:
    """``FusedAdam``, whose builder failed with "CUDA_HOME environment variable is not set",
    runs under plan: making it allocates its one-integer overflow flag (a 512-byte block), its
    first step the two states of every parameter and nothing else (the kernel works in place),
    a second step nothing; the plan says once that the kernel's values are not computed."""
    shutil.copytree(FAKES / "deepspeed", tmp_path / "deepspeed")
    script(tmp_path, FUSED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[0])
    assert facts["made"] == 512
    assert facts["stepped"] == 2 * facts["params"]
    assert facts["again"] == 0
    assert "multi_tensor_adam" in done.stderr
