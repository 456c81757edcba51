"""Saved-tensor hooks on the planned device: autograd calls a pack hook from inside the
operator that saves the tensor, and the hook (activation offloading to the host) runs as on a
GPU, its copies read from the stand-ins and its activations freed from the device."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

OFFLOADED = """
import json
import torch

def pack(t):
    return t.device, t.to("cpu", non_blocking=True)

def unpack(packed):
    device, t = packed
    return t.to(device, non_blocking=True)

mlp = torch.nn.Sequential(
    torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512)
).to("cuda")
x = torch.randn(1024, 512, device="cuda")
mlp(x).sum().backward()  # cuBLAS's workspaces and the gradients, made once
before = torch.cuda.memory_allocated()
with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
    y = mlp(x)
held = torch.cuda.memory_allocated() - before
y.sum().backward()
print(json.dumps({"held": held, "output": y.numel() * y.element_size(),
                  "grad": mlp[0].weight.grad is not None}))
"""


def test_activations_packed_to_the_host_by_a_plain_copy_leave_only_the_output(
    tmp_path: Path,
) -> None:
    """Hooks that pack with a plain ``t.to("cpu")`` (no pinned buffer, no side stream; the
    pinned shapes are in test_plan_offloading) run (the copy out of a ``meta`` tensor failed) and
    the forward holds on the device only its output: every saved activation is on the host."""
    script(tmp_path, OFFLOADED)
    facts = printed_facts(tmp_path, "--device-capability", "9.0")
    assert facts["held"] == facts["output"]
    assert facts["grad"] is True
