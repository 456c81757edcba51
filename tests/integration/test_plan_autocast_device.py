"""Autocast keyed by a tensor's device type: ``torch.autocast(x.device.type)``,
``torch.is_autocast_enabled(x.device.type)`` and ``torch.get_autocast_dtype(x.device.type)``
ask about CUDA on a GPU. TRL's chunked log-probabilities (``SFTTrainer``'s default loss) ask so
inside a custom autograd function; a stand-in's device type is ``meta``, which has no autocast
state of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

ASKED = """
import json
import torch

class Scaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden):
        device = hidden.device
        compute = (
            torch.get_autocast_dtype(device.type)
            if torch.is_autocast_enabled(device.type)
            else hidden.dtype
        )
        return hidden.to(compute) * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2

hidden = torch.randn(256, 256, device="cuda", requires_grad=True)
with torch.autocast("cuda", dtype=torch.bfloat16):
    before = torch.cuda.memory_allocated()
    out = Scaled.apply(hidden)
    held = torch.cuda.memory_allocated() - before
print(json.dumps({"dtype": str(out.dtype), "held": held}))
"""

CONTEXT = """
import json
import torch

x = torch.randn(256, 256, device="cuda")
w = torch.randn(256, 256, device="cuda")
warm = x @ w  # cuBLAS's workspace, made at the first matmul
with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
    before = torch.cuda.memory_allocated()
    low = x @ w
    held = torch.cuda.memory_allocated() - before
    available = torch.amp.is_autocast_available(x.device.type)
    with torch.autocast(device_type=x.device.type, enabled=False):
        full = x @ w
print(json.dumps({"low": str(low.dtype), "held": held, "full": str(full.dtype),
                  "available": available, "after": torch.is_autocast_enabled("cuda")}))
"""


def test_a_custom_function_reads_cudas_autocast_from_its_inputs_device_type(
    tmp_path: Path,
) -> None:
    """A custom function that picks its compute dtype from ``is_autocast_enabled`` and
    ``get_autocast_dtype`` of its input's device type runs under ``autocast("cuda")`` and
    computes in bfloat16, as on a GPU: it holds its bfloat16 result (128 KiB, not float32's
    256 KiB) once its cast is freed."""
    script(tmp_path, ASKED)
    assert printed_facts(tmp_path) == {"dtype": "torch.bfloat16", "held": 256 * 256 * 2}


def test_autocast_of_a_tensors_device_type_casts_as_cudas(tmp_path: Path) -> None:
    """``torch.autocast(x.device.type, bfloat16)`` is CUDA's autocast: a matmul keeps only its
    bfloat16 result (its operands' casts are freed), a nested ``enabled=False`` computes in
    float32, and CUDA's autocast is off again after the context."""
    script(tmp_path, CONTEXT)
    assert printed_facts(tmp_path) == {
        "low": "torch.bfloat16",
        "held": 256 * 256 * 2,
        "full": "torch.float32",
        "available": True,
        "after": False,
    }
