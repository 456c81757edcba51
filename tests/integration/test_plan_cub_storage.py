"""CUB's temporary storage for CUDA's scans and selections under the real ``memforensics
plan``: a ``cumsum`` or ``cumprod`` of one row takes ``DeviceScan::InclusiveScan``'s tile states
(``ScanUtils.cuh``'s ``scan_dim``), and ``nonzero`` its count, ``DeviceReduce::Sum``'s and
``DeviceSelect::Flagged``'s storage (``Nonzero.cu``), each taken and freed inside the kernel in
CUDA's order. The sizes are derived from CCCL 3.0's dispatch and tuning sources (docs/plan.md,
"CUB's temporary storage")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

SCANNED = """
import json
import torch
n = 100000
x = torch.randn(n, device="cuda")
i = torch.ones(n, device="cuda", dtype=torch.int32)
h = torch.randn(1, n, device="cuda", dtype=torch.bfloat16)
torch.cuda.memory._record_memory_history(max_entries=100000)
a = x.cumsum(0)
b = i.cumsum(0)
c = h.cumprod(1)
d = x.view(-1, 10).cumsum(1)
trace = torch.cuda.memory._snapshot()["device_traces"][0]
kept = {"alloc": "a", "free_completed": "f"}
print(json.dumps([kept[e["action"]] + str(e["size"]) for e in trace if e["action"] in kept]))
"""
"""Scans of 100,000 values: float32, int32 into int64, a bfloat16 row, and rows of 10."""

SCANS = (
    # float32: DefaultPolicy's 128 threads of 15 (1,920 a tile), 53 tiles and 32 more states
    # of 8 B (uint2): 680 B, aliased with two empty temporaries (768 + 255), then again (1,024
    # + 255)
    "a400000 a1279 f1279 "
    # int32 summed in int64: the result, the input converted, then 128 threads of 7 (896 a
    # tile), 112 tiles and 32 states of 16 B (ulonglong2): 2,304 B, 2,559, 2,815
    "a800000 a800000 a2815 f2815 f800000 "
    # bfloat16 (c10::BFloat16, which CUB does not call primitive): 128 threads of 30 (3,840),
    # 27 tiles and 32: 4-byte statuses (236 B) and 2-byte partials and inclusives (118 B
    # each), each rounded to 256 (768 + 255), then 1,024 + 255
    "a200000 a1279 f1279 "
    # rows of 10 scan in ATen's own kernel: none
    "a400000"
)


def test_a_scan_of_one_row_takes_cubs_tile_states(tmp_path: Path) -> None:
    """``cumsum`` and ``cumprod`` of a tensor whose every element lies along the scanned
    dimension take ``DeviceScan``'s storage after their result (and converted input) and free
    it as they return; shorter rows take none."""
    script(tmp_path, SCANNED)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0]) == SCANS.split()


SELECTED = """
import json, sys
import torch
n = int(sys.argv[1])
m = torch.arange(n, device="cuda") % 3 == 0
t = (torch.arange(n, device="cuda") % 3 == 0).view(-1, 50).t()
torch.cuda.memory._record_memory_history(max_entries=100000)
a = m.nonzero()
b = torch.where(t)
trace = torch.cuda.memory._snapshot()["device_traces"][0]
kept = {"alloc": "a", "free_completed": "f"}
print(json.dumps([kept[e["action"]] + str(e["size"]) for e in trace if e["action"] in kept]))
"""
"""``nonzero`` of a mask of every third element, and ``where`` of it seen transposed."""

NONZEROS = {
    # 3,000 flags: the int count (4 B), DeviceReduce::Sum in one tile (1 B), the 1,000
    # indices, DeviceSelect::Flagged on 9.0 (384 threads of 11: one tile and 32 states of
    # 8 B, 264 B: 512 + 255, then 768 + 255); the transposed mask first copied (3,000 B)
    "3000-9.0": (
        "3000 9.0",
        "a4 a1 f1 a8000 a1023 f1023 f4 a3000 a4 a1 f1 a16000 a1023 f1023 f4 f3000",
    ),
    # 100,000 flags on 8.0: past one tile the sum's storage follows the driver's occupancy
    # and is not made; DeviceSelect::Flagged's 384 threads of 6 (2,304): 44 tiles and 32,
    # 608 B: 768 + 255, then 1,024 + 255
    "100000-8.0": (
        "100000 8.0",
        "a4 a266672 a1279 f1279 f4 a100000 a4 a533344 a1279 f1279 f4 f100000",
    ),
}


@pytest.mark.parametrize("case", list(NONZEROS))
def test_nonzero_takes_its_count_and_cubs_storage(tmp_path: Path, case: str) -> None:
    """``nonzero`` (and ``where`` of a mask) takes a copy of a non-contiguous input, its
    count and CUB's storage for counting before its output, CUB's selection's after, and frees
    them as it returns."""
    arguments, expected = NONZEROS[case]
    size, capability = arguments.split()
    script(tmp_path, SELECTED)
    done = plan(tmp_path, "--device-capability", capability, "train.py", size)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0]) == expected.split()
