"""Under autocast a compiled graph runs ``pairwise_distance`` and ``cross_entropy`` as the
operators they call, each cast as CUDA's autocast casts it where AOTAutograd traces them:
the distances float32 (``norm`` with float32 appended), the loss from bfloat16
log-probabilities, as the same calls run eagerly."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import traced_calls

pytestmark = [pytest.mark.integration, pytest.mark.torch]

ROWS = 64

CALLS = """
x = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16)
logits = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16, requires_grad=True)
target = torch.randint(0, 1000, (64,), device="cuda")
distance = torch.compile(F.pairwise_distance)
loss = torch.compile(lambda a, b: F.cross_entropy(a, b, label_smoothing=0.1))
calls = {
    "distance": lambda: distance(x, x),
    "loss": lambda: loss(logits, target),
}
"""


def test_compiled_composites_cast_their_inner_operators(tmp_path: Path) -> None:
    """The compiled distance is float32 (it was bfloat16): one float32 distance a row, the
    difference computed in Inductor's fused kernel; the compiled loss is float32."""
    found = traced_calls(tmp_path, CALLS)
    assert found["distance"] == ["torch.float32", ROWS * 4]
    assert found["loss"][0] == "torch.float32"
