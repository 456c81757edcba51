"""``memforensics plan --nproc-per-node``: ranks of DDP and FSDP2 jobs planned on torch's fake
process group, checked against the shard arithmetic and NCCL's default buffers."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from planned import plan, script

from memforensics._units import format_bytes

pytestmark = [pytest.mark.integration, pytest.mark.torch]

MiB = 1 << 20
NCCL_DEFAULT = 4 * MiB * 32 * 2  # NCCL_BUFFSIZE x channels x ring peers, one communicator

DDP = """
import json, os, sys, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("nccl")
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512))
model = DDP(model.cuda(), device_ids=[local])
opt = torch.optim.AdamW(model.parameters())
for _ in range(2):
    model(torch.randn(32, 512, device="cuda")).sum().backward()
    opt.step()
    opt.zero_grad()
json.dump({"rank": dist.get_rank(), "world": dist.get_world_size()}, open(sys.argv[1], "w"))
dist.destroy_process_group()
"""

FSDP2 = """
import json, sys, torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
dist.init_process_group("nccl")
model = torch.nn.Sequential(torch.nn.Linear(1000, 1001), torch.nn.Linear(1001, 1000)).cuda()
for layer in model:
    fully_shard(layer)
fully_shard(model)
sharded = torch.cuda.memory_allocated()
model(torch.randn(16, 1000, device="cuda")).sum().backward()
weight = next(model.parameters())
device = [type(weight).__name__, str(weight.device), weight.is_cuda]
json.dump({"sharded": sharded, "device": device}, open(sys.argv[1], "w"))
"""

META_FSDP2 = """
import json, sys, torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
dist.init_process_group("nccl")
with torch.device("meta"):
    model = torch.nn.Sequential(torch.nn.Linear(1000, 1001), torch.nn.Linear(1001, 1000))
for layer in model:
    fully_shard(layer)
fully_shard(model)
model.to_empty(device="cuda")
sharded = torch.cuda.memory_allocated()
for p in model.parameters():
    torch.nn.init.normal_(p, std=0.02)
initialised = torch.cuda.memory_allocated()
model(torch.randn(16, 1000, device="cuda")).sum().backward()
json.dump({"sharded": sharded, "initialised": initialised}, open(sys.argv[1], "w"))
"""

RESET_FSDP2 = """
import json, sys, torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
dist.init_process_group("nccl")
with torch.device("meta"):
    model = torch.nn.Sequential(torch.nn.Linear(1000, 1001), torch.nn.Linear(1001, 1000))
for layer in model:
    fully_shard(layer)
fully_shard(model)
model.to_empty(device="cuda")
sharded = torch.cuda.memory_allocated()
for layer in model:
    layer.reset_parameters()
torch.nn.init.trunc_normal_(model[0].weight, std=0.02)
initialised = torch.cuda.memory_allocated()
json.dump({"sharded": sharded, "initialised": initialised}, open(sys.argv[1], "w"))
"""


SPAWNED = """
import json, os, sys, torch, torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

def main(rank, world_size, out):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "localhost", "12355"
    torch.cuda.set_device(rank)
    dist.init_process_group(backend="nccl", rank=rank, world_size=world_size)
    block = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    model = DDP(torch.nn.Linear(20, 1).to(rank), device_ids=[rank])
    model(torch.randn(32, 20).to(rank)).sum().backward()
    json.dump({"rank": rank, "world": dist.get_world_size(), "pid": os.getpid(),
               "allocated": torch.cuda.memory_allocated()}, open(out, "w"))
    dist.destroy_process_group()

if __name__ == "__main__":
    world_size = torch.cuda.device_count()
    mp.spawn(main, args=(world_size, sys.argv[1]), nprocs=world_size)
"""


def _shards(world: int) -> int:
    """What FSDP2's shards of FSDP2 above hold on one rank: dim 0 padded to a multiple of the
    world, 1/world of it per rank, each in a block rounded to 512 B."""
    shapes = [(1001, 1000), (1001,), (1000, 1001), (1000,)]
    total = 0
    for shape in shapes:
        rows = math.ceil(shape[0] / world)
        nbytes = rows * math.prod(shape[1:]) * 4
        total += -(-nbytes // 512) * 512
    return total


@pytest.mark.parametrize("world", [8, 64])
def test_an_fsdp2_rank_holds_exactly_its_padded_shards(tmp_path: Path, world: int) -> None:
    """After fully_shard, a rank's allocated memory is the padded 1/N of every parameter."""
    script(tmp_path, FSDP2)
    done = plan(tmp_path, "--json", "--nproc-per-node", str(world), "train.py", "out.json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert (answer["rank"], answer["world_size"]) == (0, world)
    assert json.loads((tmp_path / "out.json").read_text())["sharded"] == _shards(world)


def test_an_fsdp2_parameter_is_on_cuda_to_the_script(tmp_path: Path) -> None:
    """A sharded parameter (a DTensor over a stand-in) reads cuda:0 and is_cuda to the script,
    as on a GPU, as its local shard does."""
    script(tmp_path, FSDP2)
    done = plan(tmp_path, "--nproc-per-node", "2", "train.py", "out.json")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out.json").read_text())["device"] == ["DTensor", "cuda:0", True]


def test_an_fsdp2_model_built_on_meta_holds_its_shards_once_and_initialises(
    tmp_path: Path,
) -> None:
    """Built on meta, sharded, moved and randomly initialised, rank 0 holds its shards once."""
    script(tmp_path, META_FSDP2)
    done = plan(tmp_path, "--nproc-per-node", "8", "train.py", "out.json")
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "out.json").read_text())
    assert seen == {"sharded": _shards(8), "initialised": _shards(8)}


def test_sharded_parameters_initialise_by_uniform_draws(tmp_path: Path) -> None:
    """FSDP2's parameters built on meta take reset_parameters and trunc_normal_ (uniform_ on
    a DTensor, run on fake CUDA tensors by its sharding propagation) and hold only their shards."""
    script(tmp_path, RESET_FSDP2)
    done = plan(tmp_path, "--nproc-per-node", "8", "train.py", "out.json")
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "out.json").read_text())
    assert seen == {"sharded": _shards(8), "initialised": _shards(8)}


@pytest.mark.parametrize("world", [8, 64])
def test_a_ddp_rank_runs_unchanged_with_nccl_buffers_outside_pytorch(
    tmp_path: Path, world: int
) -> None:
    """A DDP script sees the planned rank and world, and fits with one communicator's buffers."""
    script(tmp_path, DDP)
    done = plan(
        tmp_path, "--json", "--nproc-per-node", str(world // 2), "--nnodes", "2", "--rank",
        str(world - 1), "train.py", "out.json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    seen = json.loads((tmp_path / "out.json").read_text())
    assert seen == {"rank": world - 1, "world": world}
    assert answer["nccl_bytes"] == NCCL_DEFAULT
    assert answer["needed_bytes"] == (
        answer["peak_reserved_bytes"] + answer["context_bytes"] + NCCL_DEFAULT
    )
    params = (512 * 2048 + 2048 + 2048 * 512 + 512) * 4
    # parameters, their gradients, DDP's buckets and AdamW's two states at least
    assert answer["peak_allocated_bytes"] >= 5 * params
    assert Path(tmp_path, answer["snapshots"][0]).name == f"rank{world - 1}_planned.pickle"


MESH_2D = """
import json, sys, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("dp", "tp"))
others = dist.new_group([1, 2, 3])
for group in (None, mesh.get_group("dp"), mesh.get_group("tp")):
    dist.all_reduce(torch.ones(8, device="cuda"), group=group)  # each forms its communicator
seen = {"dp": mesh["dp"].size(), "tp": mesh["tp"].size()}
seen["outside"] = others == dist.GroupMember.NON_GROUP_MEMBER
json.dump(seen, open(sys.argv[1], "w"))
"""


def test_a_rank_outside_a_new_group_gets_no_communicator(tmp_path: Path) -> None:
    """Rank 0 of a 2 x 2 mesh is in the world's, its dp and its tp group, not in the others
    (where the plan stopped): those three communicators' buffers (a pair's ring has one peer),
    and new_group's non-member answer."""
    script(tmp_path, MESH_2D)
    done = plan(tmp_path, "--json", "--nproc-per-node", "4", "train.py", "out.json")
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "out.json").read_text())
    assert seen == {"dp": 2, "tp": 2, "outside": True}
    assert json.loads(done.stdout)["nccl_bytes"] == NCCL_DEFAULT + 2 * (NCCL_DEFAULT // 2)


GATHERED = """
import json, sys, torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
mesh = init_device_mesh("cuda", (2,))
head = torch.nn.Linear(256, 32768, bias=False).cuda()
gathered = ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
head = parallelize_module(head, mesh, gathered)
x = torch.randn(8, 128, 256, device="cuda")
with torch.no_grad():
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = head(x)
    peak = torch.cuda.max_memory_allocated() - before
    held = torch.cuda.memory_allocated() - before
json.dump({"shape": list(out.shape), "peak": peak, "held": held}, open(sys.argv[1], "w"))
"""


def test_a_gathered_dtensor_is_held_once_as_collectives_return_their_output(
    tmp_path: Path,
) -> None:
    """A column-parallel head gathered to every rank holds its local product, the all-gather's
    buffer and the cat along the last dim; the functional collectives' wait and autograd wrap
    return that buffer on CUDA, where the plan counted two more copies."""
    script(tmp_path, GATHERED)
    done = plan(tmp_path, "--nproc-per-node", "2", "train.py", "out.json")
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "out.json").read_text())
    full = 8 * 256 * 32768 * 4
    gathered_input = 8 * 256 * 256 * 4
    workspace = 32 * MiB  # cuBLAS's on sm_90, the first product on this thread
    assert seen["shape"] == [8, 256, 32768]
    assert seen["held"] == full + workspace
    # local product (half), all-gather buffer and the cat, at once
    assert seen["peak"] == full // 2 + 2 * full + gathered_input + workspace


DTENSOR_ADAMW = """
import json, sys, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
dist.init_process_group("nccl")
mesh = init_device_mesh("cuda", (dist.get_world_size(),))
params = []
for shape in [(2048, 1024), (1024, 512), (4096,)]:
    p = torch.nn.Parameter(distribute_tensor(torch.randn(shape, device="cuda"), mesh, [Shard(0)]))
    p.grad = distribute_tensor(torch.randn(shape, device="cuda"), mesh, [Shard(0)])
    params.append(p)
opt = torch.optim.AdamW(params, foreach=True)
torch.cuda.reset_peak_memory_stats()
held = torch.cuda.memory_allocated()
opt.step()
peak, after = torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated()
json.dump({"held": held, "peak": peak, "after": after}, open(sys.argv[1], "w"))
"""


def test_a_foreach_adamw_step_on_dtensors_holds_only_local_shards(tmp_path: Path) -> None:
    """A foreach AdamW step on sharded DTensors peaks at five local shards of each parameter
    (parameter, gradient, both moments, the square root of the second); the global-shape fake
    tensors DTensor's sharding propagation makes hold no device memory, as on a GPU."""
    script(tmp_path, DTENSOR_ADAMW)
    done = plan(tmp_path, "--nproc-per-node", "4", "train.py", "out.json")
    assert done.returncode == 0, done.stderr
    shard = sum(math.prod(shape) // 4 * 4 for shape in [(2048, 1024), (1024, 512), (4096,)])
    seen = json.loads((tmp_path / "out.json").read_text())
    assert seen == {"held": 2 * shard, "peak": 5 * shard, "after": 4 * shard}


BATCHED_P2P = """
import json, os, sys, torch, torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
sent = torch.ones(1024, 1024, device="cuda")
got = torch.empty(1024, 1024, device="cuda")
ops = [dist.P2POp(dist.isend, sent, 1), dist.P2POp(dist.irecv, got, 1)]
for work in dist.batch_isend_irecv(ops):
    work.wait()
json.dump({"allocated": torch.cuda.memory_allocated()}, open(sys.argv[1], "w"))
"""


def test_batched_point_to_point_ops_run_on_the_device_tensors_stand_in_for(
    tmp_path: Path,
) -> None:
    """batch_isend_irecv asks the group for the backend of its tensors' device, which a
    stand-in's reads as meta (where pipelining's stages stopped): it is the CUDA one."""
    script(tmp_path, BATCHED_P2P)
    done = plan(tmp_path, "--nproc-per-node", "2", "train.py", "out.json")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out.json").read_text()) == {"allocated": 2 * 4 * MiB}


BROADCAST_OBJECT = """
import json, os, sys, torch, torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
objects = [{"seed": 42}] if dist.get_rank() == 0 else [None]
dist.broadcast_object_list(objects, src=0)
json.dump(objects, open(sys.argv[1], "w"))
"""


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_that_receives_a_python_object_stops_with_one_line(
    tmp_path: Path, rank: int
) -> None:
    """broadcast_object_list runs on its source rank; a rank receiving the object, whose value
    is another process's, stops with one line naming the rank to plan (it had read the sizes
    from uninitialised host memory and tried to allocate terabytes)."""
    script(tmp_path, BROADCAST_OBJECT)
    done = plan(tmp_path, "--nproc-per-node", "2", "--rank", str(rank), "train.py", "out.json")
    if rank == 0:
        assert done.returncode == 0, done.stderr
        assert json.loads((tmp_path / "out.json").read_text()) == [{"seed": 42}]
        return
    assert done.returncode == 2
    said = done.stderr.strip().splitlines()[-1]
    assert said.startswith("memforensics plan: rank 1 receives a Python object from rank 0")
    assert "Traceback" not in done.stderr


ZERO_CONSOLIDATED = """
import json, os, sys, torch, torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)]).cuda()
optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam)
model(torch.randn(8, 512, device="cuda")).sum().backward()
optimizer.step()
optimizer.zero_grad(set_to_none=True)
state = sum(t.numel() * t.element_size() for s in optimizer.optim.state.values()
            for t in s.values() if t.is_cuda)
held = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
optimizer.consolidate_state_dict(to=0)
json.dump({"state": state, "held": held, "peak": torch.cuda.max_memory_allocated()},
          open(sys.argv[1], "w"))
"""


@pytest.mark.parametrize("rank", [0, 1])
def test_zero_consolidation_runs_on_the_sender_and_stops_the_receiver_with_one_line(
    tmp_path: Path, rank: int
) -> None:
    """ZeroRedundancyOptimizer.consolidate_state_dict(to=0) on two ranks: rank 1 sends its
    shard's state as a pickle in a byte tensor on the device, which its peak holds; rank 0,
    which receives it, stops with one line (it read a length of zero and failed to unpickle)."""
    script(tmp_path, ZERO_CONSOLIDATED)
    done = plan(tmp_path, "--nproc-per-node", "2", "--rank", str(rank), "train.py", "out.json")
    if rank == 1:
        assert done.returncode == 0, done.stderr
        seen = json.loads((tmp_path / "out.json").read_text())
        assert seen["state"] > 0
        assert seen["peak"] >= seen["held"] + seen["state"]
        return
    assert done.returncode == 2
    said = [line for line in done.stderr.splitlines() if "receives a Python object" in line]
    assert len(said) == 1
    assert said[0].startswith("memforensics plan: rank 0 receives a Python object from rank 1")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("unused", [False, True])
def test_ddp_warns_that_nccl_may_free_its_first_buckets_late(tmp_path: Path, unused: bool) -> None:
    """Where DDP rebuilds its buckets, the plan warns once that the first ones (every gradient's
    bytes) may outlive the rebuild on NCCL; with find_unused_parameters it never rebuilds."""
    script(
        tmp_path,
        DDP.replace("device_ids=[local]", f"device_ids=[local], find_unused_parameters={unused}"),
    )
    done = plan(tmp_path, "--json", "--nproc-per-node", "2", "train.py", "out.json")
    assert done.returncode == 0, done.stderr
    late = [w for w in json.loads(done.stdout)["warnings"] if "rebuilds its gradient buckets" in w]
    params = (512 * 2048 + 2048 + 2048 * 512 + 512) * 4
    assert len(late) == (0 if unused else 1)
    assert all(f"first buckets ({format_bytes(params)})" in warning for warning in late)


def test_every_rank_planned_names_the_first_to_run_out(tmp_path: Path) -> None:
    """--ranks all plans each rank; on a device too small, rank 0 runs out first, NCCL named."""
    script(tmp_path, DDP)
    done = plan(
        tmp_path, "--nproc-per-node", "2", "--ranks", "all", "--jobs", "2",
        "--device-memory", "700MiB", "train.py", "out.json",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines[1:3]] == ["0", "1"]
    assert all(line.split()[-1] == "OOM" for line in lines[1:3])
    first = next(line for line in lines if line.startswith("First rank to run out"))
    assert first.startswith("First rank to run out: 0: predicted OOM")
    assert "NCCL" in first
    assert sorted(
        p.name.split("_")[0] for p in (tmp_path / "memforensics-plan/oom").glob("*.pickle")
    ) == ["rank0", "rank1"]


PIPELINE = """
import os, torch, torch.nn as nn, torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
d, micro, n = 256, 8, 4
stage_module = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)).to(device)
stage = PipelineStage(
    stage_module, rank, world, device,
    input_args=(torch.empty(micro, d, device=device),),
    output_args=(torch.empty(micro, d, device=device, requires_grad=True),),
)
schedule = ScheduleGPipe(stage, n_microbatches=n, loss_fn=lambda out, y: out.square().mean())
for step in range(2):
    if rank == 0:
        schedule.step(torch.randn(micro * n, d, device=device))
    else:
        schedule.step(target=torch.zeros(micro * n, d, device=device))
print("stepped", rank)
"""


def test_a_pipeline_whose_stages_are_given_their_shapes_runs_on_every_rank(
    tmp_path: Path,
) -> None:
    """torch.distributed.pipelining stages given their input and output shapes vote static on
    every rank, as on a GPU where every rank runs the same script, so no rank waits for its
    peers' shapes as Python objects and each runs its schedule's steps."""
    script(tmp_path, PIPELINE)
    done = plan(tmp_path, "--nproc-per-node", "2", "--ranks", "all", "--jobs", "2", "train.py")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[-1] for line in lines[1:3]] == ["yes", "yes"]


ONE_RANK_FAILS = """
import os, torch, torch.distributed as dist
dist.init_process_group("nccl")
x = torch.randn(1024, 1024, device="cuda")
if dist.get_rank() == 1:
    raise FileNotFoundError("rank 1's shard of the data set")
"""


def test_every_rank_planned_says_which_ranks_failed_and_not_that_all_fit(tmp_path: Path) -> None:
    """--ranks all with a rank whose script fails names that rank as failed, never says that
    every rank fits, and exits 2 as that rank's own plan does."""
    script(tmp_path, ONE_RANK_FAILS)
    done = plan(tmp_path, "--nproc-per-node", "2", "--ranks", "all", "train.py")
    assert done.returncode == 2, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[-1] for line in lines[1:2]] == ["yes"]
    assert "FileNotFoundError" in done.stdout
    assert "Every planned rank" not in done.stdout
    assert any(line.startswith("Rank 1 of the world of 2 failed") for line in lines)


def test_vary_nproc_per_node_finds_the_smallest_world_that_fits(tmp_path: Path) -> None:
    """--vary nproc-per-node plans each world size; FSDP2's shards shrink as the world grows."""
    script(tmp_path, FSDP2)
    done = plan(
        tmp_path, "--json", "--vary", "nproc-per-node=8,64", "train.py", "out.json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    assert [r["value"] for r in rows] == ["8", "64"]
    assert rows[0]["peak_allocated_bytes"] > rows[1]["peak_allocated_bytes"]


@pytest.mark.parametrize("options", [(), ("--nproc-per-node", "2", "--rank", "1")])
def test_ranks_started_by_multiprocessing_spawn_are_planned_in_the_plan(
    tmp_path: Path, options: tuple[str, ...]
) -> None:
    """mp.spawn's process for the planned rank runs on the planned device, where it crashed."""
    script(tmp_path, SPAWNED)
    done = plan(tmp_path, "--json", *options, "train.py", "out.json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    seen = json.loads((tmp_path / "out.json").read_text())
    rank = int(options[-1]) if options else 0
    assert (seen["rank"], seen["world"]) == (rank, answer["world_size"])
    assert answer["world_size"] == (2 if options else 1)
    # the spawned rank's 64 MiB block, in this process's plan, and after it its model's
    assert seen["allocated"] > 64 * MiB
    assert answer["peak_allocated_bytes"] >= seen["allocated"]
    assert any("torch.multiprocessing" in note for note in answer["warnings"])


HOGWILD = """
import json, sys, torch
import torch.multiprocessing as mp

def train(rank, model, size, queue):
    at_start = torch.cuda.memory_allocated()
    block = torch.empty(size, dtype=torch.uint8, device="cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(32, 256, device="cuda")).sum().backward()
    optimizer.step()
    queue.put((rank, at_start, torch.cuda.memory_allocated()))

if __name__ == "__main__":
    mp.set_start_method("spawn", force=True)
    model = torch.nn.Linear(256, 256).cuda()
    model.share_memory()
    held = torch.empty(int(sys.argv[2]), dtype=torch.uint8, device="cuda")
    queue = mp.SimpleQueue()
    workers = [mp.Process(target=train, args=(r, model, int(sys.argv[3]), queue)) for r in range(2)]
    for p in workers:
        p.start()
    for p in workers:
        p.join()
    seen = []
    while not queue.empty():
        seen.append(queue.get())
    json.dump({"seen": sorted(seen), "exit": [p.exitcode for p in workers],
               "grads": [p.grad is None for p in model.parameters()],
               "allocated": torch.cuda.memory_allocated()}, open(sys.argv[1], "w"))
"""


def test_hogwild_workers_run_on_the_device_each_with_its_own_allocator(tmp_path: Path) -> None:
    """Processes given a shared CUDA model are planned, each on an allocator of its own."""
    script(tmp_path, HOGWILD)
    done = plan(tmp_path, "--json", "train.py", "out.json", str(MiB), str(64 * MiB))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    seen = json.loads((tmp_path / "out.json").read_text())
    assert seen["exit"] == [0, 0]
    # each worker opens the model by IPC: its allocator starts empty, and its block, the
    # gradients and momentum are its own; the script's model gets no gradients from them
    assert [row[1] for row in seen["seen"]] == [0, 0]
    assert all(row[2] > 64 * MiB for row in seen["seen"])
    assert seen["grads"] == [True, True]
    workers = answer["workers"]
    assert len(workers) == 2
    assert all(w["peak_allocated_bytes"] > 64 * MiB for w in workers)
    assert answer["peak_allocated_bytes"] < 2 * MiB
    # the workers run at once on a GPU: each one's reserved memory and context held together
    context = answer["context_bytes"]
    both = sum(w["peak_reserved_bytes"] + context for w in workers)
    assert answer["device_peak_bytes"] >= answer["peak_reserved_bytes"] + context + both
    assert answer["needed_bytes"] == answer["device_peak_bytes"]


def test_a_hogwild_worker_that_runs_out_beside_the_others_is_a_predicted_oom(
    tmp_path: Path,
) -> None:
    """The second worker cannot have what the script and the first worker hold: it runs out."""
    script(tmp_path, HOGWILD)
    done = plan(
        tmp_path, "--json", "--device-memory", "4GiB", "train.py", "out.json",
        str(1024 * MiB), str(1200 * MiB),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # 1: does not fit
    answer = json.loads(done.stdout)
    seen = json.loads((tmp_path / "out.json").read_text())
    # 4 GiB less three contexts, the script's 1 GiB and the first worker's 1,200 MiB
    assert seen["exit"] == [0, 1]
    first, second = answer["workers"]
    assert first["oom_message"] is None
    assert "CUDA out of memory. Tried to allocate 1.17 GiB" in second["oom_message"]
    assert answer["fits"] is False


BACKENDS = """
import json, sys, warnings
warnings.simplefilter("error")  # the plan's own emulation warns nothing a GPU would not
import torch, torch.distributed as dist
dist.init_process_group("nccl")
pair = dist.new_group([0, 1], backend="nccl")
hosts = dist.new_group([0, 1, 2, 3], backend="gloo")
mixed = dist.new_group([0, 2], backend="cpu:gloo,cuda:nccl")
dist.all_reduce(torch.ones(4), group=hosts)
dist.all_reduce(torch.ones(4, device="cuda"), group=pair)
dist.all_reduce(torch.ones(4, device="cuda"), group=mixed)
dist.barrier(group=hosts)
dist.all_reduce(torch.ones(4, device="cuda"))
json.dump([dist.get_world_size(g) for g in (pair, hosts, mixed)], open(sys.argv[1], "w"))
"""


def test_groups_a_script_makes_on_named_backends_run_and_only_nccl_ones_hold_buffers(
    tmp_path: Path,
) -> None:
    """Groups made with a backend of their own (Megatron's Gloo groups beside its NCCL ones;
    ``backend="nccl"``, which the CPU build lacks), which stopped the plan, run their
    collectives; the NCCL ones (the world's, a pair, a mixed ``cpu:gloo,cuda:nccl`` pair) hold
    NCCL's buffers, and the Gloo one none on the device."""
    script(tmp_path, BACKENDS)
    done = plan(tmp_path, "--json", "--nproc-per-node", "4", "train.py", "out.json")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out.json").read_text()) == [2, 4, 2]
    assert json.loads(done.stdout)["nccl_bytes"] == NCCL_DEFAULT + 2 * (NCCL_DEFAULT // 2)


NAMED = """
import json, sys
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
named = sys.argv[2]
if named == "none":
    dist.init_process_group()
elif named == "device":
    dist.init_process_group(device_id=torch.device("cuda", 0))
else:
    dist.init_process_group(named)
hosts = dist.new_group([0, 1], backend="gloo")
same = dist.new_group([0, 1])
mesh = init_device_mesh("cuda", (2,))
dist.all_reduce(torch.ones(4, device="cuda"), group=same)
json.dump([dist.get_backend(), dist.get_backend(hosts), dist.get_backend(same),
           dist.get_backend(mesh.get_group())], open(sys.argv[1], "w"))
print(json.dumps(torch.cuda.mem_get_info()))
"""


@pytest.mark.parametrize(
    ("named", "answers", "pairs"),
    [
        ("nccl", ["nccl", "gloo", "nccl", "nccl"], 1),
        ("gloo", ["gloo", "gloo", "gloo", "gloo"], 0),
        ("none", ["undefined", "gloo", "undefined", "undefined"], 1),
        ("device", ["nccl", "gloo", "nccl", "nccl"], 2),
    ],
)
def test_get_backend_answers_the_backend_the_script_named_and_only_nccl_holds_buffers(
    tmp_path: Path, named: str, answers: list[str], pairs: int
) -> None:
    """``dist.get_backend(group)`` answers what a GPU run answers for the backend the script
    named (it answered the plan's ``"fake"``, so code that branches on ``"nccl"`` took the CPU
    branch), a subgroup named by none takes the default's, and a default Gloo group holds no
    NCCL buffers on the device."""
    script(tmp_path, NAMED)
    done = plan(tmp_path, "--json", "--nproc-per-node", "2", "train.py", "out.json", named)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out.json").read_text()) == answers
    assert json.loads(done.stdout)["nccl_bytes"] == pairs * (NCCL_DEFAULT // 2)


IDLE = """
import json, sys
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
bound = sys.argv[2] == "bound"
dist.init_process_group("nccl", device_id=torch.device("cuda", 0) if bound else None)
mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("dp", "tp"))
tp = mesh.get_group("tp")
dist.all_reduce(torch.ones(8, device="cuda"), group=tp)
print(json.dumps(torch.cuda.mem_get_info()))
"""


@pytest.mark.parametrize("bound", ["lazy", "bound"])
def test_a_group_holds_nccl_buffers_from_its_first_collective_unless_bound_to_the_device(
    tmp_path: Path, bound: str
) -> None:
    """NCCL forms a group's communicator at its first collective: of the world's, dp's and
    tp's groups only tp runs one, so only a pair's buffers are held (a dozen idle Megatron
    groups held 128 MiB each); where ``init_process_group`` was given a ``device_id``, every
    group's communicator is formed as it is made, as ProcessGroupNCCL's eager
    initialisation does."""
    script(tmp_path, IDLE)
    done = plan(tmp_path, "--json", "--nproc-per-node", "4", "train.py", "out.json", bound)
    assert done.returncode == 0, done.stderr
    expected = NCCL_DEFAULT // 2 if bound == "lazy" else NCCL_DEFAULT + 2 * (NCCL_DEFAULT // 2)
    assert json.loads(done.stdout)["nccl_bytes"] == expected


COALESCED = """
import json, sys, torch, torch.distributed as dist
dist.init_process_group("nccl")
world = dist.get_world_size()
grads = [torch.empty(1 << 20, device="cuda") for _ in range(3)]
shards = [torch.empty(1 << 18, device="cuda") for _ in range(2)]
full = [torch.empty(world << 18, device="cuda") for _ in range(2)]
before = torch.cuda.memory_allocated()
with dist._coalescing_manager(async_ops=True) as cm:  # Megatron-core's gradient buckets
    for grad in grads:
        dist.all_reduce(grad, async_op=True)
cm.wait()
with dist._coalescing_manager(async_ops=True) as cm:  # its distributed optimizer's gather
    for out, shard in zip(full, shards):
        dist.all_gather_into_tensor(out, shard, async_op=True)
cm.wait()
with dist._coalescing_manager():
    for out, shard in zip(full, shards):
        dist.reduce_scatter_tensor(shard, out)
json.dump({"before": before, "after": torch.cuda.memory_allocated()}, open(sys.argv[1], "w"))
"""


def test_coalesced_collectives_run_in_place_on_the_callers_tensors(tmp_path: Path) -> None:
    """All-reduces, all-gathers and reduce-scatters batched by ``_coalescing_manager`` run on a
    planned rank, written into the tensors the script gave, allocating nothing."""
    script(tmp_path, COALESCED)
    done = plan(tmp_path, "--nproc-per-node", "2", "train.py", str(tmp_path / "out.json"))
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "out.json").read_text())
    held = (3 << 22) + 2 * (1 << 20) + 2 * (2 << 20)  # float32 grads, shards, gathered
    assert found == {"before": held, "after": held}


GATHERED_OBJECTS = """
import json, sys, torch, torch.distributed as dist
dist.init_process_group("nccl")
gathered = [None] * dist.get_world_size()
dist.all_gather_object(gathered, {"rank": dist.get_rank()})
dist.all_gather_object(gathered, {"rank": dist.get_rank()})
json.dump(gathered, open(sys.argv[1], "w"))
"""


def test_gathered_objects_are_this_ranks_in_every_place_and_said_once(tmp_path: Path) -> None:
    """``all_gather_object`` on a planned rank of two gives that rank's object in both places,
    and the plan says once that the other ranks' objects are not the real ones."""
    script(tmp_path, GATHERED_OBJECTS)
    done = plan(tmp_path, "--json", "--nproc-per-node", "2", "--rank", "1", "train.py", "out.json")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out.json").read_text()) == [{"rank": 1}, {"rank": 1}]
    said = [line for line in json.loads(done.stdout)["warnings"] if "all_gather_object" in line]
    assert len(said) == 1
    assert "this rank's Python object in every rank's place" in said[0]


@pytest.mark.parametrize(
    "launcher",
    [
        ("torchrun", "--standalone", "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1"),
        ("-m", "torch.distributed.run", "--nproc-per-node=2", "--nnodes=2", "--node-rank=1"),
    ],
)
def test_a_torchrun_command_line_plans_the_rank_it_starts(
    tmp_path: Path, launcher: tuple[str, ...]
) -> None:
    """``plan torchrun ... train.py ARGS`` (or ``-m torch.distributed.run``) plans the script
    as the first rank of the launcher's node, with the script's own arguments, as
    ``plan --nproc-per-node 2 --nnodes 2 --rank 2`` does."""
    script(tmp_path, DDP)
    done = plan(tmp_path, "--json", *launcher, "train.py", "out.json")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out.json").read_text()) == {"rank": 2, "world": 4}
    flags = ("--json", "--nproc-per-node", "2", "--nnodes", "2", "--rank", "2")
    alone = json.loads(plan(tmp_path, *flags, "train.py", "out.json").stdout)
    assert json.loads(done.stdout)["peak_allocated_bytes"] == alone["peak_allocated_bytes"]


SHARDED = """
import torch, torch.distributed as dist
dist.init_process_group("nccl")
shard = torch.empty((256 << 20) // dist.get_world_size(), dtype=torch.uint8, device="cuda")
"""


def test_vary_nproc_per_node_plans_a_launchers_job_on_each_number_of_gpus(
    tmp_path: Path,
) -> None:
    """``plan --vary nproc-per-node=2,4 torchrun --nproc-per-node 8 train.py`` plans the job on
    2 and on 4 GPUs a node: each row's peak is the script's shard of 256 MiB over that world."""
    script(tmp_path, SHARDED)
    launcher = ("torchrun", "--nproc-per-node", "8", "train.py")
    varied = plan(tmp_path, "--json", "--vary", "nproc-per-node=2,4", *launcher)
    assert varied.returncode == 0, varied.stderr
    rows = json.loads(varied.stdout)["rows"]
    peaks = {row["value"]: row["peak_allocated_bytes"] for row in rows}
    assert peaks == {"2": 128 << 20, "4": 64 << 20}


def test_torchrun_on_every_gpu_of_the_machine_takes_plans_own_count(tmp_path: Path) -> None:
    """``plan --nproc-per-node 4 torchrun --nproc-per-node gpu train.py`` plans a world of the
    four GPUs the plan's option says the machine has, which the planning host cannot say."""
    script(tmp_path, DDP)
    launcher = ("torchrun", "--nproc-per-node", "gpu")
    done = plan(tmp_path, "--nproc-per-node", "4", "--rank", "3", *launcher, "train.py", "out.json")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out.json").read_text()) == {"rank": 3, "world": 4}


FAKES = Path(__file__).parent / "fakes"

LOCAL_RANK_ARGUMENT = """
import argparse, json, os, torch, torch.distributed as dist
parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
parser.add_argument("--out")
args = parser.parse_args()
dist.init_process_group("nccl")
json.dump({"local_rank": args.local_rank, "rank": dist.get_rank(),
           "world": dist.get_world_size()}, open(args.out, "w"))
"""


@pytest.mark.parametrize(("options", "local_rank"), [((), 0), (("--no_local_rank",), -1)])
def test_a_deepspeed_command_line_plans_the_rank_it_starts(
    tmp_path: Path, options: tuple[str, ...], local_rank: int
) -> None:
    """``plan deepspeed --num_gpus 2 --num_nodes 2 --node_rank 1 train.py ARGS`` plans the
    script as that node's first rank, given ``--local_rank=0`` first as DeepSpeed's launcher
    gives it (none with ``--no_local_rank``), with the script's own arguments."""
    shutil.copytree(FAKES / "deepspeed", tmp_path / "deepspeed")
    script(tmp_path, LOCAL_RANK_ARGUMENT)
    launcher = ("deepspeed", "--num_gpus", "2", "--num_nodes", "2", "--node_rank", "1", *options)
    done = plan(tmp_path, *launcher, "train.py", "--out", "out.json")
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "out.json").read_text())
    assert seen == {"local_rank": local_rank, "rank": 2, "world": 4}


HOSTFILE = "# the job's hosts\nworker-0 slots=4\nworker-1 slots=4\nworker-2 slots=4\n"


@pytest.mark.parametrize(
    ("plan_options", "launcher", "visible", "seen"),
    [
        ((), ("--include", "localhost:2,3"), "", (0, 0, 2)),
        (("--nproc-per-node", "4"), (), "", (0, 0, 4)),
        ((), (), "0,1,2", (0, 0, 3)),
        ((), ("-H", "hosts", "--include", "worker-0@worker-2", "--node_rank", "1"), "", (0, 4, 8)),
        ((), ("-H", "hosts", "--exclude", "worker-1"), "", (0, 0, 8)),
        (
            (),
            ("-H", "hosts", "--num_nodes", "2", "--num_gpus", "2", "--node_rank", "1"),
            "",
            (0, 2, 4),
        ),
    ],
)
def test_a_deepspeed_command_line_starts_the_hosts_and_gpus_it_names(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    plan_options: tuple[str, ...],
    launcher: tuple[str, ...],
    visible: str,
    seen: tuple[int, int, int],
) -> None:
    """DeepSpeed's world is read as its launcher reads it: the GPUs ``--include`` names, every
    GPU of the machine (plan's ``--nproc-per-node``) or of ``CUDA_VISIBLE_DEVICES``, and a
    hostfile's hosts filtered and cut by ``--include``, ``--exclude``, ``--num_nodes`` and
    ``--num_gpus``: (local rank, rank, world) as the planned rank sees them."""
    shutil.copytree(FAKES / "deepspeed", tmp_path / "deepspeed")
    (tmp_path / "hosts").write_text(HOSTFILE)
    script(tmp_path, LOCAL_RANK_ARGUMENT)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    done = plan(tmp_path, *plan_options, "deepspeed", *launcher, "train.py", "--out", "out.json")
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "out.json").read_text())
    assert (found["local_rank"], found["rank"], found["world"]) == seen


@pytest.mark.parametrize(
    ("launcher", "said"),
    [
        ((), "give plan's --nproc-per-node N"),
        (("--exclude", "localhost:0"), "name the GPUs (--include localhost:0,1)"),
        (("-H", "uneven", "--include", "worker-0@worker-1"), "worker-0 4, worker-1 2"),
        (("-H", "hosts", "--include", "worker-9"), "worker-9"),
    ],
)
def test_a_deepspeed_world_the_plan_cannot_know_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, launcher: tuple[str, ...], said: str
) -> None:
    """A DeepSpeed command line whose world depends on the planning host's GPUs, whose hosts
    start different numbers of processes, or that names a host its hostfile lacks gets one
    line that says what to give, and exit 2, before the script runs."""
    shutil.copytree(FAKES / "deepspeed", tmp_path / "deepspeed")
    (tmp_path / "hosts").write_text(HOSTFILE)
    (tmp_path / "uneven").write_text("worker-0 slots=4\nworker-1 slots=2\n")
    script(tmp_path, LOCAL_RANK_ARGUMENT)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    done = plan(tmp_path, "deepspeed", *launcher, "train.py", "--out", "out.json")
    assert done.returncode == 2
    assert said in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "out.json").exists()


GATHERED_SIZES = """
import json, sys, torch, torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(0)
world = dist.get_world_size()
logits = torch.randn(8, 96, device="cuda")
size = torch.tensor(logits.shape, device="cuda")[None]
out = torch.empty(world * size.numel(), dtype=size.dtype, device="cuda")
dist.all_gather_into_tensor(out, size)
sizes = out.view(-1, 2).cpu()
listed = [torch.empty_like(size) for _ in range(world)]
dist.all_gather(listed, size)
longest = max(int(s[1]) for s in sizes)
padded = logits.new_zeros(logits.shape[0], longest) - 100
padded[:, : logits.shape[1]] = logits
json.dump({"sizes": sizes.tolist(), "listed": [t.tolist() for t in listed],
           "padded": list(padded.shape)}, open(sys.argv[1], "w"))
"""


def test_an_all_gather_of_known_values_holds_this_ranks_in_every_place(tmp_path: Path) -> None:
    """A tensor all-gathered from values the script decides (Accelerate's
    ``pad_across_processes`` gathers each rank's shape, reads it and pads to the longest) holds
    this rank's values in every rank's place, so a size read from it is this rank's."""
    script(tmp_path, GATHERED_SIZES)
    done = plan(tmp_path, "--json", "--nproc-per-node", "2", "train.py", "out.json")
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "out.json").read_text())
    assert found["sizes"] == [[8, 96], [8, 96]]
    assert found["listed"] == [[[8, 96]], [[8, 96]]]
    assert found["padded"] == [8, 96]
    said = [line for line in json.loads(done.stdout)["warnings"] if "all-gathered" in line]
    assert len(said) == 1
