"""Reductions CUDA runs through ``gpu_reduce_kernel`` take, under ``memforensics plan``, what the
kernel takes through the caching allocator beside their outputs.

When ``setReduceConfig`` splits one output across thread blocks, ``gpu_reduce_kernel``
(``aten/src/ATen/native/cuda/Reduce.cuh``) allocates a staging buffer and its semaphores and
frees them as it returns, semaphores first; a reduction that cannot read its input as it lies
reduces a copy (cast to the output's dtype, or made contiguous), made after the outputs and
freed last. Each test plans a small script through the real console command and compares its
trace with the sizes :func:`~memforensics.plan.scratch.staging_bytes` gives for the template
arguments of the operator's CUDA kernel, written out here from the source.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from planned import plan, script

from memforensics.plan import scratch

pytestmark = [pytest.mark.integration, pytest.mark.torch]

H100 = (9, 0)
REDUCE = """
import torch

x = {make}
torch.cuda.memory._record_memory_history(max_entries=100000)
y = {call}
torch.cuda.memory._dump_snapshot("reduce.pickle")
"""

Events = list[tuple[str, int]]


def _events(folder: Path, make: str, call: str) -> Events:
    """The planned trace's allocations and frees from the reduction on, in order."""
    script(folder, REDUCE.format(make=make, call=call))
    done = plan(folder, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    snapshot = pickle.loads((folder / "reduce.pickle").read_bytes())
    return [
        ("free" if e["action"] == "free_requested" else "alloc", e["size"])
        for e in snapshot["device_traces"][0]
        if e["action"] in ("alloc", "free_requested")
    ]


def _staged(*args: object, input_vec: int = 4) -> Events:
    """The staging buffer and semaphores ``gpu_reduce_kernel`` takes and frees."""
    found = scratch.staging_bytes(*args, H100, input_vec=input_vec)  # type: ignore[arg-type]
    assert found is not None
    buffer, semaphores = found
    return [("alloc", buffer), ("alloc", semaphores), ("free", semaphores), ("free", buffer)]


def test_a_variance_over_the_batch_stages_welford_accumulators(tmp_path: Path) -> None:
    """``x.var(dim=0)`` over (65536, 64) float32 stages 16-byte ``WelfordData<float, int32>``
    accumulators with Welford's ``vt0 = 2`` right after its 256-byte output: 32 MiB."""
    rows, cols = 65536, 64
    events = _events(tmp_path, f'torch.randn({rows}, {cols}, device="cuda")', "x.var(dim=0)")
    stage = _staged((rows, cols), (cols, 1), frozenset({0}), 16, 0, input_vec=2)
    assert stage[0] == ("alloc", 33_554_432)
    assert events == [("alloc", cols * 4), *stage]


def test_a_norm_of_a_large_tensor_stages_float_partial_sums(tmp_path: Path) -> None:
    """``x.norm()`` of 2**24 float32 values (``linalg_vector_norm``, ``NormTwoOps<float>``)
    stages one float per block after its 4-byte output."""
    n = 1 << 24
    events = _events(tmp_path, f'torch.randn({n}, device="cuda")', "x.norm()")
    assert events == [("alloc", 4), *_staged((n,), (1,), frozenset({0}), 4, 0)]


def test_max_over_the_batch_stages_value_index_pairs(tmp_path: Path) -> None:
    """``x.max(dim=0)`` makes its values and int64 indices, then stages 16-byte
    ``pair<float, int64>`` accumulators (``MaxOps``)."""
    rows, cols = 65536, 64
    events = _events(tmp_path, f'torch.randn({rows}, {cols}, device="cuda")', "x.max(dim=0)")
    stage = _staged((rows, cols), (cols, 1), frozenset({0}), 16, 0)
    assert events == [("alloc", cols * 4), ("alloc", cols * 8), *stage]


def test_max_of_a_transposed_tensor_reduces_a_contiguous_copy(tmp_path: Path) -> None:
    """``x.t().max()`` reduces ``self.contiguous()``: the 64 MiB copy comes after the output,
    then the staging of one float per block (``acc_t = scalar_t``), the copy freed last."""
    n = 4096 * 4096
    events = _events(tmp_path, 'torch.randn(4096, 4096, device="cuda")', "x.t().max()")
    stage = _staged((n,), (1,), frozenset({0}), 4, 0)
    assert events == [("alloc", 4), ("alloc", n * 4), *stage, ("free", n * 4)]


def test_a_boolean_mask_is_summed_as_an_int64_copy(tmp_path: Path) -> None:
    """``mask.sum()`` reads the mask cast to its int64 result (``make_reduction_from_out_ty``):
    a copy 8 times the mask's size, and int64 accumulators staged."""
    side = 4096
    make = f'torch.rand({side}, {side}, device="cuda") > 0.5'
    events = _events(tmp_path, make, "x.sum()")
    stage = _staged((side, side), (side, 1), frozenset({0, 1}), 8, 0)
    copy = side * side * 8
    assert events == [("alloc", 8), ("alloc", copy), *stage, ("free", copy)]


def test_argmax_over_one_row_of_logits_does_not_split(tmp_path: Path) -> None:
    """``logits.argmax(-1)`` over (1, 50257) leaves 99 values per thread, under the 256 that
    split an output across blocks: its int64 output alone."""
    events = _events(tmp_path, 'torch.randn(1, 50257, device="cuda")', "x.argmax(-1)")
    shape, strides = (1, 50257), (50257, 1)
    assert scratch.staging_bytes(shape, strides, frozenset({1}), 16, 0, H100) is None
    assert events == [("alloc", 8)]
