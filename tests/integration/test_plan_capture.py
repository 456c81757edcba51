"""Capture end to end on real ``torch.nn`` models, under ``memforensics plan``.

A small transformer trained with AdamW and bf16 autocast, with ``memforensics.install()`` and
``mf.track()`` in the script, runs through the real cuda adapter against the planned device
until a leak runs it out of memory. The script writes what it holds at each dump from its own
tensors (``numel() * element_size()`` of every parameter, gradient and optimizer state), so
the truth comes from PyTorch's objects, not from memforensics.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from planned import plan, script

from memforensics.analysis import load_dump, summarize, what_filled

pytestmark = [pytest.mark.integration, pytest.mark.torch]

MiB = 1 << 20
KINDS = ("parameter", "gradient", "optimizer_state")

TRAIN = """
import json, sys
import memforensics, torch

mf = memforensics.install(steps=2, max_windows=1, out_dir="dumps", near_oom_every=1)
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Embedding(1000, 256),
    torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True),
    torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True),
    torch.nn.Linear(256, 1000),
).cuda()  # MOVE
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
mf.track(model=model, optimizer=opt)


def held(name):
    kinds = {"parameter": 0, "gradient": 0, "optimizer_state": 0}
    for p in model.parameters():
        kinds["parameter"] += p.numel() * p.element_size()
        if p.grad is not None:
            kinds["gradient"] += p.grad.numel() * p.grad.element_size()
        for value in opt.state.get(p, {}).values():
            if torch.is_tensor(value) and value.dim():
                kinds["optimizer_state"] += value.numel() * value.element_size()
    with open(name, "w") as f:
        json.dump(kinds, f)


kept = []
try:
    for step in range(1000):
        with mf.step(step):
            opt.zero_grad(set_to_none=False)
            x = torch.randint(0, 1000, (8, 128), device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(x)
            loss = logits.float().logsumexp(-1).mean()
            loss.backward()
            opt.step()
            kept.append(torch.empty(16 << 20, dtype=torch.uint8, device="cuda"))  # LEAK
        held(f"held-step{step}.json")
except torch.cuda.OutOfMemoryError:
    held("held-oom.json")
    raise
"""


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(TRAIN.splitlines()) if marker in text)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The script planned once on a 1 GiB device: it leaks 16 MiB a step until it runs out."""
    folder = tmp_path_factory.mktemp("planned-capture")
    script(folder, TRAIN)
    done = plan(folder, "--device-memory", "1GiB", "train.py")
    assert done.returncode == 1, done.stderr
    return folder


def _dumps(folder: Path) -> dict[str, Path]:
    found = {p.parent.name.split("-")[0]: p for p in (folder / "dumps").glob("*/*.pickle")}
    assert set(found) == {"steps0", "near", "oom"}, found
    return {"window": found["steps0"], "near-oom": found["near"], "oom": found["oom"]}


def _held(folder: Path, which: str, dump: Path) -> dict[str, int]:
    """What the script held at ``dump``: after step 1 for the window, at the OOM for the OOM."""
    if which == "oom":
        return dict(json.loads((folder / "held-oom.json").read_text()))
    step = json.loads(dump.with_suffix(".json").read_text())["step"]
    if which == "window":
        step = 1
    return dict(json.loads((folder / f"held-step{step}.json").read_text()))


def _blocks(dump: Path) -> dict[int, dict[str, Any]]:
    """The snapshot's allocated blocks by address."""
    snapshot = load_dump(dump).snapshot
    return {
        block["address"]: block
        for segment in snapshot["segments"]
        for block in _with_addresses(segment)
        if block["state"] == "active_allocated"
    }


def _with_addresses(segment: dict[str, Any]) -> list[dict[str, Any]]:
    address, out = segment["address"], []
    for block in segment["blocks"]:
        out.append({**block, "address": address})
        address += block["size"]
    return out


def test_every_dump_lists_the_tensors_the_model_and_optimizer_hold(run: Path) -> None:
    """The window, near-OOM and OOM dumps list the tracked tensors: their bytes by kind are what
    the script's own tensors add up to, and each sits in an allocated block of the snapshot."""
    for which, dump in _dumps(run).items():
        sidecar = json.loads(dump.with_suffix(".json").read_text())
        assert sidecar["predicted"]["device_total_bytes"] == 1 << 30
        listed = {kind: 0 for kind in KINDS}
        blocks = _blocks(dump)
        for entry in sidecar["tensors"]:
            listed[entry["kind"]] += entry["bytes"]
            block = blocks[entry["address"]]
            assert entry["offset"] + entry["bytes"] <= block["size"], (which, entry)
        assert listed == _held(run, which, dump), which
        assert listed["gradient"] == listed["parameter"]
        assert listed["optimizer_state"] == 2 * listed["parameter"]


def test_the_listed_addresses_are_the_blocks_pytorch_made_for_them(run: Path) -> None:
    """Each parameter's block was allocated by the script's move to the device, each AdamW
    state's by torch.optim, each gradient's on backward's thread (no Python frames)."""
    dump = _dumps(run)["window"]
    sidecar = json.loads(dump.with_suffix(".json").read_text())
    blocks = _blocks(dump)
    move = _line("# MOVE") + 1
    assert {entry["kind"] for entry in sidecar["tensors"]} == set(KINDS)
    for entry in sidecar["tensors"]:
        frames = blocks[entry["address"]].get("frames") or []
        places = [(f["filename"], f["line"]) for f in frames]
        if entry["kind"] == "parameter":
            assert (str(run / "train.py"), move) in places, entry
        elif entry["kind"] == "optimizer_state":
            assert any("/torch/optim/" in name for name, _ in places), entry
        else:
            assert not places, entry


def test_every_tracked_byte_is_known_from_the_process(run: Path) -> None:
    """Analysis labels every tracked block with its true kind at confidence 1.00, and each
    kind's known bytes are the blocks holding that kind's tensors."""
    for which, dump in _dumps(run).items():
        sidecar = json.loads(dump.with_suffix(".json").read_text())
        truth = {entry["address"]: entry["kind"] for entry in sidecar["tensors"]}
        filled = what_filled(load_dump(dump))
        live = [a for a in filled.lifetimes.at_snapshot() if a.addr in truth]
        assert truth
        assert {a.addr for a in live} == set(truth), which
        assert all(a.kind == truth[a.addr] and a.confidence == 1.0 for a in live), which
        by_kind = {k.kind: k.known_bytes for k in filled.kinds if k.known_bytes}
        expected: dict[str, int] = {}
        for a in live:
            expected[a.kind] = expected.get(a.kind, 0) + a.size
        assert by_kind == expected, which
        assert summarize(load_dump(dump)).known is not None


def test_inferred_kinds_agree_with_what_the_process_knows(run: Path, tmp_path: Path) -> None:
    """With the sidecar's tensors left out, the kinds inferred from the stacks alone match the
    known kinds on at least 95 % of the tracked bytes, in every dump of a real model."""
    for which, dump in _dumps(run).items():
        sidecar = json.loads(dump.with_suffix(".json").read_text())
        truth = {entry["address"]: entry["kind"] for entry in sidecar["tensors"]}
        bare = tmp_path / which / dump.name
        bare.parent.mkdir()
        shutil.copy(dump, bare)
        bare.with_suffix(".json").write_text(json.dumps({**sidecar, "tensors": None}))
        filled = what_filled(load_dump(bare))
        live = [a for a in filled.lifetimes.at_snapshot() if a.addr in truth]
        assert live
        assert all(a.known is None for a in live)
        right = sum(a.size for a in live if a.kind == truth[a.addr])
        assert right >= 0.95 * sum(a.size for a in live), which


def test_the_near_oom_dump_comes_before_the_oom_and_both_name_the_leak(run: Path) -> None:
    """The leak nears the limit first (a near-OOM dump), then runs out (an OOM dump): both
    are predicted, and the diagnosis of each names the leaking line's growth."""
    dumps = _dumps(run)
    near, oom = (json.loads(dumps[k].with_suffix(".json").read_text()) for k in ("near-oom", "oom"))
    assert near["step"] < oom["step"]
    leak = f"train.py:{_line('# LEAK') + 1}"
    for which in ("near-oom", "oom"):
        summary = summarize(load_dump(dumps[which]))
        assert summary.predicted
        assert summary.diagnosis is not None
        top = summary.diagnosis.causes[0]
        assert top.name == "growth", which
        assert any(leak in site for site in top.sites), (which, top.sites)


ADDRESSES = """
import json, torch
x = torch.empty(1024, 1024, device="cuda")
y = torch.empty(1024, 1024, device="cuda")
row = x[3]
on_host = torch.empty(4)
mine = torch.empty(4, device="meta")
blocks = [
    segment["address"] + sum(b["size"] for b in segment["blocks"][:i])
    for segment in torch.cuda.memory._snapshot()["segments"]
    for i, b in enumerate(segment["blocks"])
    if b["state"] == "active_allocated"
]
print(json.dumps({
    "x": x.data_ptr(), "y": y.data_ptr(), "row": row.data_ptr(),
    "storage": x.untyped_storage().data_ptr(), "blocks": blocks,
    "devices": [x.get_device(), row.get_device(), on_host.get_device(), mine.get_device()],
}))
"""


def test_stand_ins_answer_their_address_and_device_as_cuda_tensors_do(tmp_path: Path) -> None:
    """data_ptr() is the start of the tensor's block on the planned device plus its offset,
    distinct tensors have distinct addresses, get_device() is 0; CPU tensors and the script's
    own meta tensors answer as before."""
    script(tmp_path, ADDRESSES)
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stderr.strip().splitlines()[-1])
    assert facts["x"] == facts["storage"]
    assert facts["x"] in facts["blocks"]
    assert facts["y"] in facts["blocks"]
    assert facts["x"] != facts["y"]
    assert facts["row"] == facts["x"] + 3 * 1024 * 4
    assert facts["devices"] == [0, 0, -1, -1]  # the script's own meta tensor is not on it


CHOOSING_BY_DEVICE = """
import json, torch
from choose import project
model = torch.nn.Linear(1024, 1024).cuda()
x = torch.randn(16, 1024, device="cuda")
mine = torch.empty(4, device="meta")
facts = {
    "stand_in": [str(x.device), x.is_cuda, str(next(model.parameters()).device)],
    "mine": [str(mine.device), mine.is_cuda],
}
facts["projected"] = project(x.half(), torch.randn(1024, 1024, device=x.device).half())
before = torch.cuda.memory_allocated()
for p in model.parameters():
    if p.device.type == "cuda":
        p.data = p.data.to("cpu")
facts["offloaded"] = before - torch.cuda.memory_allocated()
print(json.dumps(facts))
"""

LAZY_CACHE = """
import json, torch

class Rotary(torch.nn.Module):
    \"\"\"torchtune's RoPE: the cache is built now unless the module is made on ``meta``.\"\"\"
    def __init__(self, dim, positions):
        super().__init__()
        self.dim, self.positions, self.built = dim, positions, False
        freqs = 1.0 / (10_000 ** (torch.arange(0, dim, 2).float() / dim))
        if freqs.is_meta:
            return  # built later, once the weights are real
        angles = torch.outer(torch.arange(positions, device=freqs.device).float(), freqs)
        self.register_buffer("cache", torch.stack([angles.cos(), angles.sin()], -1))
        self.built = True

    def forward(self, x):
        if not self.built:
            raise RuntimeError("RoPE cache is not built")
        return x * self.cache[: x.shape[0], 0, 0]

with torch.device("cuda"):
    rotary = Rotary(128, 4096)
with torch.device("meta"):
    later = Rotary(128, 4096)
rotary(torch.ones(8, device="cuda"))
built = [rotary.built, later.built]
print(json.dumps({"built": built, "allocated": torch.cuda.memory_allocated()}))
"""


def test_a_stand_in_is_not_meta_to_the_script(tmp_path: Path) -> None:
    """A stand-in's ``is_meta`` is False to the script, as a CUDA tensor's is, so a module that
    defers its work for ``meta`` tensors does it now (torchtune's RoPE raised "RoPE cache is not
    built"); the script's own ``meta`` tensors still say True."""
    script(tmp_path, LAZY_CACHE)
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(next(line for line in done.stderr.splitlines() if line.startswith("{")))
    assert facts == {"built": [True, False], "allocated": 4096 * 64 * 2 * 4}


SUBCLASS_READ = """
import torch

class Packed(torch.nn.Parameter):
    def __new__(cls, data, requires_grad=False):
        return torch.Tensor._make_subclass(cls, data, requires_grad)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})

layer = torch.nn.Linear(64, 64, device="cuda")
layer.weight = Packed(torch.empty(64, 64, device="cuda", dtype=torch.uint8))
layer.to("cuda")
print("moved", type(layer.weight).__name__, layer.weight.device)
"""


def test_a_subclass_read_of_a_stand_in_answers_its_first_asker(tmp_path: Path) -> None:
    """A parameter subclass whose ``__torch_function__`` hands reads to torch's (bitsandbytes'
    ``Params4bit``) gets torch's getter's answer to the plan's own question (is it ``meta``),
    not the script's: its module moves to the device and keeps its class."""
    script(tmp_path, SUBCLASS_READ)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "moved Packed cuda:0" in done.stdout


CHOOSE = """
import torch
def project(a, b):
    if a.device.type == "cuda":
        out = torch.mm(a, b)  # CUDA: half inputs, a half product
    else:
        out = torch.mm(a.float(), b.float())  # elsewhere: upcast copies, a float product
    return out.element_size()
"""


def test_the_script_and_its_libraries_see_stand_ins_on_cuda(tmp_path: Path) -> None:
    """A stand-in's .device is cuda:0 (is_cuda True) to the script and to a
    library it imports, so code that chooses by device takes its CUDA path: a library's
    CUDA-only product, an offload of what is on "cuda" (which then frees it); the script's own
    meta tensors still say meta."""
    script(tmp_path, CHOOSING_BY_DEVICE)
    (tmp_path / "choose.py").write_text(CHOOSE)
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(next(line for line in done.stderr.splitlines() if line.startswith("{")))
    assert facts["stand_in"] == ["cuda:0", True, "cuda:0"]
    assert facts["mine"] == ["meta", False]
    assert facts["projected"] == 2
    assert facts["offloaded"] == 1024 * 1024 * 4 + 1024 * 4
