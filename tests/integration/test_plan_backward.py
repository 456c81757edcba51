"""Backward under ``memforensics plan`` writes in place where CUDA's autograd does.

Under a dispatch mode (and on ``meta``) autograd's formulas take their out-of-place branch for
tensor subclasses; on CUDA the same lines write into the tensor they have just made. Each test
plans a small backward through the real console command, records only the backward, and counts
its full-size allocations against the ones CUDA makes, worked out here from the formula in
``torch/csrc/autograd/FunctionsManual.cpp`` (or ``input_buffer.cpp``) and the shapes.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

ROWS, COLS = 64, 4096
FULL = ROWS * COLS * 4
"""Bytes of one float32 ``ROWS`` by ``COLS`` tensor: the size each test counts."""

BACKWARD = """
import json
import torch
import torch.nn.functional as F

x = torch.randn({rows}, {cols}, device="cuda", requires_grad=True)
{setup}
loss = {loss}
torch.cuda.memory._record_memory_history(max_entries=100000)
start = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
loss.backward()
torch.cuda.memory._dump_snapshot("backward.pickle")
print(json.dumps({{"rise": torch.cuda.max_memory_allocated() - start}}))
"""


def _backward(folder: Path, loss: str, setup: str = "", size: int = FULL) -> tuple[list[int], int]:
    """The sizes of the allocations of ``size`` (full-size ones unless told) the planned
    backward of ``loss`` makes, in order, and how far allocated memory rose above its level
    before backward."""
    body = BACKWARD.format(rows=ROWS, cols=COLS, setup=setup, loss=loss)
    script(folder, body)
    done = plan(folder, "--json", "--device-capability", "8.0", "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("{")]
    snapshot = pickle.loads((folder / "backward.pickle").read_bytes())
    sizes = [e["size"] for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
    return [found for found in sizes if found == size], int(json.loads(line)["rise"])


@pytest.mark.parametrize(
    "loss",
    [
        "torch.max(x, -1)[0].sum()",
        "torch.min(x, 1, keepdim=True)[0].sum()",
        "x.topk(5)[0].sum()",
        "x.sort(-1)[0].sum()",
        "x.kthvalue(3)[0].sum()",
        "x.median(-1)[0].sum()",
    ],
)
def test_a_value_selecting_reduction_scatters_into_one_zeroed_gradient(
    tmp_path: Path, loss: str
) -> None:
    """max/min along a dimension, topk, sort, kthvalue and median make one input-sized gradient
    in backward, as ``value_selecting_reduction_backward``'s ``zeros().scatter_()`` does on
    CUDA (its out-of-place ``scatter`` would make two)."""
    full, rise = _backward(tmp_path, loss)
    assert full == [FULL]
    assert rise == FULL + 512  # the gradient, and sum's 0-dim ``ones_like`` seed


def test_a_trace_fills_one_zeroed_gradient(tmp_path: Path) -> None:
    """``trace``'s backward makes one input-sized gradient, ``zeros().index_fill_()`` as on
    CUDA, beside its diagonal's int64 indices."""
    side = int((FULL // 4) ** 0.5)
    setup = f"s = torch.randn({side}, {side}, device='cuda', requires_grad=True)"
    full, rise = _backward(tmp_path, "s.trace()", setup)
    assert full == [FULL]
    assert rise == FULL + 512 + side * 8  # the gradient, the seed, the diagonal's indices


def test_a_take_puts_into_one_zeroed_gradient(tmp_path: Path) -> None:
    """``take``'s backward makes one input-sized gradient, ``zeros_like().put_()`` as on CUDA
    (its out-of-place ``put`` would copy the zeros into a second)."""
    setup = f"i = torch.randint(0, {ROWS * COLS}, ({COLS},), device='cuda')"
    full, _ = _backward(tmp_path, "x.take(i).sum()", setup)
    assert full == [FULL]


def test_atan2_backward_zeroes_its_reciprocal_in_place(tmp_path: Path) -> None:
    """``atan2``'s backward zeroes the reciprocal of ``self * self + other * other`` where both
    are zero in place, as on CUDA: the two squares, their sum, its reciprocal, then
    ``grad * other`` and that times the reciprocal; six input-sized tensors, not seven."""
    setup = f"y = torch.randn({ROWS}, {COLS}, device='cuda')"
    full, _ = _backward(tmp_path, "torch.atan2(x, y).sum()", setup)
    assert full == [FULL] * 6


def test_clamp_with_tensor_bounds_joins_its_masks_in_place(tmp_path: Path) -> None:
    """``clamp``'s backward with tensor ``min`` and ``max`` makes the two comparisons' ``bool``
    masks and joins them with ``logical_and_`` into the first, as on CUDA: two input-sized
    masks, not three, and one full-size gradient (``where``)."""
    setup = (
        f"lo = torch.full(({ROWS}, {COLS}), -0.5, device='cuda')\n"
        f"hi = torch.full(({ROWS}, {COLS}), 0.5, device='cuda')"
    )
    masks, _ = _backward(tmp_path, "torch.clamp(x, lo, hi).sum()", setup, size=ROWS * COLS)
    assert masks == [ROWS * COLS] * 2


@pytest.mark.parametrize(
    "activation",
    [
        "F.silu(x)",
        "F.mish(x)",
        "F.gelu(x)",
        "F.gelu(x, approximate='tanh')",
        "F.hardswish(x)",
        "F.hardsigmoid(x)",
        "F.softplus(x)",
        "F.elu(x)",
        "F.leaky_relu(x)",
        "F.softmax(x, -1)",
        "F.log_softmax(x, -1)",
    ],
)
def test_an_activations_backward_is_one_kernel_as_on_cuda(tmp_path: Path, activation: str) -> None:
    """Each activation's backward makes only its result, as its CUDA kernel does
    (``native_functions.yaml`` gives each a ``CUDA`` kernel; ``mish_backward``'s makes one
    ``grad_input`` of the input's size in ``Activation.cpp``), not the temporaries of a
    composite written for other devices (``silu_backward``'s and ``mish_backward``'s: four
    input-sized ones)."""
    full, rise = _backward(tmp_path, f"{activation}.sum()")
    assert full == [FULL]
    assert rise == FULL + 512  # the gradient, and sum's 0-dim ``ones_like`` seed


@pytest.mark.parametrize(
    ("setup", "weights", "made"),
    [
        ("", "", 1),  # sigmoid, then sub_, mul_(grad), div_ in place
        ("w = torch.rand({cols}, device='cuda')", ", weight=w", 1),  # and mul_(weight)
        # t = pos_weight * target, t + 1, and input.sigmoid() (freed after mul_)
        ("p = torch.rand({cols}, device='cuda')", ", pos_weight=p", 3),
    ],
)
def test_bce_with_logits_backward_works_in_place_as_on_cuda(
    tmp_path: Path, setup: str, weights: str, made: int
) -> None:
    """binary_cross_entropy_with_logits' backward makes the input-sized tensors CUDA's branch
    makes (one; three with ``pos_weight``), not a new one for each ``sub`` and ``mul``."""
    setup = "target = torch.rand({rows}, {cols}, device='cuda')\n" + setup
    setup = setup.format(rows=ROWS, cols=COLS)
    loss = f"F.binary_cross_entropy_with_logits(x, target{weights})"
    full, rise = _backward(tmp_path, loss, setup)
    assert full == [FULL] * made
    assert rise == made * FULL + 512


def test_a_gradient_arriving_transposed_takes_the_next_one_in_place(tmp_path: Path) -> None:
    """Autograd adds a second gradient into a first that arrived transposed (dense, not
    contiguous, and not a view) in place, as ``can_accumulate_inplace`` allows: four
    input-sized tensors in backward, not five."""
    setup = (
        f"w = torch.randn({COLS}, {COLS}, device='cuda')\n"
        f"d = torch.randn({ROWS}, {COLS}, device='cuda')\n"
        f"e = torch.randn({ROWS}, {COLS}, device='cuda')\n"
        f"c = torch.randn({COLS}, {ROWS}, device='cuda')\n"
        "h = x @ w"
    )
    # The engine runs the later branch first: grad * c (one), its transpose times d, laid out
    # transposed (two); then grad * e (three) is added into two in place; mm's result (four).
    full, _ = _backward(tmp_path, "(h * e).sum() + ((h * d).t() * c).sum()", setup)
    assert full == [FULL] * 4


def test_a_gradient_arriving_as_a_view_is_not_written_into(tmp_path: Path) -> None:
    """A first gradient that is a view (``t()``'s backward) shares its storage with its base,
    so ``can_accumulate_inplace`` refuses it on CUDA and the sum is a new tensor: four
    input-sized tensors (each branch's product, their sum, mm's result)."""
    setup = (
        f"w = torch.randn({COLS}, {COLS}, device='cuda')\n"
        f"d = torch.randn({ROWS}, {COLS}, device='cuda')\n"
        f"c = torch.randn({COLS}, {ROWS}, device='cuda')\n"
        "h = x @ w"
    )
    full, _ = _backward(tmp_path, "(h * d).sum() + (h.t() * c).sum()", setup)
    assert full == [FULL] * 4


def test_a_gradient_the_script_kept_is_not_written_into(tmp_path: Path) -> None:
    """A first gradient a hook of the script kept (nnsight's ``.grad.save()``) has a second
    owner, so ``can_accumulate_inplace``'s ``use_count() == 1`` refuses it on CUDA and the
    second gradient is summed into a new tensor: one input-sized tensor more than when only
    autograd holds it."""
    setup = (
        f"w = torch.randn({COLS}, {COLS}, device='cuda')\n"
        "kept = []\n"
        "h = x * 1.5\n"
        "out = h + h @ w  # out's gradient reaches h as it is, then mm's is added to it\n"
    )
    loss = "out.pow(2).sum()"
    (tmp_path / "plain").mkdir()
    (tmp_path / "hooked").mkdir()
    plain, _ = _backward(tmp_path / "plain", loss, setup)
    hooked, _ = _backward(tmp_path / "hooked", loss, setup + "out.register_hook(kept.append)")
    assert len(hooked) == len(plain) + 1


FORCES = """
import torch

pos = torch.randn({rows}, 3, device="cuda", requires_grad=True)
w = torch.randn(3, {cols}, device="cuda")
h = pos @ w
a, b = h[:, : {cols} // 2], h[:, {cols} // 2 :]
energy = (a.sin() * b.cos()).sum()
torch.cuda.memory._record_memory_history(max_entries=100000)
(forces,) = torch.autograd.grad(energy, pos, create_graph={create_graph})
torch.cuda.memory._dump_snapshot("backward.pickle")
torch.cuda.memory._record_memory_history(enabled=None)
if forces.requires_grad:
    (forces * forces).sum().backward()  # the loss on the forces, through the graph just built
"""


@pytest.mark.parametrize(("create_graph", "made"), [(True, 3), (False, 2)])
def test_slices_gradients_are_summed_out_of_place_under_create_graph(
    tmp_path: Path, create_graph: bool, made: int
) -> None:
    """Forces through two slices of one tensor: each slice's ``slice_backward`` makes a zeroed
    gradient of the whole tensor, and ``InputBuffer::accumulate`` sums them out of place while
    grad mode is on (``create_graph=True``), in place into the first otherwise."""
    script(tmp_path, FORCES.format(rows=ROWS, cols=COLS, create_graph=create_graph))
    done = plan(tmp_path, "--device-capability", "8.0", "train.py")
    assert done.returncode == 0, done.stderr
    snapshot = pickle.loads((tmp_path / "backward.pickle").read_bytes())
    sizes = [e["size"] for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
    assert [size for size in sizes if size == FULL] == [FULL] * made
