"""Jagged nested tensors (``layout=torch.jagged``) on the planned device: the tensor subclass
takes torch's functions and operators itself on a GPU (``linear`` on its values, its own
``is_contiguous``), so the plan lets it, and models the operators it runs on its values."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

LINEAR = """
import json
import torch
rows, width = 395, 256
values = torch.randn(rows, width, device="cuda")
offsets = torch.tensor([0, 100, 137, 387, 395], device="cuda")
batch = torch.nested.nested_tensor_from_jagged(values, offsets) if NESTED else values
proj = torch.nn.Linear(width, 3 * width, device="cuda")
before = torch.cuda.memory_allocated()
out = proj(batch)
grown = torch.cuda.memory_allocated() - before
part = out.values() if NESTED else out
print(json.dumps({"grown": grown, "shape": list(part.shape), "contiguous": out.is_contiguous()}))
"""


def test_a_linear_on_a_jagged_nested_tensor_allocates_what_it_does_on_its_values(
    tmp_path: Path,
) -> None:
    """``nn.Linear`` of a jagged nested tensor runs (it looped through the plan's dispatch until
    Python's recursion limit) and grows memory as the same layer on its values tensor does: the
    output's values and cuBLAS's workspace for the product the nested tensor runs on them."""
    nested, plain = tmp_path / "nested", tmp_path / "plain"
    nested.mkdir()
    plain.mkdir()
    script(nested, "NESTED = True\n" + LINEAR)
    script(plain, "NESTED = False\n" + LINEAR)
    on_nested = printed_facts(nested, "--device-capability", "9.0")
    on_values = printed_facts(plain, "--device-capability", "9.0")
    assert on_nested["shape"] == on_values["shape"] == [395, 768]
    assert on_nested["contiguous"] is True
    assert on_nested["grown"] == on_values["grown"]


ATTENTION = """
import json, sys
import torch
import torch.nn.functional as F
dtype = getattr(torch, sys.argv[1])
heads, head = 8, 64
lengths = [256, 1024, 64, 2048]
values = torch.randn(sum(lengths), heads * head, device="cuda", dtype=dtype, requires_grad=True)
offsets = torch.tensor([0, 256, 1280, 1344, 3392], device="cuda")
batch = torch.nested.nested_tensor_from_jagged(values, offsets)
q = batch.unflatten(-1, (heads, head)).transpose(1, 2)
before = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
out = F.scaled_dot_product_attention(q, q, q)
kept = torch.cuda.memory_allocated() - before
grown = torch.cuda.max_memory_allocated() - before
out.values().sum().backward()
print(json.dumps({"kept": kept, "grown": grown, "out": out.values().numel() * values.element_size(),
                  "scores": heads * max(lengths) ** 2 * values.element_size()}))
"""


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_attention_on_a_jagged_nested_tensor_runs_a_fused_kernel_and_its_backward(
    tmp_path: Path, dtype: str
) -> None:
    """``scaled_dot_product_attention`` of a jagged nested tensor, forward and backward, runs
    under plan (torch's nested attention failed reading ``torch.utils.flop_counter``, then chose
    the math path, which needs a strided nested tensor) on the kernel CUDA picks: flash for
    bfloat16, memory-efficient for float32 on a 9.0 device, so memory grows by the output and
    its log-sum-exp, far below the scores of the longest sequence that the math path makes."""
    script(tmp_path, ATTENTION)
    facts = printed_facts(tmp_path, "--device-capability", "9.0", args=(dtype,))
    out, kept, grown, scores = (facts[key] for key in ("out", "kept", "grown", "scores"))
    assert all(isinstance(value, int) for value in (out, kept, grown, scores))
    assert out <= kept <= grown < scores // 4
