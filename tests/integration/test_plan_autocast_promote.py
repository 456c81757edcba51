"""Under autocast ``torch.cat`` and ``torch.stack`` of a bfloat16 and a float32 tensor make
only their float32 result, as on CUDA, whose autocast has no kernel for them (they promote
mixed inputs themselves): no float32 copy of the bfloat16 input first. The operators on
autocast's promote list widen by its own rule: float64 inputs and host numbers are ignored."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import traced_calls

pytestmark = [pytest.mark.integration, pytest.mark.torch]

ROWS, COLUMNS = 64, 1000

CALLS = """
half = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16)
single = torch.randn(64, 1000, device="cuda")
calls = {
    "cat": lambda: torch.cat([half, single]),
    "stack": lambda: torch.stack([half, single]),
    "addcmul": lambda: torch.addcmul(single, half, half),
}
"""


def test_cat_and_stack_promote_in_their_kernels(tmp_path: Path) -> None:
    """``cat`` and ``stack`` make their float32 result of both inputs' rows alone;
    ``addcmul``, still on autocast's promote list, casts both bfloat16 inputs first."""
    found = traced_calls(tmp_path, CALLS)
    both = 2 * ROWS * COLUMNS * 4
    assert found["cat"] == ["torch.float32", both]
    assert found["stack"] == ["torch.float32", both]
    one = ROWS * COLUMNS * 4
    assert found["addcmul"] == ["torch.float32", one, one, one]


IGNORED = """
half = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16)
double = torch.randn(64, 1000, device="cuda", dtype=torch.float64)
calls = {
    "addcmul": lambda: torch.addcmul(half, half, double),
    "atan2": lambda: torch.atan2(half, torch.tensor(2.0)),
}
"""


def test_promote_ignores_float64_and_host_inputs(tmp_path: Path) -> None:
    """``prioritize`` ignores a float64 input and one on the host (a CPU number beside the
    device's tensors): ``addcmul`` of bfloat16 inputs and a float64 one casts nothing and
    makes its float64 result alone (not two float64 copies first), ``atan2`` of a bfloat16
    input and a CPU float32 number runs in bfloat16 (not from a float32 copy)."""
    found = traced_calls(tmp_path, IGNORED)
    assert found["addcmul"] == ["torch.float64", ROWS * COLUMNS * 8]
    assert found["atan2"] == ["torch.bfloat16", ROWS * COLUMNS * 2]
