"""``masked_fill`` of a device tensor by a zero-dimensional host tensor runs under ``plan``.

CUDA's ``masked_fill__cuda`` fills with ``value.item()`` when the value tensor lies on the host
(``out.masked_fill(mask, torch.tensor(float("nan")))``, as pytorch-forecasting's ``predict``
masks its predictions); the ``meta`` kernel refuses a host value beside ``meta``. The script
fills out of place and in place through the real console command and reads the planned
allocator's figures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

ROWS, COLS = 256, 1000
BYTES = ROWS * COLS * 4
"""1,024,000 B: a multiple of 512, so the block is exactly the tensor."""

FILL = f"""
import json
import torch

x = torch.randn({ROWS}, {COLS}, device="cuda")
mask = torch.zeros({ROWS}, {COLS}, dtype=torch.bool, device="cuda")
start = torch.cuda.memory_allocated()
y = x.masked_fill(mask, torch.tensor(float("nan")))
held = torch.cuda.memory_allocated() - start
x.masked_fill_(mask, torch.tensor(0.0))
again = torch.cuda.memory_allocated() - start
print(json.dumps({{"held": held, "again": again, "shape": list(y.shape), "device": y.device.type}}))
"""


def test_fill_by_host_value_makes_one_result(tmp_path: Path) -> None:
    """A fill by a host 0-dim tensor runs, its out-of-place form holds one result-sized block
    and its in-place form none, as on CUDA."""
    script(tmp_path, FILL)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    assert facts == {"held": BYTES, "again": BYTES, "shape": [ROWS, COLS], "device": "cuda"}
