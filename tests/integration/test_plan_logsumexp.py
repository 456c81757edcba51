"""``torch.logsumexp`` under ``memforensics plan`` allocates what CUDA's composite allocates.

On CUDA, ``logsumexp_out_impl`` (``aten/src/ATen/native/ReduceOps.cpp``) takes the maxima, the
absolute maxima and their "is infinite" mask, a shifted copy the size of the input, and the
result, each through the caching allocator; its backward (``logsumexp_backward`` in
``torch/csrc/autograd/FunctionsManual.cpp``) makes ``self - result``, its ``exp()`` and the
product with the gradient. Each test plans a small script through the real console command and
compares the planned trace with that sequence, worked out here from the shapes.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from planned import plan, script

from memforensics.plan import scratch

pytestmark = [pytest.mark.integration, pytest.mark.torch]

FLOAT = 4
BLOCK = 512
"""The caching allocator's rounding of a small request."""

LOGSUMEXP = """
import json
import torch

x = {make}
torch.cuda.memory._record_memory_history(max_entries=100000)
start = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
y = torch.logsumexp(x, 1, keepdim={keepdim})
rise = torch.cuda.max_memory_allocated() - start
if x.requires_grad:
    y.sum().backward()
torch.cuda.memory._dump_snapshot("lse.pickle")
print(json.dumps({{"rise": rise, "shape": list(y.shape)}}))
"""


Events = list[tuple[str, int]]


def _run(folder: Path, make: str, keepdim: bool = False) -> tuple[dict[str, int], Events]:
    """The script's printed facts, and the planned trace's allocations and frees, in order."""
    script(folder, LOGSUMEXP.format(make=make, keepdim=keepdim))
    done = plan(folder, "--device-capability", "8.0", "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    snapshot = pickle.loads((folder / "lse.pickle").read_bytes())
    events = [
        ("free" if e["action"] == "free_requested" else "alloc", e["size"])
        for e in snapshot["device_traces"][0]
        if e["action"] in ("alloc", "free_requested")
    ]
    return json.loads(line), events


def _forward(rows: int, cols: int) -> Events:
    """``logsumexp_out_impl``'s allocations and frees for a float32 ``(rows, cols)`` input
    reduced along its columns, with no staging buffers."""
    maxes = shifted_sum = rows * FLOAT
    return [
        ("alloc", maxes),  # amax(self, dims, keepdim=True)
        ("alloc", rows * FLOAT),  # maxes.abs()
        ("alloc", rows),  # ... == INFINITY (bool)
        ("free", rows),
        ("free", rows * FLOAT),
        ("alloc", rows * cols * FLOAT),  # (self - maxes).exp_()
        ("alloc", shifted_sum),  # the result, sized by sum_out
        ("free", rows * cols * FLOAT),
        ("free", maxes),
    ]


def _rounded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


@pytest.mark.parametrize("keepdim", [False, True])
def test_forward_makes_the_maxima_mask_and_shifted_copy(tmp_path: Path, keepdim: bool) -> None:
    """A float32 logsumexp takes, in CUDA's order, the maxima, the absolute maxima and mask,
    the input-sized shifted copy and the result, and peaks with the shifted copy live."""
    rows, cols = 64, 1000
    facts, events = _run(tmp_path, f'torch.randn({rows}, {cols}, device="cuda")', keepdim)
    assert facts["shape"] == ([rows, 1] if keepdim else [rows])
    assert events == _forward(rows, cols)
    assert facts["rise"] == _rounded(rows * FLOAT) * 2 + rows * cols * FLOAT


def test_backward_makes_the_difference_its_exp_and_the_gradient(tmp_path: Path) -> None:
    """logsumexp's backward makes ``self - result``, its ``exp()`` and the gradient (three
    input-sized tensors), and frees the first two, the exp first."""
    rows, cols = 64, 1000
    full = rows * cols * FLOAT
    make = f'torch.randn({rows}, {cols}, device="cuda", requires_grad=True)'
    _, events = _run(tmp_path, make)
    forward = _forward(rows, cols)
    assert events[: len(forward)] == forward
    backward = [event for event in events[len(forward) :] if event[1] == full]
    assert backward == [("alloc", full)] * 3 + [("free", full)] * 2


def test_an_integral_input_is_copied_to_floating_first(tmp_path: Path) -> None:
    """An int64 input is copied to float32 before the maxima and freed after everything else."""
    rows, cols = 64, 1000
    _, events = _run(tmp_path, f'torch.randint(0, 9, ({rows}, {cols}), device="cuda")')
    copy = rows * cols * FLOAT
    assert events == [("alloc", copy), *_forward(rows, cols), ("free", copy)]


def test_both_reductions_take_their_staging_buffers(tmp_path: Path) -> None:
    """Rows long enough to split across thread blocks: the maxima and the sum each take the
    staging buffer and semaphores ``gpu_reduce_kernel`` takes, right after their result."""
    rows, cols = 4, 1 << 20
    staged = scratch.staging_bytes((rows, cols), (cols, 1), frozenset({1}), 4, 0, (8, 0))
    assert staged is not None
    buffer, semaphores = staged
    stage = [("alloc", buffer), ("alloc", semaphores), ("free", semaphores), ("free", buffer)]
    _, events = _run(tmp_path, f'torch.randn({rows}, {cols}, device="cuda")')
    small, full = rows * FLOAT, rows * cols * FLOAT
    assert events == [
        ("alloc", small), *stage,
        ("alloc", small), ("alloc", rows), ("free", rows), ("free", small),
        ("alloc", full), ("alloc", small), *stage, ("free", full), ("free", small),
    ]  # fmt: skip
