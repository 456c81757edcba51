"""Shapes from PyTorch's own tutorials under the real ``memforensics plan``: each script is
the smallest form of a line a tutorial runs, and each test checks what its user reads: the
script runs to its end, and the figures are the ones CUDA's caching allocator gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

WEIGHTS = 1024 * 1024 * 4 + 1024 * 4
"""An ``nn.Linear(1024, 1024)``'s float32 weight and bias, each a whole number of blocks."""


def _facts(folder: Path) -> dict[str, object]:
    """Run ``train.py`` under plan; the JSON line the script printed first."""
    done = plan(folder, "--device-capability", "8.0", "train.py")
    assert done.returncode == 0, done.stderr
    found: dict[str, object] = json.loads(done.stdout.splitlines()[0])
    return found


HOST_LOAD = """
import json
import torch
from torch import nn

model = nn.Linear(1024, 1024).to("cuda")
torch.save(model.state_dict(), "model.pth")
host = nn.Linear(1024, 1024)
state = torch.load("model.pth")
held = torch.cuda.memory_allocated()
host.load_state_dict(state)
print(json.dumps({"held": held, "after": torch.cuda.memory_allocated(),
                  "device": str(host.weight.device),
                  "finite": bool(torch.isfinite(host.weight).all())}))
"""


def test_a_device_checkpoint_loads_into_a_host_model(tmp_path: Path) -> None:
    """A state dict saved from the device and loaded back without ``map_location`` (onto the
    device, as on a GPU) copies into a model built on the CPU: the copy to the host runs
    (it raised "Cannot copy out of meta tensor"), takes no device memory, and the device
    holds the model and the loaded copy."""
    script(tmp_path, HOST_LOAD)
    facts = _facts(tmp_path)
    assert facts["held"] == facts["after"] == 2 * WEIGHTS
    assert facts["device"] == "cpu"
    assert facts["finite"] is True
