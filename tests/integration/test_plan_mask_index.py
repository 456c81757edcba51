"""The ``nonzero`` that CUDA runs inside indexing by a boolean mask under the real
``memforensics plan``: ``x[mask]``, ``x[mask] = v`` and ``masked_select`` replace the mask by its
``nonzero`` (``expandTensors`` in ``IndexingUtils.h``; ``masked_select_out_cuda_impl`` indexes
by the mask broadcast to the data's shape), which takes its count and CUB's storage, makes its
``(count, ndim)`` int64 positions, held while the indexing kernel runs and freed as it returns
(docs/plan.md, "``nonzero``'s count and CUB storage")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

INDEXED = """
import json
import torch
x = torch.randn(1000, 4, device="cuda")
rows = torch.arange(1000, device="cuda") % 4 == 0
cells = (torch.arange(4000, device="cuda") % 5 == 0).view(1000, 4)
v = torch.zeros(250, 4, device="cuda")
torch.cuda.memory._record_memory_history(max_entries=100000)
kept = {"alloc": "a", "free_completed": "f"}
found, seen = {}, 0
def step(name):
    global seen
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    found[name] = [kept[e["action"]] + str(e["size"]) for e in trace[seen:] if e["action"] in kept]
    seen = len(trace)
y = x[rows]; step("rows")
z = x[cells]; step("cells")
x[rows] = v; step("put")
x[rows] = 0; step("fill")
s = x.masked_select(cells); step("select")
b = x.masked_select(rows.view(1000, 1)); step("broadcast")
print(json.dumps(found))
"""
"""A mask of every fourth row (250 of 1,000) and of every fifth cell (800 of 4,000), whose
counts the plan knows from ``arange``."""

# Each mask's nonzero on 9.0: its int count (4 B), DeviceReduce::Sum in one tile (1 B), the
# positions, DeviceSelect::Flagged (one tile: 264 B, 1,023), the count freed; then the
# indexing's output, and the positions freed.
NONZERO = "a4 a1 f1 a{positions} a1023 f1023 f4"
EXPECTED = {
    # 250 rows: (250, 1) positions of 8 B, then 250 rows of 4 float32
    "rows": NONZERO.format(positions=2000) + " a4000 f2000",
    # 800 cells: (800, 2) positions, then 800 float32
    "cells": NONZERO.format(positions=12800) + " a3200 f12800",
    # index_put_ of a tensor: the positions held while it writes; no output
    "put": NONZERO.format(positions=2000) + " f2000",
    # masked_select: as indexing by the mask
    "select": NONZERO.format(positions=12800) + " a3200 f12800",
    # a (1000, 1) mask broadcast to (1000, 4): its contiguous copy first (4,000 B), freed
    # after the count, 1,000 (1000, 2) positions, 1,000 float32
    "broadcast": "a4000 a4 a1 f1 a16000 a1023 f1023 f4 f4000 a4000 f16000",
}


def test_indexing_by_a_mask_holds_its_nonzero_while_it_runs(tmp_path: Path) -> None:
    """Indexing by a boolean mask on CUDA makes the mask's ``nonzero`` (its scratch and its
    ``(count, ndim)`` positions) before its output and frees the positions after it; a number
    assigned by a mask is ``masked_fill_`` and runs none."""
    script(tmp_path, INDEXED)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    assert {k: " ".join(v) for k, v in found.items() if k != "fill"} == EXPECTED
    assert "a2000" not in found["fill"]  # no nonzero: canDispatchToMaskedFill
