"""Host memory of a plan does not grow with the model: a model built on the CPU and moved to
the device, and a checkpoint loaded onto it, hold no host memory for their weights. Each runs
through the real ``memforensics plan`` console command; the script reports its own process's
peak resident memory (the plan runs it in that process)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

MiB = 1 << 20

BUILT_AND_MOVED = """
import json, math, resource, sys
import torch
import torch.nn as nn

width, layers = int(sys.argv[1]), int(sys.argv[2])

class Linear(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        std = math.sqrt(2 / (d_in + d_out))
        w = nn.init.trunc_normal_(torch.empty(d_out, d_in), std=std, a=-3 * std, b=3 * std)
        self.weight = nn.Parameter(w)

    def forward(self, x):
        return x @ self.weight.t()

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up, self.down = Linear(width, 4 * width), Linear(4 * width, width)
        self.attn = nn.Linear(width, width)

    def forward(self, x):
        x = x + self.attn(self.norm(x))
        return x + self.down(torch.relu(self.up(x)))

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(32000, width)
        self.blocks = nn.Sequential(*(Block() for _ in range(layers)))
        self.head = nn.Linear(width, 32000, bias=False)

    def forward(self, tokens):
        return self.head(self.blocks(self.embedding(tokens)))

model = Model().to("cuda")
optimizer = torch.optim.AdamW(model.parameters())
tokens = torch.randint(0, 32000, (2, 128)).to("cuda")
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(tokens).float().logsumexp(-1).mean()
loss.backward()
optimizer.step()
weights = sum(p.numel() * p.element_size() for p in model.parameters())
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"weights": weights, "rss": peak, "allocated": torch.cuda.max_memory_allocated()}))
"""


def _facts(done: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """The JSON line the script printed (its output goes to stderr under --json)."""
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("{")]
    return dict(json.loads(line))


def test_host_memory_stays_flat_as_the_model_grows_eightfold(tmp_path: Path) -> None:
    """A 52M- and a 405M-parameter model, each built on the CPU with truncated-normal weights,
    moved to the device and trained a step, plan with peak host memory within 128 MiB of each
    other, though their float32 weights differ by 1.4 GB, and without a warning."""
    script(tmp_path, BUILT_AND_MOVED)
    small = plan(tmp_path, "--json", "train.py", "512", "8")
    large = plan(tmp_path, "--json", "train.py", "1664", "12")
    small_facts, large_facts = _facts(small), _facts(large)
    assert small_facts["weights"] < 220 * MiB
    assert large_facts["weights"] - small_facts["weights"] > 1300 * MiB  # 1.4 GB
    assert large_facts["allocated"] > 4 * small_facts["allocated"]  # the large one really ran
    assert large_facts["rss"] - small_facts["rss"] < 128 * MiB
    assert json.loads(large.stdout)["warnings"] == []


LOADED = """
import json, re, sys
import torch

def peak():
    return int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024

with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak starts again from what is resident now
before = peak()
if sys.argv[1] == "map_location":
    state = torch.load("weights.pt", map_location="cuda")
elif sys.argv[1] == "mmap":
    state = {k: v.to("cuda") for k, v in torch.load("weights.pt", mmap=True).items()}
else:
    state = torch.load("weights.pt")
grew = peak() - before
on_device = torch.cuda.memory_allocated()
print(json.dumps({"grew": grew, "on_device": on_device, "shape": list(state["w"].shape)}))
"""


def test_a_checkpoint_loaded_onto_the_device_is_not_read_into_host_memory(
    tmp_path: Path,
) -> None:
    """A 128 MiB checkpoint loaded with ``map_location="cuda"``, or with ``mmap=True`` and moved,
    lands on the planned device whole and grows peak host memory by under 16 MiB; loaded onto
    the CPU, it grows it by the checkpoint's size."""
    import torch

    torch.save({"w": torch.ones(32 * MiB // 4, 4)}, tmp_path / "weights.pt")
    script(tmp_path, LOADED)
    for how in ("map_location", "mmap"):
        facts = _facts(plan(tmp_path, "--json", "train.py", how))
        assert facts["shape"] == [32 * MiB // 4, 4]
        assert facts["on_device"] == 128 * MiB, how
        assert facts["grew"] < 16 * MiB, how
    on_host = _facts(plan(tmp_path, "--json", "train.py", "cpu"))
    assert on_host["on_device"] == 0
    assert on_host["grew"] > 120 * MiB
