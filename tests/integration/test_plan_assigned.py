"""A number assigned into a device tensor under ``memforensics plan`` takes no device block, as
on CUDA, where ``THPVariable_setitem`` keeps it on the host; the values the script reads back
are the ones it assigned."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

ASSIGNED = """
import json
import torch

x = torch.zeros(1000, device="cuda")
torch.cuda.memory._record_memory_history(max_entries=1000)
x[5:10] = 1.0
x[3] = 2
mask = x > 0
x[mask] = 3
torch.cuda.memory._dump_snapshot("assigned.pickle")
print(json.dumps({"sum": float(x.sum()), "selected": int(mask.sum())}))
"""


def test_assigning_numbers_takes_no_block_but_the_mask(tmp_path: Path) -> None:
    """Numbers assigned into a slice, an element and a mask make no device tensor of their own:
    the only block is the mask's, and the script reads back what it assigned."""
    script(tmp_path, ASSIGNED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert json.loads(line) == {"sum": 18.0, "selected": 6}
    snapshot = pickle.loads((tmp_path / "assigned.pickle").read_bytes())
    made = [e["size"] for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
    assert made == [1000]  # the bool mask; no 4-B number on the device


BY_DEVICE_VALUE = """
import torch

x = torch.zeros(1000, device="cuda")
mask = torch.arange(1000, device="cuda") % 4 == 0
value = torch.tensor(5.0, device="cuda")
torch.cuda.memory._record_memory_history(max_entries=1000)
x[mask] = value
torch.cuda.memory._dump_snapshot("assigned.pickle")
"""


def test_a_device_scalar_assigned_by_a_mask_runs_its_nonzero(tmp_path: Path) -> None:
    """A zero-dimensional tensor on the device, unlike a number, is no ``masked_fill_`` on CUDA
    (``canDispatchToMaskedFill`` wants a host value): the mask's 250 positions (2,000 B of
    ``int64``) are made."""
    script(tmp_path, BY_DEVICE_VALUE)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    snapshot = pickle.loads((tmp_path / "assigned.pickle").read_bytes())
    made = [e["size"] for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
    assert 250 * 8 in made
