"""Dropout on the planned device is CUDA's fused kernel: a one-byte mask kept for backward,
not the CPU build's noise tensor of the input's dtype. Runs through the real
``memforensics plan`` console command."""

from __future__ import annotations

import json
import pickle
import subprocess
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

ROWS, COLS = 1024, 1024
DROPOUT = f"""
import json, sys
import torch
torch.cuda.memory._record_memory_history(max_entries=100000)
dtype = getattr(torch, sys.argv[1])
x = torch.zeros({ROWS}, {COLS}, device="cuda", dtype=dtype, requires_grad=True)
drop = torch.nn.Dropout(0.2, inplace=sys.argv[2] == "inplace")
y = drop(x * 1) if sys.argv[2] == "inplace" else drop(x)
z = torch.dropout(x, 0.3, True)
base = torch.cuda.memory_allocated()
(y.sum() + z.sum()).backward()
torch.cuda.memory._dump_snapshot("drop.pickle")
print(json.dumps({{"live": base}}))
"""


def _live(done: subprocess.CompletedProcess[str]) -> int:
    """Bytes the script found allocated after its forward (its output goes to stderr)."""
    [line] = [line for line in done.stderr.splitlines() if line.startswith("{")]
    return int(json.loads(line)["live"])


def _allocations(folder: Path) -> list[int]:
    """The sizes of the planned trace's allocations, in order."""
    snapshot = pickle.loads((folder / "drop.pickle").read_bytes())
    return [e["size"] for e in snapshot["device_traces"][0] if e["action"] == "alloc"]


@pytest.mark.parametrize(("dtype", "width"), [("float32", 4), ("bfloat16", 2)])
def test_dropout_keeps_a_one_byte_mask_as_cuda_does(tmp_path: Path, dtype: str, width: int) -> None:
    """nn.Dropout and torch.dropout in training allocate a bool mask and the output (as CUDA's
    dropout_cuda does), so after the forward the input, two outputs and two masks are live."""
    script(tmp_path, DROPOUT)
    done = plan(tmp_path, "--json", "--device-capability", "8.0", "train.py", dtype, "fused")
    assert done.returncode == 0, done.stderr
    elements = ROWS * COLS
    assert _live(done) == 3 * elements * width + 2 * elements
    allocations = _allocations(tmp_path)
    assert allocations[1:5] == [elements, elements * width, elements, elements * width]


def test_inplace_dropout_stays_the_composite(tmp_path: Path) -> None:
    """Dropout with inplace=True is the composite on CUDA too (at::dropout_ never fuses): its
    noise has the input's dtype."""
    script(tmp_path, DROPOUT)
    done = plan(tmp_path, "--json", "--device-capability", "8.0", "train.py", "float32", "inplace")
    assert done.returncode == 0, done.stderr
    elements = ROWS * COLS
    # x, x * 1 (dropped in place), its float32 noise; torch.dropout's output and bool mask
    assert _live(done) == 3 * elements * 4 + elements * 4 + elements
