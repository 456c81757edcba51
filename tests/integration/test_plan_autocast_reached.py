"""Under autocast the functions whose cast CUDA makes in the operator they reach are cast there:
``torch.special.softmax`` as ``softmax``, a ``padding="same"`` convolution at the
``convolution`` after its padded copy, and the ``norm`` of ``_weight_norm`` and
``pairwise_distance`` into float32, by the overload autocast redispatches to."""

from __future__ import annotations

import json

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

ROWS, COLUMNS = 64, 1000
HALF, SINGLE = ROWS * COLUMNS * 2, ROWS * COLUMNS * 4

BATCH, CHANNELS, SIDE, OUT, KERNEL = 8, 16, 32, 32, 4
"""A ``conv2d`` of a float32 batch with an even kernel: ``padding="same"`` pads
``KERNEL - 1`` = 3 a dimension, 1 before and 2 after, the odd one after."""

WEIGHT_OUT, WEIGHT_IN, WIDTH = 64, 32, 50
"""A float16 ``Conv1d(32, 64, 50)`` weight under ``weight_norm``."""

CALLS = """
import json

import torch
import torch.nn.functional as F
from torch.nn.utils.parametrizations import weight_norm

x = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16)
h = torch.randn(64, 1000, device="cuda", dtype=torch.float16)
images = torch.randn(8, 16, 32, 32, device="cuda")
conv = torch.nn.Conv2d(16, 32, 4, padding="same", device="cuda")
padded = torch.nn.Conv2d(16, 32, 4, padding=(1, 1), device="cuda")
middle = weight_norm(torch.nn.Conv1d(32, 64, 50, device="cuda", dtype=torch.float16), dim=1)
whole = weight_norm(torch.nn.Conv1d(32, 64, 50, device="cuda", dtype=torch.float16), dim=None)
calls = {
    "special_softmax": (torch.bfloat16, lambda: torch.special.softmax(x, -1)),
    "special_log_softmax": (torch.bfloat16, lambda: torch.special.log_softmax(x, -1)),
    "special_softmax_half": (torch.float16, lambda: torch.special.softmax(h, -1)),
    "special_log_softmax_given": (
        torch.float16, lambda: torch.special.log_softmax(h, -1, dtype=h.dtype)
    ),
    "conv_same": (torch.float16, lambda: conv(images)),
    "conv_numbers": (torch.float16, lambda: padded(images)),
    "weight_norm_middle": (torch.float16, lambda: middle.weight),
    "weight_norm_whole": (torch.float16, lambda: whole.weight),
}
torch.cuda.memory._record_memory_history()
found, seen = {}, 0
for name, (dtype, call) in calls.items():
    with torch.autocast("cuda", dtype=dtype):
        out = call()
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    kept = ("alloc", "free_requested")
    events = [[e["action"], e["size"]] for e in trace[seen:] if e["action"] in kept]
    found[name] = [str(out.dtype), *events]
    del out
    seen = len(torch.cuda.memory._snapshot()["device_traces"][0])
a = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16, requires_grad=True)
with torch.autocast("cuda", dtype=torch.bfloat16):
    total = F.pairwise_distance(a, x).sum()
seen = len(torch.cuda.memory._snapshot()["device_traces"][0])
total.backward()
trace = torch.cuda.memory._snapshot()["device_traces"][0]
found["pairwise_backward"] = [e["size"] for e in trace[seen:] if e["action"] == "alloc"]
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[object]]:
    """Each call's result dtype, then what it allocated and freed (action, bytes), in order,
    planned once."""
    folder = tmp_path_factory.mktemp("reached")
    script(folder, CALLS)
    done = plan(folder, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    calls: dict[str, list[object]] = json.loads(done.stdout.splitlines()[0])
    return calls


def _allocated(events: list[object]) -> list[object]:
    """The sizes of the blocks allocated, in order."""
    return [size for action, size in events if action == "alloc"]  # type: ignore[misc]


def test_special_softmax_is_cast_as_the_softmax_it_reaches(
    found: dict[str, list[object]],
) -> None:
    """``special_softmax`` is ``at::softmax(input, dim, dtype)`` (``SoftMax.cpp``), whose
    dtype autocast sets to float32 (``fp32_set_opt_dtype``): a bfloat16 input is converted to
    a float32 copy, then the float32 result; a float16 one is read into the float32 result
    (``half_to_float``); a dtype the script gives is kept."""
    for name in ("special_softmax", "special_log_softmax"):
        assert found[name][0] == "torch.float32"
        assert _allocated(found[name][1:]) == [SINGLE, SINGLE]
    assert found["special_softmax_half"][0] == "torch.float32"
    assert _allocated(found["special_softmax_half"][1:]) == [SINGLE]
    assert found["special_log_softmax_given"][0] == "torch.float16"
    assert _allocated(found["special_log_softmax_given"][1:]) == [HALF]


def test_same_padding_pads_in_float32_before_convolution_casts(
    found: dict[str, list[object]],
) -> None:
    """``conv2d.padding`` has no autocast kernel: ``convolution_same`` pads the float32 input
    by the asymmetric 1 after (``constant_pad_nd``), then ``convolution`` casts that padded
    copy, the weight and the bias to float16; the float32 copy is freed as it returns. A
    padding of numbers casts the input as it is (``conv2d``'s own kernel)."""
    side = SIDE + 1
    padded = BATCH * CHANNELS * side * side
    weight, bias = OUT * CHANNELS * KERNEL * KERNEL * 2, OUT * 2
    output = BATCH * OUT * SIDE * SIDE * 2
    events = found["conv_same"]
    assert events[0] == "torch.float16"
    assert _allocated(events[1:]) == [padded * 4, padded * 2, weight, bias, output]
    assert ["free_requested", padded * 4] in events
    numbers = found["conv_numbers"]
    assert _allocated(numbers[1:])[:3] == [BATCH * CHANNELS * SIDE * SIDE * 2, weight, bias]


def test_weight_norm_takes_its_norm_into_float32(found: dict[str, list[object]]) -> None:
    """``_weight_norm`` off its fused path is ``v * (g / norm_except_dim(v, 2, dim))``
    (``WeightNorm.cpp``), whose ``norm.ScalarOpt_dim`` (``norm.Scalar`` for ``dim=None``)
    autocast runs with float32 appended: over a middle dimension the transposed weight's
    float16 contiguous copy, then float32 norms and quotient (one a channel) and a float32
    weight; over the whole weight a float32 norm and quotient, each 0-dim, which leave the
    product float16."""
    weight = WEIGHT_OUT * WEIGHT_IN * WIDTH
    middle = found["weight_norm_middle"]
    assert middle[0] == "torch.float32"
    assert _allocated(middle[1:]) == [weight * 2, WEIGHT_IN * 4, WEIGHT_IN * 4, weight * 4]
    whole = found["weight_norm_whole"]
    assert whole[0] == "torch.float16"
    assert _allocated(whole[1:]) == [4, 4, weight * 2]


def test_pairwise_distance_backward_is_that_of_the_norm_autocast_redispatches_to(
    found: dict[str, list[object]],
) -> None:
    """``pairwise_distance``'s ``norm.ScalarOpt_dim`` runs as ``norm.ScalarOpt_dim_dtype``,
    whose backward is ``norm_backward(grad, self.to(grad.scalar_type()), ...)``
    (``derivatives.yaml``): the seed, a float32 copy of the bf16 difference, then for ``p=2``
    ``grad * (self / norm).masked_fill_(norm == 0, 0)`` (the quotient, a bool mask a row, the
    product), and the engine's bfloat16 cast of that gradient for the input."""
    assert found["pairwise_backward"] == [4, SINGLE, SINGLE, ROWS, SINGLE, HALF]
