"""``weight_norm`` over the first dimension reaches the fused ``_weight_norm_interface``, whose
CUDA kernel (``weight_norm_cuda``, ``WeightNorm.cu``) keeps a 16-bit ``g``'s norms in float32;
the plan allocates what that kernel does, forward and backward."""

from __future__ import annotations

import pytest
from planned import printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

OUT, IN = 2048, 256
"""A ``Linear(256, 2048)`` under ``weight_norm``: ``v`` is 2048 by 256, ``g`` 2048 by 1."""

CALLS = """
import json

import torch
from torch.nn.utils.parametrizations import weight_norm

found = {}
torch.cuda.memory._record_memory_history()
for dtype in (torch.float16, torch.bfloat16, torch.float32):
    layer = weight_norm(torch.nn.Linear(256, 2048, device="cuda", dtype=dtype))
    seen = len(torch.cuda.memory._snapshot()["device_traces"][0])
    w = layer.weight
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    made = [e["size"] for e in trace[seen:] if e["action"] == "alloc"]
    seen = len(trace)
    w.backward(torch.ones_like(w))
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    grads = [e["size"] for e in trace[seen:] if e["action"] == "alloc"]
    original = layer.parametrizations.weight
    found[str(dtype)] = {
        "forward": made,
        "backward": grads,
        "grads": [str(original.original0.grad.dtype), str(original.original1.grad.dtype)],
    }
    del w, layer, original
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Per dtype, the blocks the weight's forward and backward allocated, planned once."""
    folder = tmp_path_factory.mktemp("weight_norm")
    script(folder, CALLS)
    return printed_facts(folder, "--device-capability", "9.0")


def _rounded(size: int) -> int:
    """A request as the caching allocator's blocks hold it: 512-byte multiples."""
    return -(-size // 512) * 512


@pytest.mark.parametrize("dtype", ["torch.float16", "torch.bfloat16"])
def test_sixteen_bit_norms_are_float32(found: dict[str, object], dtype: str) -> None:
    """A float16 or bfloat16 ``g``'s norms are float32 (``AccType``), one a row beside ``w`` of
    ``v``'s dtype; the backward makes ``grad_v`` and ``grad_g`` of ``v``'s and ``g``'s dtype
    (``empty_like``) after ``grad.contiguous()``'s copy of the expanded ones."""
    calls = found[dtype]
    assert isinstance(calls, dict)
    assert calls["forward"] == [OUT * IN * 2, _rounded(OUT * 4)]
    assert calls["grads"] == [dtype, dtype]
    assert sorted(calls["backward"])[-3:] == [_rounded(OUT * 2), OUT * IN * 2, OUT * IN * 2]


def test_float32_norms_are_g_s_dtype(found: dict[str, object]) -> None:
    """A float32 ``g``'s norms keep its dtype: 4 bytes a row, as the weight's 4 an element."""
    calls = found["torch.float32"]
    assert isinstance(calls, dict)
    assert calls["forward"] == [OUT * IN * 4, _rounded(OUT * 4)]
