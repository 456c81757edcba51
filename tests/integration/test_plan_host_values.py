"""Values the host sends to the device are known past the 64 KiB a plan keeps of what the
device computes, so a loop that ends on them ends as on a GPU; a deferred tensor's move, which
reads nothing, stays unknown; and a loop whose end only made-up values decide is ended."""

from __future__ import annotations

import json

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

STEPPED = """
import json
import numpy as np
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
rng = np.random.default_rng(0)
steps = rng.uniform(0.5, 1.5, 100_000).astype(np.float32)  # 400,000 B, over 64 KiB
step_sizes = torch.from_numpy(steps).to(device)
t = torch.zeros((), device=device)
kept = []
taken = 0
while t < 50.0:  # its end decided by the values the host sent
    t = t + step_sizes[taken]
    kept.append(torch.empty(1000, device=device))  # 4,000 B a step, all kept
    taken += 1
peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0
print(json.dumps({"taken": taken, "t": float(t), "peak": peak}))
"""


def _on_cpu(body: str) -> dict[str, object]:
    """The same script's printed values on the CPU."""
    pytest.importorskip("torch")
    pytest.importorskip("numpy")
    scope: dict[str, object] = {}
    printed: list[str] = []
    scope["print"] = printed.append
    on_cpu = body.replace('"cuda" if torch.cuda.is_available() else "cpu"', '"cpu"')
    assert on_cpu != body
    exec(on_cpu, scope)  # the test's own script, on the CPU
    found: dict[str, object] = json.loads(printed[0])
    return found


def test_a_loop_stepping_by_host_values_ends_as_on_the_cpu(tmp_path) -> None:
    """A ``while t < t_end`` loop whose steps are read from 400,000 B of floats sent from the
    host takes the CPU's steps to the CPU's time, and peaks at the array and every step's
    buffer (each rounded to 512 B) with the two times live at once."""
    pytest.importorskip("numpy")
    expected = _on_cpu(STEPPED)
    script(tmp_path, STEPPED)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    assert found["taken"] == expected["taken"]
    assert found["t"] == expected["t"]
    taken = found["taken"]
    assert isinstance(taken, int)
    assert taken > 30
    assert found["peak"] == 400_384 + taken * 4_096 + 2 * 512


DEFERRED = """
import json
import torch

layer = torch.nn.Linear(1024, 512)  # a 2 MiB weight, deferred: made while a module is built
layer.weight.data.fill_(0.5)
layer.to("cuda")
print(json.dumps({"sum": layer.weight.sum().item()}))
"""


def test_a_deferred_weight_moved_to_the_device_is_not_read(tmp_path) -> None:
    """A deferred weight's move to the device reads none of its memory, so its values stay
    unknown (said as made up at the script's line), not the zeros of memory never written."""
    script(tmp_path, DEFERRED)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    assert found["sum"] != 0.0
    assert "are made up in a plan" in done.stderr
    assert "train.py:8)" in done.stderr


UNENDING = """
import torch

big = torch.empty(2000, 100, device="cuda")  # values no script decides, as a model's output
err = big.norm()
tested = 0
while err > 1.0:  # no bound but the values, each test made up again the same
    err = big.norm()
    tested += 1
print(tested)
"""


def test_a_loop_only_made_up_values_end_is_ended(tmp_path) -> None:
    """A loop with no bound of its own, whose test reads a flag decided by made-up values,
    is ended after 10,000 such reads at its line (named), where it would read the same made-up
    answer for ever; the figures are the run's up to there (``big`` live)."""
    script(tmp_path, UNENDING)
    done = plan(tmp_path, "--json", "--device-capability", "9.0", "train.py")
    assert done.returncode == 2, done.stderr
    found = json.loads(done.stdout)
    said = found["failed"]
    assert "train.py:7 read a flag decided by values the plan made up 10,000 times" in said
    assert found["peak_allocated_bytes"] >= 800_256


SENT = """
import json
import torch

observations = torch.full((100_000,), 0.5).to("cuda")  # 400,000 B: a data set's
weight = torch.full((600_000,), 0.5).to("cuda")  # 2,400,000 B: a streamed model's weight
print(json.dumps({"observations": float(observations.sum()), "weight": float(weight.sum())}))
"""


def test_host_floats_are_kept_up_to_a_data_set_s_size_not_a_weight_s(tmp_path) -> None:
    """Floats sent from the host are read as sent while their storage is a data set's size
    (1 MiB at most); a weight-sized one (2.4 MB) is not kept, so the host memory a plan holds
    does not grow with a model whose weights a loader streams to the device."""
    script(tmp_path, SENT)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    assert found["observations"] == 50_000.0
    assert found["weight"] != 300_000.0


RADIUS_GRAPH = """
import json
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
g = torch.Generator().manual_seed(1)
pos = (torch.randn(384, 3, generator=g) * 1.5).to(device)  # a batch's points from the host
r = torch.cdist(pos, pos)  # 589,824 B of distances, over 64 KiB
edges = ((r < 2.0) & (r > 0)).nonzero().T  # e3nn's radius graph
layer = torch.nn.Linear(3, 400).to(device)  # a model's weights: its output is no data's
hidden = layer(pos)  # 614,400 B
print(json.dumps({"edges": edges.shape[1], "active": torch.where(hidden > 0)[0].numel()}))
"""


def test_values_computed_from_host_data_alone_are_kept_past_64_kib(tmp_path) -> None:
    """The distances between 384 points sent from the host (589,824 B) are known, so a
    radius graph of them has the CPU's edges, where every pair was one; a layer's output of
    the same points (614,400 B, its weights a model's) stays unknown, and a test of it
    selects every entry, an upper bound."""
    expected = _on_cpu(RADIUS_GRAPH)
    assert expected["edges"] < 384 * 383
    script(tmp_path, RADIUS_GRAPH)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    assert found["edges"] == expected["edges"]
    assert found["active"] == 384 * 400
