"""A learned value of one element, expanded to a batch's length (a constant mean), runs under
``memforensics plan`` once its value is unknown: the plan's made-up value fills the one memory
location that every element of the expanded view is."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

CONSTANT_MEAN = """
import torch

n = 1000
y = torch.linspace(0, 1, n, device="cuda")
w = torch.nn.Parameter(torch.ones(n, n, device="cuda"))
constant = torch.nn.Parameter(torch.zeros((), device="cuda"))
optimizer = torch.optim.Adam([w, constant], lr=0.1)
for step in range(3):
    optimizer.zero_grad()
    mean = constant.unsqueeze(-1).expand(n)
    diff = y - mean
    loss = (w @ diff).pow(2).mean()
    loss.backward()
    optimizer.step()
    print("step", step, loss.item())
"""


def test_an_expanded_learned_constant_of_unknown_value_trains_every_step(tmp_path: Path) -> None:
    """Each of the three steps runs and prints its loss (the first, whose values the script
    decides, is the analytic 500 ** 2), where subtracting the expanded constant after the first
    optimizer step stopped the plan."""
    script(tmp_path, CONSTANT_MEAN)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    steps = [line.split() for line in done.stdout.splitlines() if line.startswith("step ")]
    assert [int(step[1]) for step in steps] == [0, 1, 2]
    assert float(steps[0][2]) == 500.0**2
