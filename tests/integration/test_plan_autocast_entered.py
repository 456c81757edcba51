"""Under autocast ``nn.MultiheadAttention`` casts inside ``F.multi_head_attention_forward``, as
CUDA does: bfloat16 projections from cached bfloat16 weights, a float32 ``softmax``, a bfloat16
output; ``F.gumbel_softmax`` of bfloat16 logits is float32."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

BATCH, LENGTH, WIDTH, HEADS = 8, 128, 256, 4
TOKENS = BATCH * LENGTH
HALF = TOKENS * WIDTH * 2  # a bfloat16 activation
SCORES = BATCH * HEADS * LENGTH * LENGTH  # the attention weights' elements
WORKSPACE = 32 << 20  # cuBLAS's workspace on sm_90, taken at the first product

ATTENTION = """
import json

import torch
import torch.nn as nn
import torch.nn.functional as F

mha = nn.MultiheadAttention(256, 4, batch_first=True).cuda()
x = torch.randn(8, 128, 256, device="cuda", requires_grad=True)
logits = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16)
torch.cuda.memory._record_memory_history()
with torch.autocast("cuda", dtype=torch.bfloat16):
    out, weights = mha(x, x, x)
    sample = F.gumbel_softmax(logits)
trace = torch.cuda.memory._snapshot()["device_traces"][0]
sizes = [e["size"] for e in trace if e["action"] == "alloc"]
out.float().sum().backward()
found = [str(t.dtype) for t in (out, weights, sample, x.grad)]
print(json.dumps({"dtypes": found, "sizes": sizes}))
"""


def test_multi_head_attention_casts_its_inner_functions(tmp_path: Path) -> None:
    """The sizes CUDA allocates in the forward, each from PyTorch's source: ``linear`` on the
    transposed batch casts it (a copy with its strides), the weight and bias to cached bfloat16
    copies, folds the batch (``matmul``'s ``reshape``, a copy) into one ``mm`` and adds the
    bias in place; the heads made contiguous; ``q * scale``, ``bmm`` in bfloat16; ``softmax``
    with a float32 dtype converts, then computes in float32; the second ``bmm`` casts those
    weights back to bfloat16; the output projection's ``addmm``; the heads' float32 mean."""
    script(tmp_path, ATTENTION)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    assert found["dtypes"] == ["torch.bfloat16", "torch.float32", "torch.float32", "torch.float32"]
    in_weight, in_bias = 3 * WIDTH * WIDTH * 2, 3 * WIDTH * 2
    out_weight, out_bias = WIDTH * WIDTH * 2, WIDTH * 2
    forward = [
        HALF, in_weight, in_bias, HALF, 3 * HALF, WORKSPACE, 3 * HALF,  # the input projection
        HALF, SCORES * 2, SCORES * 4, SCORES * 4, SCORES * 2, HALF, HALF,  # attention
        out_weight, out_bias, HALF,  # the output projection
        BATCH * LENGTH * LENGTH * 4,  # the weights averaged over the heads
    ]  # fmt: skip
    assert found["sizes"][: len(forward)] == forward
