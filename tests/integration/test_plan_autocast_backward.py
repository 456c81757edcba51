"""A backward called inside an autocast region runs under it, as autograd's engine runs it with
the thread-local state of the ``backward()`` call: the reduction of a broadcast bias's gradient
is autocast's float32 ``sum``, cast back to the bias's bfloat16 cast; an operator autocast lists
by its ATen name alone (``logsumexp``) is cast too, and ``norm.Scalar`` runs with float32
appended, its input uncast."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

BIAS = """
import json
import sys

import torch

inside = sys.argv[1] == "inside"
layer = torch.nn.Linear(256, 1000, device="cuda")
x = torch.randn(4, 64, 256, device="cuda")
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = layer(x).float().square().mean()
    torch.cuda.memory._record_memory_history()
    if inside:
        loss.backward()
if not inside:
    loss.backward()
trace = torch.cuda.memory._snapshot()["device_traces"][0]
print(json.dumps([e["size"] for e in trace if e["action"] == "alloc"]))
"""


def _backward_allocations(folder: Path, where: str) -> list[int]:
    done = plan(folder, "--device-capability", "8.0", "train.py", where)
    assert done.returncode == 0, done.stderr
    found: list[int] = json.loads(done.stdout.splitlines()[0])
    return found


def test_a_broadcast_gradient_is_reduced_in_float32_inside_autocast(tmp_path: Path) -> None:
    """Inside the region the bias's gradient (1,000 values) is summed into a float32 block,
    cast to bfloat16 and then to the float32 weight's dtype; outside it is summed in bfloat16."""
    script(tmp_path, BIAS)
    outside = _backward_allocations(tmp_path, "outside")
    inside = _backward_allocations(tmp_path, "inside")
    float32, bfloat16 = 1000 * 4, 1000 * 2
    assert outside[-3:] == [bfloat16, float32, 1000 * 256 * 4]
    assert inside[-4:] == [float32, bfloat16, float32, 1000 * 256 * 4]
    assert inside[:-4] == outside[:-3]


LOGSUMEXP = """
import json

import torch


class SmoothMax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.amax(-1)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        torch.cuda.memory._record_memory_history()
        total = torch.logsumexp(x, -1)
        trace = torch.cuda.memory._snapshot()["device_traces"][0]
        print(json.dumps([str(total.dtype)] + [e["size"] for e in trace if e["action"] == "alloc"]))
        return grad.unsqueeze(-1) * (x - total.unsqueeze(-1)).exp()


x = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16, requires_grad=True)
with torch.autocast("cuda", dtype=torch.bfloat16):
    SmoothMax.apply(x).sum().backward()
"""


def test_an_aten_only_listed_operator_is_cast_in_a_backward(tmp_path: Path) -> None:
    """``logsumexp`` in a backward inside bf16 autocast casts its input to float32 first, then
    makes CUDA's float32 maxima, their absolute values, the mask, the shifted input, the sum."""
    script(tmp_path, LOGSUMEXP)
    done = plan(tmp_path, "--device-capability", "8.0", "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    rows, whole = 64 * 4, 64 * 1000 * 4
    assert found == ["torch.float32", whole, rows, rows, 64, whole, rows]


NORM = """
import json

import torch


class Normed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        torch.cuda.memory._record_memory_history()
        whole = torch.ops.aten.norm.Scalar(x, 2)
        rows = torch.ops.aten.norm.ScalarOpt_dim(x, 2, [1])
        trace = torch.cuda.memory._snapshot()["device_traces"][0]
        sizes = [e["size"] for e in trace if e["action"] == "alloc"]
        print(json.dumps([str(whole.dtype), str(rows.dtype), *sizes]))
        return grad


x = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16, requires_grad=True)
with torch.autocast("cuda", dtype=torch.bfloat16):
    Normed.apply(x).sum().backward()
"""


def test_a_norm_in_a_backward_appends_float32_and_casts_nothing(tmp_path: Path) -> None:
    """``norm.Scalar`` and ``norm.ScalarOpt_dim`` of a bf16 64x1000 tensor in a backward inside
    autocast run as ``norm.ScalarOpt_dtype`` (``..._dim_dtype``) with float32 appended
    (``fp32_append_dtype``): their float32 results alone, no float32 copy of the input."""
    script(tmp_path, NORM)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    assert found == ["torch.float32", "torch.float32", 4, 64 * 4]
