"""An accumulating ``index_put_`` by a mask under the real ``memforensics plan``: ``x[mask]``'s
backward and ``index_put_((mask,), v, accumulate=True)`` run ``index_put_with_sort_kernel``,
whose ``makeLinearIndex`` replaces the mask by its ``nonzero`` (``expandTensors``) after the
output, then sorts the positions' linear index with CUB; a deprecated ``uint8`` mask indexes
as a boolean one (docs/plan.md, "The ``nonzero`` inside indexing by a boolean mask"). Derived
from torch 2.13's ``Indexing.cu`` and ``IndexingUtils.h``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

PUT = """
import json, warnings
import torch
warnings.simplefilter("ignore")  # uint8 indexing is deprecated
x = torch.randn(1000, 4, device="cuda", requires_grad=True)
rows = torch.arange(1000, device="cuda") % 4 == 0
cells = (torch.arange(4000, device="cuda") % 5 == 0).view(1000, 4)
t = torch.zeros(1000, 4, device="cuda")
v = torch.ones(800, device="cuda")
masks = {"bool": rows, "uint8": rows.to(torch.uint8)}
w, host = torch.ones(250, 4, device="cuda"), rows.cpu()
torch.cuda.memory._record_memory_history(max_entries=100000)
kept = {"alloc": "a", "free_completed": "f"}
found, seen = {}, 0
def step(name):
    global seen
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    found[name] = " ".join(
        kept[e["action"]] + str(e["size"]) for e in trace[seen:] if e["action"] in kept
    )
    seen = len(trace)
for name, mask in masks.items():
    y = x[mask]
    g = torch.ones_like(y)
    step(name + "-forward")
    y.backward(g)
    step(name + "-backward")
    del y, g
    x.grad = None
    step("freed")
t.index_put_((cells,), v, accumulate=True); step("cells")
t.index_put_((host,), w, accumulate=True); step("host")
torch.use_deterministic_algorithms(True)
t[rows] = w; step("deterministic")
unknown = torch.empty(1000, 4, device="cuda", dtype=torch.uint8)  # values the plan lacks
found["unknown"] = list(x[unknown].shape)
print(json.dumps(found))
"""
"""A mask of every fourth row (250 of 1,000), as ``bool`` and ``uint8``, and of every fifth
cell (800 of 4,000), whose counts the plan knows from ``arange``."""

# The mask's nonzero on 9.0: its int count (4 B), DeviceReduce::Sum in one tile (1 B), the
# positions, DeviceSelect::Flagged (one tile: 264 B, 1,023), the count freed.
NONZERO = "a4 a1 f1 a{positions} a1023 f1023 f4"
# 250 (250, 1) positions: the 250 rows (4,000 B) and a gradient like them after
FORWARD = NONZERO.format(positions=2000) + " a4000 f2000 a4000"
# the positions, the index wrapped and times the row's stride (the first freed), the
# positions freed as ``makeLinearIndex`` returns; the sorted indices, their original positions
# and an ``arange``; 250 keys in one radix tile (1 B); all freed
SORT = "a2000 a2000 a2000 a1 f1 f2000 f2000 f2000 f2000"
ROWS = " a2000 a2000 f2000 f2000 " + SORT
# a forward put checks each index's range before wrapping it (``wrapIndexOnce``):
# ``aminmax``'s two 8-B bounds (a strided column of the positions reduced as a contiguous
# copy, freed as it returns; no staging for so few), a 1-B ``bool`` per ``_assert_async``,
# the bounds freed; the backward's put (``unsafe``) checks none
CHECK = "a8 a8 {copy}a1 f1 a1 f1 f8 f8"
BACKWARD = "a16000 " + NONZERO.format(positions=2000) + ROWS  # after the gradient's zeros
EXPECTED = {
    "bool-forward": FORWARD,
    "bool-backward": BACKWARD,
    "uint8-forward": FORWARD,
    "uint8-backward": BACKWARD,
    # 800 (800, 2) positions; each dimension's index wrapped and times its stride, the
    # second's product added into the first's and freed; 800 keys in one tile
    "cells": NONZERO.format(positions=12800)
    + " "
    + CHECK.format(copy="a6400 f6400 ")
    + " a6400 a6400 f6400 "
    + CHECK.format(copy="a6400 f6400 ")
    + " a6400 a6400 f6400 f6400 f12800 a6400 a6400 a6400 a1 f1 f6400 f6400 f6400 f6400",
    # a mask on the host: its nonzero, the index wrapped and its product there, the product
    # copied over (the linear index), then the sort
    "host": "a2000 " + SORT,
    # a tensor assigned by a mask under deterministic algorithms sorts as an accumulating put
    "deterministic": NONZERO.format(positions=2000) + " " + CHECK.format(copy="") + ROWS,
}


def test_an_accumulating_put_by_a_mask_runs_its_nonzero_before_the_sort(tmp_path: Path) -> None:
    """``x[mask]``'s backward and an accumulating ``index_put_`` by a mask make the mask's
    ``nonzero`` after the output, then the sort's linear index, vectors and CUB storage (a
    mask on the host its linear index alone); a ``uint8`` mask indexes and is sorted as a
    boolean one."""
    script(tmp_path, PUT)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    assert {k: v for k, v in found.items() if k in EXPECTED} == EXPECTED
    assert found["unknown"] == [4000]  # a uint8 mask of unknown values: every element
