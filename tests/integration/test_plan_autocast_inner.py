"""Under autocast ``F.cross_entropy``, ``F.normalize``, ``1 / x`` and ``F.pairwise_distance``
cast where CUDA's kernels sit, inside them: bfloat16 log-probabilities and a float32 copy that
``nll_loss`` keeps, a norm into float32 with no copy of the input, a float32 ``reciprocal``."""

from __future__ import annotations

import json

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

ROWS, COLUMNS = 64, 1000
HALF, SINGLE = ROWS * COLUMNS * 2, ROWS * COLUMNS * 4
SCALAR = 512  # the smallest block

CALLS = """
import json

import torch
import torch.nn.functional as F

x = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16)
logits = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16, requires_grad=True)
target = torch.randint(0, 1000, (64,), device="cuda")
calls = {
    "cross_entropy": lambda: F.cross_entropy(logits, target),
    "normalize": lambda: F.normalize(x, dim=-1),
    "reciprocal": lambda: 1 / x,
    "pairwise_distance": lambda: F.pairwise_distance(x, x),
}
torch.cuda.memory._record_memory_history()
found, seen = {}, 0
for name, call in calls.items():
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = call()
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    sizes = [e["size"] for e in trace[seen:] if e["action"] == "alloc"]
    found[name] = [str(out.dtype), torch.cuda.memory_allocated() - before, *sizes]
    if out.requires_grad:
        out.backward()
        found["backward_peak"] = torch.cuda.max_memory_allocated() - before
    del out
    seen = len(torch.cuda.memory._snapshot()["device_traces"][0])
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Each call's result dtype, the bytes it leaves allocated and the sizes of the blocks it
    allocated, planned once."""
    folder = tmp_path_factory.mktemp("calls")
    script(folder, CALLS)
    done = plan(folder, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    calls: dict[str, object] = json.loads(done.stdout.splitlines()[0])
    return calls


def test_cross_entropy_keeps_its_log_probabilities_and_their_float32_copy(
    found: dict[str, object],
) -> None:
    """``log_softmax`` in bfloat16, then ``nll_loss``'s float32 copy of it: both kept for the
    backward, whose peak adds ``nll_loss``'s float32 gradient and the seed."""
    kept = HALF + SINGLE + 2 * SCALAR  # and the loss and its total weight, a float32 each
    assert found["cross_entropy"] == ["torch.float32", kept, HALF, SINGLE, 4, 4]
    assert found["backward_peak"] == HALF + SINGLE + SINGLE + 3 * SCALAR


def test_normalize_and_reciprocal_cast_in_the_operators_they_call(
    found: dict[str, object],
) -> None:
    """``normalize``: a float32 norm a row, clamped, and the float32 quotient, no copy of the
    input; ``1 / x``: a float32 copy for ``reciprocal``, its result and the product."""
    assert found["normalize"] == ["torch.float32", SINGLE, ROWS * 4, ROWS * 4, SINGLE]
    assert found["reciprocal"] == ["torch.float32", SINGLE, SINGLE, SINGLE, SINGLE]


def test_pairwise_distance_takes_the_norm_of_the_difference_into_float32(
    found: dict[str, object],
) -> None:
    """``pairwise_distance``: the difference and ``+ eps`` in bfloat16, then ``norm`` with
    float32 appended, which reads them into a float32 distance a row."""
    assert found["pairwise_distance"] == ["torch.float32", SCALAR, HALF, HALF, ROWS * 4]
