"""``param.data = ...`` between the planned device and the host, as offloading code rebinds a
parameter in place (verl's and DeepSpeed's offload between an RL step's phases), through the
real ``memforensics plan`` console command."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import plan, printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

OFFLOAD = """
import json
import torch

model = torch.nn.Linear(1024, 1024, bias=False).cuda()  # 4 MiB of weight
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
weight = model.weight
weight.tag = "kept"
on_device = torch.cuda.memory_allocated()
with torch.no_grad():
    for p in model.parameters():
        p.data = p.data.to("cpu", non_blocking=True)
offloaded = torch.cuda.memory_allocated()
host = [str(weight.device), type(weight).__name__, weight.requires_grad, weight.tag]
with torch.no_grad():
    for p in model.parameters():
        p.data = p.data.to("cuda", non_blocking=True)
back = torch.cuda.memory_allocated()
model(torch.randn(8, 1024, device="cuda")).sum().backward()
optimizer.step()
print(json.dumps({"on_device": on_device, "offloaded": offloaded, "back": back, "host": host,
                  "same": optimizer.param_groups[0]["params"][0] is weight is model.weight,
                  "grad": list(weight.grad.shape)}))
"""


def test_a_parameter_offloaded_in_place_frees_its_block_and_comes_back(tmp_path: Path) -> None:
    """``p.data = p.data.to("cpu")`` on a parameter on the planned device, which the CPU build
    refused ("incompatible tensor type") where a GPU rebinds it, frees its 4 MiB block and
    leaves the same object, its class, ``requires_grad`` and attributes, on the host; moved
    back the same way it takes its block again and trains under the optimizer that held it."""
    script(tmp_path, OFFLOAD)
    facts = printed_facts(tmp_path)
    assert facts == {
        "on_device": 4 << 20, "offloaded": 0, "back": 4 << 20,
        "host": ["cpu", "Parameter", True, "kept"], "same": True, "grad": [1024, 1024],
    }  # fmt: skip


GHOST = """
import torch

weight = torch.zeros(4)
weight.data = torch.empty(4, device="meta")  # the script's own meta: torch refuses it anywhere
"""


def test_the_scripts_own_meta_tensor_is_refused_as_on_a_gpu(tmp_path: Path) -> None:
    """A ``meta`` tensor of the script's own (not on the planned device) stays incompatible
    with a host tensor: torch's own error, as on a GPU."""
    script(tmp_path, GHOST)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 2
    assert "incompatible tensor type" in done.stderr


MOVED = """
import json, weakref
import torch

model = torch.nn.Linear(1024, 1024, bias=False)  # 4 MiB of weight
weight = model.weight
weight.tag = "kept"  # a library's mark on a parameter (Megatron's, DeepSpeed's)
names = {}
finalizer = weakref.finalize(weight, names.clear)  # DeepSpeed names parameters so
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model.cuda()
model(torch.randn(8, 1024, device="cuda")).sum().backward()
optimizer.step()
print(json.dumps({"allocated": torch.cuda.memory_allocated(), "device": str(weight.device),
                  "tag": getattr(weight, "tag", None), "alive": finalizer.alive,
                  "same": optimizer.param_groups[0]["params"][0] is weight is model.weight}))
"""


def test_a_module_moved_to_the_device_keeps_its_parameters_marks_and_weak_references(
    tmp_path: Path,
) -> None:
    """``model.cuda()`` keeps each parameter's object with its attributes and the weak
    references to it, as a CUDA build's ``param.data = moved`` does: the plan's move lost the
    attributes, and refused a parameter with a ``weakref.finalize`` ("Couldn't swap"), which
    stopped DeepSpeed's engine; the weight then trains on the device under the optimizer
    built before the move."""
    script(tmp_path, MOVED)
    facts = printed_facts(tmp_path)
    assert facts["device"] == "cuda:0"
    assert facts["tag"] == "kept"
    assert facts["alive"] is True
    assert facts["same"] is True
    allocated = facts["allocated"]
    assert isinstance(allocated, int)
    assert allocated >= 2 * (4 << 20)  # the weight and its gradient
