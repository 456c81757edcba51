"""Training and inference idioms of real scripts, planned as CUDA runs them: activation
checkpointing under autocast, a gradient scaler, a hand-written optimizer, generation under
``inference_mode``. Each runs through the real ``memforensics plan`` console command."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

MiB = 1 << 20

CHECKPOINTED = """
import json, sys
import torch
from torch.utils.checkpoint import checkpoint

blocks = torch.nn.ModuleList(
    torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024))
    for _ in range(4)
).cuda()
opt = torch.optim.SGD(blocks.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
x = torch.randn(8192, 1024, device="cuda")
for step in range(2):
    with torch.autocast("cuda", dtype=torch.float16):
        h = x
        for block in blocks:
            h = checkpoint(block, h, use_reentrant=False) if sys.argv[1] == "yes" else block(h)
        loss = h.float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
print(json.dumps({"peak": torch.cuda.max_memory_allocated()}))
"""


def _facts(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON line the script printed (its output goes to stderr under --json)."""
    [line] = [line for line in done.stderr.splitlines() if line.startswith("{")]
    return dict(json.loads(line))


def test_activation_checkpointing_recomputes_under_cuda_autocast(tmp_path: Path) -> None:
    """Checkpointed blocks under float16 autocast with a gradient scaler plan to the end (the
    recompute casts as the forward did) and peak lower than the same blocks uncheckpointed."""
    script(tmp_path, CHECKPOINTED)
    with_ = plan(tmp_path, "--json", "train.py", "yes")
    without = plan(tmp_path, "--json", "train.py", "no")
    assert with_.returncode == 0, with_.stderr
    assert without.returncode == 0, without.stderr
    saved = _facts(without)["peak"] - _facts(with_)["peak"]
    # an uncheckpointed block keeps its float16 hidden activations (8192 x 4096) for backward;
    # a checkpointed one keeps only its input, and recomputes one block at a time
    assert saved > 3 * 8192 * 4096 * 2


HAND_WRITTEN = """
import json
from pathlib import Path
import torch

class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99)):
        super().__init__(params, dict(lr=lr, betas=betas))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                b1, b2 = group["betas"]
                update = state["exp_avg"].mul(b1).add(p.grad, alpha=1 - b1).sign_()
                p.add_(update, alpha=-group["lr"])
                state["exp_avg"].mul_(b2).add_(p.grad, alpha=1 - b2)

model = torch.nn.Linear(1024, 1024, device="cuda", dtype=torch.bfloat16)
opt = Lion(model.parameters())
for step in range(3):
    model(torch.randn(8, 1024, device="cuda", dtype=torch.bfloat16)).sum().backward()
    opt.step()
    opt.zero_grad()
print(json.dumps({"allocated": torch.cuda.memory_allocated()}))
"""


def test_a_hand_written_optimizer_holds_its_state_and_nothing_else(tmp_path: Path) -> None:
    """After three steps of a Python optimizer with one state per parameter, what stays allocated
    is the bf16 weights, their state, and cuBLAS's two workspaces (forward and backward threads,
    32 MiB each from capability 9.0): every temporary of the steps was freed."""
    script(tmp_path, HAND_WRITTEN)
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    weights = 1024 * 1024 * 2 + 1024 * 2
    assert _facts(done)["allocated"] == 2 * weights + 2 * 32 * MiB


GENERATE = """
import json, sys
import torch

model = torch.nn.TransformerDecoderLayer(256, 4, batch_first=True).cuda().half().eval()
memory = torch.randn(2, 16, 256, device="cuda", dtype=torch.half)
with torch.inference_mode():
    seq = torch.zeros(2, 1, 256, device="cuda", dtype=torch.half)
    for _ in range(int(sys.argv[1])):
        out = model(seq, memory)
        seq = torch.cat([seq, out[:, -1:]], dim=1)
print(json.dumps({"length": seq.shape[1], "peak": torch.cuda.max_memory_allocated()}))
"""


def test_generation_under_inference_mode_grows_with_the_sequence(tmp_path: Path) -> None:
    """A decoder generating under inference_mode plans to the end, with its sequence as long as
    asked, and a longer generation needs a higher peak."""
    script(tmp_path, GENERATE)
    short, long = (plan(tmp_path, "--json", "train.py", n) for n in ("16", "256"))
    assert short.returncode == 0, short.stderr
    assert long.returncode == 0, long.stderr
    assert _facts(short)["length"] == 17
    assert _facts(long)["length"] == 257
    assert _facts(long)["peak"] > _facts(short)["peak"]


LOAD = """
import json, torch
state = torch.load("state.pt", map_location="cuda")
print(json.dumps({
    "allocated": torch.cuda.memory_allocated(),
    "shapes": {k: list(v.shape) for k, v in state.items()},
    "shared": state["weight"].data_ptr() == state["first_rows"].data_ptr(),
}))
"""


def test_a_checkpoint_loaded_onto_cuda_is_on_the_planned_device(tmp_path: Path) -> None:
    """torch.load(map_location="cuda") restores each saved storage once onto the planned device:
    a view saved beside its base shares its block, as on a GPU."""
    import torch

    weight = torch.zeros(1024, 1024)
    torch.save(
        {"weight": weight, "first_rows": weight[:16], "bias": torch.zeros(1024)},
        tmp_path / "state.pt",
    )
    script(tmp_path, LOAD)
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    facts = _facts(done)
    assert facts["shapes"] == {"weight": [1024, 1024], "first_rows": [16, 1024], "bias": [1024]}
    assert facts["shared"] is True
    assert facts["allocated"] == 1024 * 1024 * 4 + 1024 * 4


HOST_CHECKPOINT = """
import json, torch
torch.save(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.BatchNorm1d(64)).state_dict(),
           "host.pt")
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.BatchNorm1d(64)).cuda()
before = torch.cuda.memory_allocated()
model.load_state_dict(torch.load("host.pt"))
with torch.device("meta"):
    own = torch.nn.Linear(8, 8)
own.load_state_dict(torch.nn.Linear(8, 8).state_dict())
print(json.dumps({"after": torch.cuda.memory_allocated() - before}))
"""


def test_a_host_checkpoint_loads_into_a_planned_model_without_torch_s_no_op_warning(
    tmp_path: Path,
) -> None:
    """A CPU checkpoint loaded into a model on the planned device copies in place (no new
    memory) with no warning that the copy "is a no-op"; the script's own ``meta`` module,
    where it is one, still gets torch's warning, once per tensor."""
    script(tmp_path, HOST_CHECKPOINT)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert json.loads(line)["after"] == 0
    no_ops = [line for line in done.stderr.splitlines() if "which is a no-op" in line]
    assert [line.split(": copying")[0].rsplit(" ", 1)[-1] for line in no_ops] == [
        "weight",
        "bias",
    ]


ROUND_TRIP = """
import json, torch
model = torch.nn.Linear(1024, 1024).cuda()
opt = torch.optim.AdamW(model.parameters(), fused=True)
model(torch.randn(8, 1024, device="cuda")).sum().backward()
opt.step()
torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, "best.pt")
before = torch.cuda.memory_allocated()
state = torch.load("best.pt")  # no map_location: back where it was saved, on the device
held = torch.cuda.memory_allocated() - before
model.load_state_dict(state["model"])
graded = model.weight.grad is not None
opt.load_state_dict(state["opt"])
del state
on_host = torch.load("best.pt", map_location="cpu")
print(json.dumps({
    "held": held, "after": torch.cuda.memory_allocated() - before, "graded": graded,
    "host": [str(t.device) for t in on_host["model"].values()],
    "host_bytes": sum(t.numel() * t.element_size() for t in on_host["model"].values()),
}))
"""


def test_a_checkpoint_saved_in_the_plan_loads_back_onto_the_planned_device(
    tmp_path: Path,
) -> None:
    """A model and fused-AdamW checkpoint saved by the planned run and loaded back without a
    map_location holds a second copy of the weights and optimizer state on the device, as on a
    GPU (it came back as shapes on no device), restores into the model (copied in place, its
    gradients kept) and the optimizer (whose load crashed), and loaded with map_location="cpu"
    is on the host, whole."""
    script(tmp_path, ROUND_TRIP)
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    facts = _facts(done)
    weights = 1024 * 1024 * 4 + 1024 * 4
    block = -(-1024 * 4 // 512) * 512
    assert facts["held"] >= 3 * (1024 * 1024 * 4 + block)  # weights, exp_avg, exp_avg_sq
    assert facts["after"] == 0
    assert facts["graded"] is True
    assert facts["host"] == ["cpu", "cpu"]
    assert facts["host_bytes"] == weights


ONE_DEVICE = """
import json, torch
peaks = []
with torch.cuda.device(0):
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.Linear(4096, 1024)).cuda()
    x = torch.randn(256, 1024, device="cuda")
    for wrapped in (model, torch.nn.DataParallel(model)):
        torch.cuda.reset_peak_memory_stats()
        wrapped(x).sum().backward()
        peaks.append(torch.cuda.max_memory_allocated())
        model.zero_grad(set_to_none=True)
print(json.dumps({"plain": peaks[0], "data_parallel": peaks[1]}))
"""


def test_a_device_context_and_one_device_data_parallel_plan_as_on_one_gpu(tmp_path: Path) -> None:
    """torch.cuda.device(0) as a context, and DataParallel over the one device, run under plan;
    DataParallel's step peaks where the bare module's does (its scatter to one device copies
    nothing)."""
    script(tmp_path, ONE_DEVICE)
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    facts = _facts(done)
    assert facts["data_parallel"] == facts["plain"]


GENERATOR = """
import json, torch
g = torch.Generator(device="cuda")
g.manual_seed(0)
noise = torch.randn(1024, 1024, device="cuda", generator=g)
order = torch.randperm(4096, device="cuda", generator=g)
print(json.dumps({
    "allocated": torch.cuda.memory_allocated(),
    "generators": all(isinstance(x, torch.Generator) for x in (g, torch.default_generator)),
}))
"""


def test_a_cuda_generator_draws_stand_ins(tmp_path: Path) -> None:
    """torch.Generator(device="cuda"), which the CPU build cannot make, seeds the draws of
    stand-ins under plan; every generator is still a torch.Generator."""
    script(tmp_path, GENERATOR)
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    facts = _facts(done)
    assert facts["generators"] is True
    assert facts["allocated"] == 1024 * 1024 * 4 + 4096 * 8


GENERATOR_DEVICE = """
import json, torch
g = torch.Generator(device="cuda").manual_seed(0)
noise = torch.randn(1024, 1024, generator=g, device=g.device)  # drawn where the generator is
print(json.dumps({
    "device": str(g.device),
    "state": len(g.get_state()),
    "allocated": torch.cuda.memory_allocated(),
}))
"""


def test_a_cuda_generator_is_on_the_planned_device(tmp_path: Path) -> None:
    """torch.Generator(device="cuda") answers the CUDA device and CUDA's 16-byte state, so a
    draw on ``generator.device`` is on the device (it was on the host, and not counted)."""
    script(tmp_path, GENERATOR_DEVICE)
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    assert _facts(done) == {"device": "cuda:0", "state": 16, "allocated": 1024 * 1024 * 4}


PARAMETER_GENERATOR = """
import copy, json, torch
model = torch.nn.Linear(256, 256).cuda()
ema = copy.deepcopy(model)
g = torch.Generator(device=next(ema.parameters()).device)
g.manual_seed(0)
noise = torch.rand(256, 256, device=next(model.parameters()).device, generator=g)
print(json.dumps({"allocated": torch.cuda.memory_allocated()}))
"""


def test_a_generator_made_on_a_parameters_device_draws_stand_ins(tmp_path: Path) -> None:
    """torch.Generator(device=param.device), as an EMA of a model on the GPU makes one, is
    made under plan (it raised "META device type not an accelerator") and draws a stand-in."""
    script(tmp_path, PARAMETER_GENERATOR)
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    weights = 2 * (256 * 256 + 256) * 4
    assert _facts(done)["allocated"] == weights + 256 * 256 * 4


MISMATCHED_GENERATORS = """
import sys, torch
if sys.argv[1] == "shuffle-on-default-cuda":  # a CPU generator drawing on the device
    torch.set_default_device("cuda")
    loader = torch.utils.data.DataLoader(list(range(100)), batch_size=10, shuffle=True)
    next(iter(loader))
elif sys.argv[1] == "cuda-generator-on-host":
    noise = torch.randn(4, generator=torch.Generator(device="cuda"))
else:  # each generator drawing where it lives, and a draw into the script's own meta
    g = torch.Generator(device="cuda")
    torch.nn.init.uniform_(torch.empty(4, 4, device="cuda"), generator=g)
    torch.nn.init.uniform_(torch.empty(4, 4), generator=torch.Generator())
    torch.nn.init.uniform_(torch.empty(4, 4, device="meta"), generator=torch.Generator())
    next(iter(torch.utils.data.DataLoader(list(range(100)), batch_size=10, shuffle=True)))
"""


@pytest.mark.parametrize(
    ("case", "line", "says"),
    [
        (
            "shuffle-on-default-cuda",
            6,
            "Expected a 'cuda' device type for generator but found 'cpu'",
        ),
        (
            "cuda-generator-on-host",
            8,
            "Expected a 'cpu' device type for generator but found 'cuda'",
        ),
        ("matched", None, None),
    ],
)
def test_a_draw_with_another_devices_generator_fails_as_on_a_gpu(
    tmp_path: Path, case: str, line: int | None, says: str | None
) -> None:
    """A draw given a generator of another device fails as CUDA's and the CPU's kernels fail
    (a DataLoader's shuffle under ``set_default_device("cuda")``, a CUDA generator drawing on
    the host), at the script's line; generators drawing where they live run."""
    path = script(tmp_path, MISMATCHED_GENERATORS)
    done = plan(tmp_path, "--json", "train.py", case)
    if says is None:
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 2
    assert json.loads(done.stdout)["failed"] == f"{path}:{line}: RuntimeError: {says}"


LAYERS = """
import json, torch
lstm = torch.nn.LSTM(128, 256, num_layers=2, batch_first=True).cuda()
out, _ = lstm(torch.randn(4, 32, 128, device="cuda"))
out.sum().backward()
encoder = torch.nn.TransformerEncoder(
    torch.nn.TransformerEncoderLayer(256, 4, batch_first=True), 2, enable_nested_tensor=True
).cuda().eval()
padding = torch.zeros(2, 16, dtype=torch.bool, device="cuda")
with torch.inference_mode():
    encoded = encoder(torch.randn(2, 16, 256, device="cuda"), src_key_padding_mask=padding)
conv = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3), torch.nn.BatchNorm2d(64)).cuda()
conv(torch.randn(8, 3, 64, 64, device="cuda")).mean().backward()
print(json.dumps({"encoded": list(encoded.shape), "lstm": list(out.shape)}))
"""


def test_recurrent_convolutional_and_inference_encoder_layers_plan(tmp_path: Path) -> None:
    """An LSTM trained, a convolution with batch norm trained, and a TransformerEncoder run
    with a padding mask under inference_mode all plan to the end with their shapes (the
    encoder's fused fast path, which reads the mask's values, is left for the regular one)."""
    script(tmp_path, LAYERS)
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    facts = _facts(done)
    assert facts["encoded"] == [2, 16, 256]
    assert facts["lstm"] == [4, 32, 256]


DEFAULT_TYPE = """
import json, torch
torch.set_default_tensor_type(torch.cuda.HalfTensor)
model = torch.nn.Linear(1024, 1024)
on_device = torch.cuda.memory_allocated()
torch.set_default_tensor_type(torch.FloatTensor)
host = torch.empty(4)
print(json.dumps({
    "dtype": str(model.weight.dtype), "on_device": on_device,
    "host": [str(host.dtype), host.device.type], "after": torch.cuda.memory_allocated(),
}))
"""


def test_a_cuda_default_tensor_type_builds_the_model_on_the_planned_device(
    tmp_path: Path,
) -> None:
    """set_default_tensor_type(torch.cuda.HalfTensor), as Meta's Llama reference builds its model,
    puts float16 parameters on the planned device; a CPU type puts tensors back on the host."""
    script(tmp_path, DEFAULT_TYPE)
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    facts = _facts(done)
    assert facts["dtype"] == "torch.float16"
    assert facts["on_device"] == 1024 * 1024 * 2 + 1024 * 2
    assert facts["host"] == ["torch.float32", "cpu"]
    assert facts["after"] == facts["on_device"]


SPARSE = """
import json, sys
import torch

emb = torch.nn.Embedding(100_000, 256, sparse=True)
before = torch.cuda.memory_allocated()
emb = emb.cuda()
weight = torch.cuda.memory_allocated() - before
opt = getattr(torch.optim, sys.argv[1])(emb.parameters(), lr=0.01)
built = torch.cuda.memory_allocated() - before - weight
idx = torch.randint(0, 100_000, (64, 32), device="cuda")
before = torch.cuda.memory_allocated()
emb(idx).sum().backward()
grad = emb.weight.grad
held = torch.cuda.memory_allocated() - before
opt.step()
stepped = torch.cuda.memory_allocated() - before
print(json.dumps({
    "layout": str(grad.layout), "indices": list(grad._indices().shape),
    "values": list(grad._values().shape), "held": held, "stepped": stepped, "weight": weight,
    "built": built,
    "coalesced": grad.coalesce()._nnz(), "distinct": idx.unique().numel(),
}), flush=True)
"""


@pytest.mark.parametrize(("optimizer", "copies"), [("SGD", 0), ("SparseAdam", 2), ("Adagrad", 1)])
def test_a_sparse_embedding_trains_with_its_gradient_s_entries_on_the_device(
    tmp_path: Path, optimizer: str, copies: int
) -> None:
    """``nn.Embedding(sparse=True)``'s gradient holds one entry per lookup, as CUDA makes it
    (indices ``(1, 2048)`` int64 and values ``(2048, 256)`` float32: 16 KiB + 2 MiB on the
    device); coalescing it keeps one per distinct index; each sparse optimizer steps and holds
    its dense state (SparseAdam two copies of the weight at its first step, Adagrad one when
    built, SGD none)."""
    script(tmp_path, SPARSE)
    done = plan(tmp_path, "train.py", optimizer)
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    assert facts["layout"] == "torch.sparse_coo"
    assert (facts["indices"], facts["values"]) == ([1, 2048], [2048, 256])
    assert facts["held"] == 2048 * 8 + 2048 * 256 * 4
    state = facts["built"] + facts["stepped"] - facts["held"]
    assert state == copies * facts["weight"]
    assert facts["coalesced"] == facts["distinct"] < 2048


GRAPH_CONVOLUTION = """
import json
import torch

torch.manual_seed(0)
adjacency = (torch.rand(1000, 500) < 0.1).float().to_sparse().to("cuda")
moved = torch.cuda.memory_allocated()
weight = torch.randn(500, 16, device="cuda", requires_grad=True)
out = torch.spmm(adjacency, weight)
print(json.dumps({
    "nnz": adjacency._nnz(), "moved": moved, "after": torch.cuda.memory_allocated(),
    "peak": torch.cuda.max_memory_allocated(), "shape": list(out.shape),
}), flush=True)
"""


def test_a_host_sparse_matrix_moved_to_the_device_multiplies_a_dense_one(tmp_path: Path) -> None:
    """A host COO matrix moved with ``.to("cuda")`` keeps its entries, and ``spmm`` by a dense
    matrix runs with CUDA's temporaries, where it had none and then failed on ``meta``."""
    script(tmp_path, GRAPH_CONVOLUTION)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    nnz = facts["nnz"]
    assert nnz > 40_000

    def block(nbytes: int) -> int:
        return -(-nbytes // 512) * 512

    # int64 indices (2 x nnz) and float32 values, each copied to the device
    assert facts["moved"] == block(2 * nnz * 8) + block(nnz * 4)
    # then the weight and the 1000 x 16 result
    assert facts["after"] == facts["moved"] + block(500 * 16 * 4) + block(1000 * 16 * 4)
    # inside: the zeroed tensor it adds into, the int32 CSR offsets, column indices and the
    # column-major result (the int32 row indices were freed before the column indices came)
    inside = block(1000 * 16 * 4) + block(1001 * 4) + block(nnz * 4) + block(1000 * 16 * 4)
    assert facts["peak"] == facts["after"] + inside
    assert facts["shape"] == [1000, 16]


CSR_ADJACENCY = """
import json
import torch

n = 1000
rows = torch.arange(n).repeat_interleave(4)
columns = (rows * 7 + torch.arange(4 * n) % 4 * 13) % n
edge_index = torch.stack([rows, columns]).to("cuda")
weight = torch.ones(edge_index.shape[1], device="cuda")
offsets = torch._convert_indices_from_coo_to_csr(edge_index[0], n)
adjacency = torch.sparse_csr_tensor(offsets, edge_index[1], weight, (n, n))
"""
"""A graph of 1,000 nodes with 4 edges each, as a CSR adjacency on the device (PyTorch
Geometric's ``SparseTensor`` layout)."""

GRAPH_SQUARED = (
    CSR_ADJACENCY
    + """
before = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
squared = adjacency @ adjacency
facts = {
    "nnz": squared._nnz(), "index": str(squared.crow_indices().dtype),
    "sum": squared.values().sum().item(), "after": torch.cuda.memory_allocated() - before,
    "peak": torch.cuda.max_memory_allocated() - before,
}
del squared
scores = torch.randn(4 * n, 64, device="cuda") @ torch.randn(64, 1, device="cuda")
picks = scores.view(-1).long() % n
unknown = torch.sparse_csr_tensor(offsets, picks, weight, (n, n))
facts["spread"] = (unknown @ unknown)._nnz()
print(json.dumps(facts), flush=True)
"""
)


def test_a_product_of_two_csr_matrices_holds_cudas_entries_and_temporaries(
    tmp_path: Path,
) -> None:
    """A graph's CSR adjacency squared (Graph U-Net's ``adj @ adj``) runs, where it failed on
    ``meta``: its entries and values are the CPU's where the indices are the script's own, its
    indices int32 as cuSPARSE leaves them, with ``spgemm``'s int32 copies inside; with
    unknown indices, the entries of an even spread."""
    script(tmp_path, GRAPH_SQUARED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    import torch  # the CPU's own product of the same graph

    n = 1000
    rows = torch.arange(n).repeat_interleave(4)
    columns = (rows * 7 + torch.arange(4 * n) % 4 * 13) % n
    dense = torch.zeros(n, n)
    dense[rows, columns] = 1.0
    squared = int(((dense @ dense) != 0).sum())
    assert facts["nnz"] == squared
    assert facts["sum"] == 16 * n
    assert facts["index"] == "torch.int32"

    def block(nbytes: int) -> int:
        return -(-nbytes // 512) * 512

    # the result: int32 row offsets and column indices, float32 values
    assert facts["after"] == block((n + 1) * 4) + 2 * block(squared * 4)
    # inside: the zeros' int64 offsets and both matrices' int32 offsets and column indices
    copies = 2 * (block((n + 1) * 4) + block(4 * n * 4))
    assert facts["peak"] == facts["after"] + block((n + 1) * 8) + copies
    assert facts["spread"] == 4 * n * 4 * n // n


GRAPH_CONVOLUTION_CSR = (
    CSR_ADJACENCY
    + """
features = 16
x = torch.randn(n, features, device="cuda", requires_grad=True)
before = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
out = torch.sparse.mm(adjacency, x)
facts = {
    "after": torch.cuda.memory_allocated() - before,
    "peak": torch.cuda.max_memory_allocated() - before, "shape": list(out.shape),
}
torch.cuda.reset_peak_memory_stats()
mixed = adjacency @ x.t().contiguous().t()
facts["mixed"] = torch.cuda.memory_allocated() - before
facts["mixed_peak"] = torch.cuda.max_memory_allocated() - before
(out.sum() + mixed.sum()).backward()
facts["grad"] = list(x.grad.shape)
bias = torch.zeros(features, device="cuda")
base = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
biased = torch.addmm(bias, adjacency, x.detach())
facts["biased"] = torch.cuda.max_memory_allocated() - base
print(json.dumps(facts), flush=True)
"""
)


def test_a_csr_adjacency_times_features_runs_forward_and_backward(tmp_path: Path) -> None:
    """A CSR adjacency times dense features (``torch.sparse.mm``, ``@``, ``addmm`` with a bias)
    and its backward run, where ``meta`` stopped them: the zeros it adds into and the result,
    no int32 copies of the indices, a column-major operand read as it is."""
    script(tmp_path, GRAPH_CONVOLUTION_CSR)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    product = -(-1000 * 16 * 4 // 512) * 512
    assert facts["shape"] == [1000, 16]
    # the 1000 x 16 result, with the zeros torch.sparse.mm made and freed alongside it
    assert facts["after"] == product
    assert facts["peak"] == 2 * product
    # a column-major operand (its row-major copy freed) takes no contiguous copy inside
    assert facts["mixed"] == 2 * product
    # inside: its row-major copy, the zeros and the result
    assert facts["mixed_peak"] == facts["after"] + 3 * product
    assert facts["grad"] == [1000, 16]
    # addmm of a bias: its result alone (the bias is copied into it, no zeros)
    assert facts["biased"] == product
