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
