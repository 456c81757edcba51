"""Shapes from PyTorch's own tutorials under the real ``memforensics plan``: each script is
the smallest form of a line a tutorial runs, and each test checks what its user reads: the
script runs to its end, and the figures are the ones CUDA's caching allocator gives."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import plan, printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

WEIGHTS = 1024 * 1024 * 4 + 1024 * 4
"""An ``nn.Linear(1024, 1024)``'s float32 weight and bias, each a whole number of blocks."""


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
    facts = printed_facts(tmp_path, "--device-capability", "8.0")
    assert facts["held"] == facts["after"] == 2 * WEIGHTS
    assert facts["device"] == "cpu"
    assert facts["finite"] is True


NESTED = """
import torch
jagged = torch.nested.nested_tensor(
    [torch.randn(5, 8, device="cuda"), torch.randn(3, 8, device="cuda")], layout=torch.jagged
)
print(jagged.size(0), torch.cuda.memory_allocated(), flush=True)
strided = torch.nested.nested_tensor(
    [torch.randn(5, 8, device="cuda"), torch.randn(3, 8, device="cuda")]
)
print("after the strided nested tensor")
"""


def test_a_strided_nested_tensor_stops_the_plan_in_one_line(tmp_path: Path) -> None:
    """A jagged nested tensor on the device is planned (its values and offsets, a block each);
    a strided one, which PyTorch cannot make over a meta storage, stops the plan with one
    line saying so and exit 2, not an internal assert's traceback."""
    script(tmp_path, NESTED)
    done = plan(tmp_path, "--device-capability", "8.0", "train.py")
    assert done.returncode == 2
    assert done.stdout.splitlines()[0] == "2 1024"
    assert "after the strided" not in done.stdout
    assert "Traceback" not in done.stderr
    assert (
        "nested tensors of torch.nested's default layout (torch.strided) are not modelled"
        in (done.stderr.strip().splitlines()[-1])
    )
