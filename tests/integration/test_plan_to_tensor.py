"""``x.to(other)`` and ``module.to(other)`` under ``memforensics plan`` go where ``other`` is,
as on a GPU: a CUDA tensor puts them on the planned device and counts their bytes, a CPU tensor
brings them back to the host (BoTorch moves its models with ``model.to(train_X)``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

TO_TENSOR = """
import json
import torch

train_x = torch.rand(1000, 6, device="cuda", dtype=torch.double)
before = torch.cuda.memory_allocated()
x = torch.ones(1000, 1000).to(train_x)
moved = torch.cuda.memory_allocated() - before
model = torch.nn.Linear(1000, 1000).to(train_x)
modules = torch.cuda.memory_allocated() - before - moved
state = {k: v.detach().to(device=torch.device("cpu")) for k, v in model.state_dict().items()}
back = model.weight.to(torch.zeros(1))
print(json.dumps({
    "tensor": [str(x.device), str(x.dtype), moved],
    "module": [str(model.weight.device), str(model.weight.dtype), modules],
    "state": {k: [str(v.device), list(v.shape)] for k, v in state.items()},
    "host": [str(back.device), str(back.dtype)],
}))
"""


def test_to_another_tensor_follows_that_tensor_onto_the_device_and_back(tmp_path: Path) -> None:
    """A CPU tensor and a module moved ``.to`` a CUDA float64 tensor are on ``cuda:0`` in
    float64 and take their bytes there (1000 x 1000 x 8; the module's bias, 8,000 B, in a block
    rounded to 512 B), their state copies to the CPU, and ``.to`` a CPU tensor reads back on the
    CPU in its dtype, where the moved tensors read as ``meta`` and copying them out failed."""
    script(tmp_path, TO_TENSOR)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    assert found["tensor"] == ["cuda:0", "torch.float64", 1000 * 1000 * 8]
    assert found["module"] == ["cuda:0", "torch.float64", 1000 * 1000 * 8 + 8192]
    assert found["state"] == {"weight": ["cpu", [1000, 1000]], "bias": ["cpu", [1000]]}
    assert found["host"] == ["cpu", "torch.float32"]
