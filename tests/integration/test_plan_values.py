"""Values a planned script reads back from the device, through the real ``memforensics plan``:
those the script's own values decide read as on the GPU, loops that stop on the others run to
their own bounds, and ``torch.profiler`` around the forwards works and sees the planned memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

SHAPES = """
import numpy as np, torch
data = np.arange(4 * 16).reshape(4, 16)
x = torch.randn(4, 16, device="cuda")
n = torch.tensor(x.shape[1], device="cuda")
batch = data[:, : int(n // 2)]
drawn = torch.randint(3, 7, (64,), device="cuda").tolist()
mask = torch.ones(4, 16, device="cuda")
lengths = mask.sum(-1).long().cpu().numpy()
last = torch.arange(10, device="cuda")[-1].item()
print("shapes", batch.shape, min(drawn), max(drawn), lengths.tolist(), last)
"""


def test_a_device_scalar_the_script_made_reads_as_on_the_gpu(tmp_path: Path) -> None:
    """A size put on the device slices a numpy batch to its real width, randint draws stay
    within their bounds, sums of ones and arange read their values, and the plan says once,
    naming the first line that read one, that it computed them."""
    script(tmp_path, SHAPES)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    shapes = next(line for line in done.stdout.splitlines() if line.startswith("shapes"))
    assert shapes.startswith("shapes (4, 8) ")
    _, _, _, low, high, *rest = shapes.split()
    assert 3 <= int(low) <= int(high) < 7
    assert " ".join(rest) == "[16, 16, 16, 16] 9"
    said = [line for line in done.stderr.splitlines() if line.startswith("memforensics plan:")]
    assert len(said) == 1
    assert "computed on the CPU" in said[0]
    assert f"(first at {tmp_path / 'train.py'}:6)" in said[0]


DECODE = """
import torch
vocab, eos, limit = 5000, 0, 7  # a head too large to copy: its values are unknown
head = torch.nn.Linear(16, vocab).cuda()
tokens = torch.randn(3, 16, device="cuda")
unfinished = torch.ones(3, dtype=torch.long, device="cuda")
steps = 0
while True:
    steps += 1
    chosen = head(tokens).argmax(-1)  # the model's choice: no value the script decides
    done = torch.full((3,), steps >= limit, device="cuda") | (chosen == eos)
    unfinished = unfinished & ~done
    if unfinished.max() == 0:
        break
    if steps > 100:
        raise SystemExit("the decoding loop did not stop")
print("steps", steps)
"""


def test_a_decoding_loop_runs_to_its_maximum_length(tmp_path: Path) -> None:
    """generate()'s shape: a loop that stops when every sequence met the maximum length (a
    flag the script sets) or chose end-of-sequence (the model's value) runs exactly to the
    maximum length, and the plan says once that unknown values read as zeros."""
    script(tmp_path, DECODE)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "steps 7" in done.stdout
    said = [line for line in done.stderr.splitlines() if line.startswith("memforensics plan:")]
    assert sum("are zeros in a plan" in line for line in said) == 1
    assert any("runs to its own bound" in line for line in said)


PROFILED = """
import torch
from torch.profiler import ProfilerActivity, profile
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)]).cuda()
x = torch.randn(32, 256, device="cuda")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True,
             record_shapes=True, with_stack=True) as prof:
    for _ in range(2):
        model(x).sum().backward()
print("ops", len(prof.key_averages()))
prof.export_memory_timeline("timeline.json", device="cuda:0")
torch.cuda.memory._dump_snapshot("snapshot.pickle")
"""


def test_a_profiled_run_records_the_cpu_and_exports_the_planned_memory_timeline(
    tmp_path: Path,
) -> None:
    """Under torch.profiler with CUDA activity and profile_memory, no operator tries to record
    a CUDA event (the CPU build has none: each failure built a stack trace and made the run
    hundreds of times slower), the profiler lists the operators, the memory timeline of
    cuda:0 peaks at the plan's peak allocated, and the script goes on to dump its snapshot."""
    script(tmp_path, PROFILED)
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    assert "Failed to record CUDA event" not in done.stderr
    assert int(done.stderr.split("ops ")[1].split()[0]) > 0
    facts = json.loads(done.stdout)
    times, sizes = json.loads((tmp_path / "timeline.json").read_text())
    assert len(times) == len(sizes) > 1
    assert max(sum(row) for row in sizes) == facts["peak_allocated_bytes"]
    assert (tmp_path / "snapshot.pickle").is_file()
