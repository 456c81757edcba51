"""A copy from the planned device into a host tensor is a read: a checkpoint loaded onto the
device fills a model still on the CPU (``load_state_dict``, then ``.to("cuda")``), as on a GPU.
Runs through the real ``memforensics plan`` console command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

SAVE = """
import shutil
import torch
model = torch.nn.Linear(1024, 1024).cuda()
torch.save({"model": model.state_dict()}, "ckpt.pt")
shutil.copy("ckpt.pt", "gpu.pt")  # a copy outlives the plan: a checkpoint as a GPU writes it
"""

RESUME = """
import json
import torch
checkpoint = torch.load("gpu.pt", map_location="cuda")
model = torch.nn.Linear(1024, 1024)
model.load_state_dict(checkpoint["model"])  # device tensors copied into the CPU model
host = torch.empty(8)
host.copy_(torch.arange(8.0, device="cuda"))  # a known value copied back is that value
model.to("cuda")
print(json.dumps({"allocated": torch.cuda.memory_allocated(), "host": host.tolist()}))
"""


def test_a_device_checkpoint_loads_into_a_cpu_model(tmp_path: Path) -> None:
    """load_state_dict from a checkpoint on the device into a CPU model runs, and the device
    then holds the checkpoint and the moved model: two copies of the weights."""
    script(tmp_path, SAVE, "save.py")
    script(tmp_path, RESUME, "resume.py")
    assert plan(tmp_path, "save.py").returncode == 0
    done = plan(tmp_path, "--json", "--device-capability", "8.0", "resume.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    weights = 1024 * 1024 * 4 + 1024 * 4
    assert facts["allocated"] == 2 * weights  # the arange copied back is freed
    assert facts["host"] == [float(i) for i in range(8)]
