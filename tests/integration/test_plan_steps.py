"""``plan --steps N``: a training loop planned for its first N optimizer steps, however long the
script's own schedule, through the real console command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

MiB = 1 << 20

LEAKS = """
import argparse
import itertools
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--mib", type=int, default=64)
parser.add_argument("--iters", type=int, default=None)  # None: train for ever
args = parser.parse_args()
model = torch.nn.Linear(256, 256).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
history = []
for it in itertools.count() if args.iters is None else range(args.iters):
    model(torch.randn(64, 256, device="cuda")).sum().backward()
    opt.step()
    opt.zero_grad()
    history.append(torch.empty(args.mib << 20, dtype=torch.uint8, device="cuda"))
"""


def test_steps_ends_an_endless_loop_with_the_figures_of_its_first_steps(tmp_path: Path) -> None:
    """A loop without end planned with ``--steps`` exits 0 at the optimizer's step N + 1,
    names that line, and its peak holds exactly the N steps' kept tensors (two steps more keep
    two more)."""
    path = script(tmp_path, LEAKS)
    three = plan(tmp_path, "--json", "--steps", "3", "train.py")
    assert three.returncode == 0, three.stderr
    doc = json.loads(three.stdout)
    assert (doc["steps"], doc["ended_at_step"]) == (3, f"{path}:14")
    five = json.loads(plan(tmp_path, "--json", "--steps", "5", "train.py").stdout)
    assert five["peak_allocated_bytes"] - doc["peak_allocated_bytes"] == 2 * 64 * MiB
    text = plan(tmp_path, "--steps", "3", "train.py").stdout
    words = " ".join(text.split())
    assert f"Ended at {path}:14, where an optimizer came to its step 4 (--steps 3)" in words


TWO_OPTIMIZERS = """
import torch
critic = torch.nn.Linear(128, 1).cuda()
generator = torch.nn.Linear(16, 128).cuda()
opt_c = torch.optim.Adam(critic.parameters())
opt_g = torch.optim.Adam(generator.parameters())
for it in range(1000):
    for _ in range(2):  # the critic steps twice for each step of the generator
        critic(generator(torch.randn(32, 16, device="cuda")).detach()).mean().backward()
        opt_c.step()
        opt_c.zero_grad()
    critic(generator(torch.randn(32, 16, device="cuda"))).mean().backward()
    opt_g.step()
    opt_g.zero_grad()
    print("iteration", it, "done", flush=True)
"""


def test_steps_counts_each_optimizer_and_ends_at_the_first_past_the_limit(
    tmp_path: Path,
) -> None:
    """With two optimizers, the one that steps twice as often ends the run at its own step
    N + 1: every step of both before it is planned, and nothing after it."""
    path = script(tmp_path, TWO_OPTIMIZERS)
    done = plan(tmp_path, "--json", "--steps", "4", "train.py")
    assert done.returncode == 0, done.stderr
    printed = [line for line in done.stderr.splitlines() if line.startswith("iteration")]
    assert printed == ["iteration 0 done", "iteration 1 done"]
    assert json.loads(done.stdout)["ended_at_step"] == f"{path}:10"


def test_steps_on_a_script_without_an_optimizer_runs_it_to_its_end_and_says_so(
    tmp_path: Path,
) -> None:
    """A script that never steps a ``torch.optim`` optimizer runs to its end under ``--steps``,
    and the plan says once that the limit counted nothing."""
    script(tmp_path, "import torch\nx = torch.empty(1 << 20, device='cuda')\nprint('ran')\n")
    done = plan(tmp_path, "--json", "--steps", "2", "train.py")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["ended_at_step"] is None
    assert doc["peak_allocated_bytes"] == 4 * MiB
    assert any("took none: the limit ended nothing" in line for line in doc["warnings"])


def test_vary_plans_each_value_under_the_same_steps(tmp_path: Path) -> None:
    """``--vary`` hands ``--steps`` to every value's own plan: each row's peak is what that
    value's plan alone gives under the same limit."""
    script(tmp_path, LEAKS)
    steps = ("--steps", "2")
    varied = plan(tmp_path, "--json", *steps, "--vary", "mib=16,32", "train.py", "--iters", "20")
    peaks = {row["value"]: row["peak_allocated_bytes"] for row in json.loads(varied.stdout)["rows"]}
    for mib in ("16", "32"):
        alone = plan(tmp_path, "--json", *steps, "train.py", "--iters", "20", "--mib", mib)
        assert peaks[mib] == json.loads(alone.stdout)["peak_allocated_bytes"]


LIBRARY_LOOP = """
import torch
import trainlib  # an installed library's training loop, which steps the optimizer itself
model = torch.nn.Linear(64, 64).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
trainlib.fit(model, opt)
"""

TRAINLIB = """
import torch
def fit(model, opt):
    while True:
        model(torch.randn(8, 64, device="cuda")).sum().backward()
        opt.step()
        opt.zero_grad()
"""


def test_steps_ends_at_the_scripts_own_line_where_a_library_steps(tmp_path: Path) -> None:
    """Where an installed library's loop steps the optimizer, ``Ended at`` names the script's
    line that called the library (what its author can change), not the library's."""
    installed = tmp_path / "site-packages"
    installed.mkdir()
    (installed / "trainlib.py").write_text(TRAINLIB)
    path = script(tmp_path, f"import sys\nsys.path.insert(0, {str(installed)!r})\n" + LIBRARY_LOOP)
    done = plan(tmp_path, "--json", "--steps", "2", "train.py")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ended_at_step"] == f"{path}:8"
