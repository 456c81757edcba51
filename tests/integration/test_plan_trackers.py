"""``memforensics plan --nproc-per-node`` against torch's own memory trackers: the same script's
DDP, FSDP2 and tensor-parallel steps, planned and tracked, agree within the trackers' ±10 %, and
each rank's parameters are exactly its shards (FSDP1's padded flat parameter too)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from planned import SRC, plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

MAIN = """

def shard(p):
    return list(getattr(p, "_local_tensor", p).shape)


if __name__ == "__main__":
    dist.init_process_group("nccl")
    model = build("cuda", mesh("cuda"))
    sharded = torch.cuda.memory_allocated()
    opt, x = inputs(model, "cuda")
    step(model, opt, x)
    torch.cuda.reset_peak_memory_stats()
    step(model, opt, x)
    shards = {n: shard(p) for n, p in model.named_parameters()}
    peak = torch.cuda.max_memory_allocated()
    json.dump({"peak": peak, "sharded": sharded, "shards": shards}, open(sys.argv[1], "w"))
"""

STEP = """

def inputs(model, device):
    return torch.optim.AdamW(model.parameters()), torch.randn(64, WIDTH, device=device)


def step(model, opt, x):
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
"""

DDP = """
import json, sys, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

WIDTH = 512


def mesh(device):
    return None


def build(device, mesh):
    with torch.device(device):
        model = torch.nn.Sequential(
            torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512)
        )
    return DDP(model, device_ids=[0] if device == "cuda" else None)
"""

FSDP2 = """
import json, sys, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

WIDTH = 1000


def mesh(device):
    return init_device_mesh(device, (dist.get_world_size(),))


def build(device, mesh):
    with torch.device(device):
        model = torch.nn.Sequential(
            torch.nn.Linear(1000, 1001), torch.nn.ReLU(), torch.nn.Linear(1001, 1000)
        )
    for layer in model:
        fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)
"""

TP = """
import json, sys, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

WIDTH = 1024


def mesh(device):
    return init_device_mesh(device, (dist.get_world_size(),))


def build(device, mesh):
    with torch.device(device):
        model = torch.nn.Sequential(
            torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
        )
    return parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
"""

FSDP1 = """
import json, sys, torch, torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

WIDTH = 1000


def mesh(device):
    return None


def build(device, mesh):
    with torch.device(device):
        model = torch.nn.Sequential(
            torch.nn.Linear(1000, 1001), torch.nn.ReLU(), torch.nn.Linear(1001, 1000)
        )
    return FSDP(model, use_orig_params=True)
"""

FSDP1_MOVED = """
import json, sys, torch, torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

WIDTH = 1000


def mesh(device):
    return None


def build(device, mesh):
    model = torch.nn.Sequential(
        torch.nn.Linear(1000, 1001), torch.nn.ReLU(), torch.nn.Linear(1001, 1000)
    )
    if device == "cuda" and sys.argv[2] == "built":
        model = model.cuda()
    device_id = torch.cuda.current_device() if device == "cuda" else None
    return FSDP(model, use_orig_params=True, device_id=device_id)
"""
"""FSDP1 given ``device_id``: the model built on the host (FSDP moves it to that device) or
on the device already (``built``)."""

TRACK = '''
"""A script's build and steps under torch's own tracker on torch's fake process group:
FSDPMemTracker for an FSDP2 model, MemTracker otherwise, in FakeTensorMode (DDP's C++ reducer
takes no fake tensors: it runs on real CPU ones). The tracker's peak goes to JSON."""

import contextlib, importlib.util, json, sys
import torch, torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
from torch.distributed._tools.mem_tracker import MemTracker
from torch.distributed.fsdp import FSDPModule
from torch.testing._internal.distributed.fake_pg import FakeStore


def reduced(state, bucket):
    """DDP's bucket all-reduced in place: the fake group's own future carries no tensor."""
    buffer = bucket.buffer()
    dist.all_reduce(buffer)
    buffer.div_(dist.get_world_size())
    done = torch.futures.Future()
    done.set_result(buffer)
    return done


path, world, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
spec = importlib.util.spec_from_file_location("tracked", path)
tracked = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tracked)
dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
mesh = tracked.mesh("cpu")
ddp = "DistributedDataParallel" in open(path).read()
with contextlib.nullcontext() if ddp else FakeTensorMode():
    tracker = MemTracker()
    # DDP's buckets are made in its build, out of Python's sight: tracked from the build on
    with tracker if ddp else contextlib.nullcontext():
        model = tracked.build("cpu", mesh)
        if ddp:
            model.register_comm_hook(None, reduced)
        opt, x = tracked.inputs(model, "cpu")
        tracked.step(model, opt, x)
        tracker.reset_mod_stats()
    if isinstance(model, FSDPModule):
        tracker = FSDPMemTracker(model, opt)
        tracker.track_inputs((x,))
    elif not ddp:
        tracker.track_external(model, opt, x)
    with tracker:
        tracked.step(model, opt, x)
    peak = tracker.get_tracker_snapshot("peak")
json.dump({"peak": max(v["Total"] for v in peak.values())}, open(out, "w"))
'''


def _planned(
    folder: Path, body: str, world: int, monkeypatch: pytest.MonkeyPatch, *args: str
) -> dict[str, object]:
    """What the script (given ``args`` after its output's name) saw of the planned rank 0 of
    ``world``, with no cuBLAS workspace (the trackers do not see cuBLAS's; the plan counts it
    as a GPU's allocator does)."""
    script(folder, body + STEP + MAIN)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0")
    done = plan(folder, "--nproc-per-node", str(world), "train.py", "planned.json", *args)
    assert done.returncode == 0, done.stderr
    seen: dict[str, object] = json.loads((folder / "planned.json").read_text())
    return seen


def _tracked(folder: Path, world: int) -> int:
    """The tracker's peak for the same script's step, on the fake group of ``world``."""
    script(folder, TRACK, "track.py")
    done = subprocess.run(
        [sys.executable, "track.py", "train.py", str(world), "tracked.json"],
        cwd=folder, env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    peak: int = json.loads((folder / "tracked.json").read_text())["peak"]
    return peak


def _block(nbytes: int) -> int:
    """A tensor's block: its bytes rounded up to 512."""
    return -(-nbytes // 512) * 512


@pytest.mark.parametrize("world", [8, 64])
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2", "tp"])
def test_plan_agrees_with_torchs_tracker_within_its_tolerance(
    tmp_path: Path, strategy: str, world: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planned step's allocated peak is within ±10 % of torch's tracker on the same script."""
    body = {"ddp": DDP, "fsdp2": FSDP2, "tp": TP}[strategy]
    planned = _planned(tmp_path, body, world, monkeypatch)
    tracked = _tracked(tmp_path, world)
    assert isinstance(planned["peak"], int)
    assert abs(planned["peak"] - tracked) <= 0.10 * tracked, (planned["peak"], tracked)


@pytest.mark.parametrize("world", [8, 64])
def test_a_tp_rank_holds_exactly_its_colwise_and_rowwise_shards(
    tmp_path: Path, world: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Colwise splits dim 0 and its bias, Rowwise dim 1 (its bias whole): 1/N each, no more."""
    seen = _planned(tmp_path, TP, world, monkeypatch)
    n = 4096 // world
    assert seen["shards"] == {
        "0.weight": [n, 1024], "0.bias": [n], "2.weight": [1024, n], "2.bias": [1024],
    }  # fmt: skip
    assert seen["sharded"] == sum(_block(k * 4) for k in (n * 1024, n, 1024 * n, 1024))


@pytest.mark.parametrize(
    ("world", "body", "args"),
    [(8, FSDP1, ()), (64, FSDP1, ()), (8, FSDP1_MOVED, ("moved",)), (8, FSDP1_MOVED, ("built",))],
    ids=["8", "64", "device_id-moved", "device_id-built"],
)
def test_an_fsdp1_rank_holds_exactly_its_padded_flat_shard(
    tmp_path: Path, world: int, body: str, args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """FSDP1's flat parameter (each parameter aligned to 16 B, the whole padded to a multiple
    of N) leaves 1/N of it on a rank, with or without ``device_id``."""
    seen = _planned(tmp_path, body, world, monkeypatch, *args)
    numel = 0
    for size in (1001 * 1000, 1001, 1000 * 1001, 1000):
        numel = -(-numel // 4) * 4 + size  # fp32's 16 B alignment: 4 elements
    padded = math.ceil(numel / world) * world
    assert seen["sharded"] == _block(padded // world * 4)
