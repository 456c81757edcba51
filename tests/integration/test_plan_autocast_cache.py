"""Autocast's cast cache under ``torch.inference_mode()``: the installed torch (since
pytorch/pytorch#165068) casts a weight afresh for each call there and frees the cast with the
call, where under ``torch.no_grad()`` the cast stays for the autocast region."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

HELD = """
import json
import torch

layer = torch.nn.Linear(1024, 1024, bias=False, device="cuda")
x = torch.randn(8, 1024, device="cuda")
layer(x)  # cuBLAS's workspace, before anything is measured
held = {}
for name, mode in (("no_grad", torch.no_grad), ("inference_mode", torch.inference_mode)):
    with mode(), torch.autocast("cuda", dtype=torch.bfloat16):
        before = torch.cuda.memory_allocated()
        y = layer(x)
        held[name] = torch.cuda.memory_allocated() - before
        del y
print(json.dumps(held))
"""


def test_a_weight_cast_under_inference_mode_is_freed_with_its_call(tmp_path: Path) -> None:
    """A bfloat16 ``Linear`` under autocast holds its output and, under ``no_grad`` only, the
    weight's 2 MiB cast: the same bytes the installed torch's own autocast cache keeps."""
    from memforensics.plan.choices import caches_in_inference_mode

    script(tmp_path, HELD)
    done = plan(tmp_path, "--device-capability", "8.0", "train.py")
    assert done.returncode == 0, done.stderr
    held = json.loads(done.stdout.splitlines()[0])
    output = 8 * 1024 * 2
    cast = 1024 * 1024 * 2
    assert held["no_grad"] == output + cast
    assert held["inference_mode"] == output + (cast if caches_in_inference_mode() else 0)
