"""A float16 ``softmax`` into float32 reads its input as it lies, as CUDA's ``half_to_float``
kernel does, whether the script or autocast asks for float32: no float32 copy of the input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

SOFTMAX = """
import json
import sys

import torch
import torch.nn.functional as F

x = torch.randn(64, 1000, device="cuda", dtype=torch.float16, requires_grad=True)
torch.cuda.memory._record_memory_history()
if sys.argv[1] == "autocast":
    with torch.autocast("cuda", dtype=torch.float16):
        y = F.softmax(x, -1)
else:
    y = F.softmax(x, dim=-1, dtype=torch.float32)
z = x.log_softmax(-1, torch.float32)
trace = torch.cuda.memory._snapshot()["device_traces"][0]
sizes = [e["size"] for e in trace if e["action"] == "alloc"]
print(json.dumps([str(y.dtype), str(z.dtype), *sizes]))
"""


@pytest.mark.parametrize("asked", ["own", "autocast"])
def test_a_float16_softmax_into_float32_copies_nothing(tmp_path: Path, asked: str) -> None:
    """``softmax`` and ``log_softmax`` of a 64 by 1000 float16 input each allocate their float32
    result alone (256,000 B), not a float32 copy of the input first."""
    script(tmp_path, SOFTMAX)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py", asked)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    assert found == ["torch.float32", "torch.float32", 64 * 1000 * 4, 64 * 1000 * 4]
