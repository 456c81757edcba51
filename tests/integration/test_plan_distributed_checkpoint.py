"""``torch.distributed.checkpoint`` under ``memforensics plan --nproc-per-node``: each rank of an
FSDP2 job resumes from a real checkpoint and saves its own part, with no device memory, and the
checkpoint folders are as they were when the plan ends. Runs through the real console command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

REAL = """
import torch
import torch.distributed.checkpoint as dcp
model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(2)])
dcp.save({"model": model.state_dict()}, checkpoint_id="real", no_dist=True)
"""

RESUME_AND_SAVE = """
import json, os, torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.fsdp import fully_shard
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
dist.init_process_group("nccl")
torch.cuda.set_device(dist.get_rank())
model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(2)]).cuda()
for layer in model:
    fully_shard(layer)
fully_shard(model)
facts = {}
held = torch.cuda.memory_allocated()
state = {"model": get_model_state_dict(model)}
dcp.load(state, checkpoint_id="real")  # a resume from the job's own checkpoint
set_model_state_dict(model, state["model"])
facts["load"] = torch.cuda.memory_allocated() - held
model(torch.randn(8, 512, device="cuda")).sum().backward()
held = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
dcp.save({"model": get_model_state_dict(model)}, checkpoint_id="real")  # over it
dcp.save({"model": get_model_state_dict(model)}, checkpoint_id="step-1")  # a new one
facts["save"] = torch.cuda.max_memory_allocated() - held
facts["files"] = sorted(os.listdir("step-1"))
print(json.dumps(facts))
"""


def _contents(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.mark.parametrize("rank", [0, 1])
def test_an_fsdp2_rank_resumes_and_saves_its_part_and_leaves_the_checkpoints_as_found(
    tmp_path: Path, rank: int
) -> None:
    """Rank 0 (DCP's coordinator) and rank 1 both load their shards from a checkpoint a real
    run wrote and save theirs, in place and with no device memory, as DTensors on a GPU are
    (the load made a second copy of the shards; rank 0's save failed on the fake group's
    gathered plans, rank 1's stopped); the saved folder holds DCP's metadata and data in the
    run, and when the plan ends the real checkpoint is byte for byte as it was and the new one
    is gone."""
    script(tmp_path, REAL, "real.py")
    script(tmp_path, RESUME_AND_SAVE)
    made = subprocess.run(
        [sys.executable, "real.py"], cwd=tmp_path, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    real = _contents(tmp_path / "real")
    done = plan(tmp_path, "--json", "--nproc-per-node", "2", "--rank", str(rank), "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("{")]
    assert json.loads(line) == {"load": 0, "save": 0, "files": [".metadata", "__0_0.distcp"]}
    assert _contents(tmp_path / "real") == real
    assert not (tmp_path / "step-1").exists()
    [said] = [w for w in json.loads(done.stdout)["warnings"] if w.startswith("checkpoints")]
    assert "1 saved over put back as they were" in said
    assert "1 new removed" in said


FSDP1_SHARDED = """
import json, torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType
dist.init_process_group("nccl")
torch.cuda.set_device(dist.get_rank())
model = FSDP(torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(2)]).cuda())
model(torch.randn(8, 512, device="cuda")).sum().backward()
with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
    held = torch.cuda.memory_allocated()
    dcp.save({"model": model.state_dict()}, checkpoint_id="ckpt")
    state = {"model": model.state_dict()}  # FSDP1 clones each local shard into it
    dcp.load(state, checkpoint_id="ckpt")
    model.load_state_dict(state["model"])
    shards = sum(-(-s.tensor.numel() * 4 // 512) * 512
                 for t in state["model"].values() for s in t.local_shards())
    print(json.dumps({"after": torch.cuda.memory_allocated() - held, "shards": shards}))
"""


def test_an_fsdp1_sharded_state_dict_is_loaded_in_place(tmp_path: Path) -> None:
    """FSDP1's sharded state dict (ShardedTensors) saves and loads through DCP on a rank that is
    not the coordinator (DCP refused its stand-in shards as meta tensors it cannot make), and
    what stays on the device after is the state dict's own clones of the shards, which the load
    filled in place."""
    script(tmp_path, FSDP1_SHARDED)
    done = plan(tmp_path, "--nproc-per-node", "2", "--rank", "1", "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    assert facts["after"] == facts["shards"] == 2 * (512 * 512 * 4 // 2 + 512 * 4 // 2)
    assert not (tmp_path / "ckpt").exists()
