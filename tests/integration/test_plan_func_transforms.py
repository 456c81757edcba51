"""``torch.func``'s transforms over stand-ins (per-sample gradients as ``vmap(grad(loss))``,
Opacus' ``grad_sample_mode="functorch"``), through the real ``memforensics plan`` console
command."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

PER_SAMPLE_GRADIENTS = """
import json

import torch
from torch.func import functional_call, grad, vmap

ghost = torch.empty(2, device="meta")  # the script's own meta tensor
model = torch.nn.Linear(256, 128).cuda()
x = torch.randn(64, 256, device="cuda")
y = torch.randn(64, 128, device="cuda")
model(x).sum().backward()  # cuBLAS's workspaces, the forward's and the backward's
params = {k: v.detach() for k, v in model.named_parameters()}
seen = []

def loss(p, xi, yi):
    seen.append([str(xi.device), xi.is_cuda, xi.is_meta, xi.get_device()])
    out = functional_call(model, p, (xi.unsqueeze(0),))
    return ((out - yi.unsqueeze(0)) ** 2).sum()

before = torch.cuda.memory_allocated()
grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
print(json.dumps({"seen": seen, "held": torch.cuda.memory_allocated() - before,
                  "grads": {k: [str(g.device), *g.shape] for k, g in grads.items()}}))
"""


def test_per_sample_gradients_read_the_device_and_hold_a_gradient_per_sample(
    tmp_path: Path,
) -> None:
    """Inside ``vmap(grad(loss))`` a sample reads ``cuda:0`` as on a GPU, with a ``meta``
    tensor of the script's own alive (the transforms' wrappers have no storage to tell the two
    apart by), and the per-sample gradients hold 64 float32 copies of the 128 * 256 + 128
    parameters."""
    script(tmp_path, PER_SAMPLE_GRADIENTS)
    facts = printed_facts(tmp_path)
    assert facts == {
        "seen": [["cuda:0", True, False, 0]],
        "held": 64 * (128 * 256 + 128) * 4,
        "grads": {"weight": ["cuda:0", 64, 128, 256], "bias": ["cuda:0", 64, 128]},
    }
