"""The real ``memforensics plan`` console command on small scripts of our own: what it prints,
the files it leaves, its exit status, and a predicted OOM's dump."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from planned import plan, script

from memforensics.analysis import explain

pytestmark = [pytest.mark.integration, pytest.mark.torch]

SRC = Path(__file__).resolve().parents[2] / "src"
MiB = 1 << 20


LEAK = """
import torch
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).cuda()
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(256, 1024, device="cuda")
kept = []
for step in range(int(__import__("sys").argv[1])):
    out = model(x)
    kept.append(out)  # the leak: every step's output stays referenced
    out.sum().backward()
    opt.step()
    opt.zero_grad()
print("trained")
"""


def test_a_run_that_fits_exits_0_and_prints_one_json_object(tmp_path: Path) -> None:
    """--json prints one object (the script's own output goes to stderr), exit 0, and the final
    snapshot it names exists with a sidecar marking it predicted."""
    script(tmp_path, LEAK)
    done = plan(tmp_path, "--json", "train.py", "2")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["fits"] is True
    assert "trained" in done.stderr
    # 4 weights of 4 MiB, their grads and two Adam states: at least 16 MiB each kind
    assert doc["peak_allocated_bytes"] >= 4 * 16 * MiB
    assert doc["peak_reserved_bytes"] >= doc["peak_allocated_bytes"]
    snapshot = Path(tmp_path, doc["snapshots"][0])
    assert snapshot.is_file()
    sidecar = json.loads(snapshot.with_suffix(".json").read_text())
    assert sidecar["predicted"]["device_total_bytes"] == 80 << 30
    assert sidecar["predicted"]["capability"] == "9.0"


def test_the_final_snapshot_explains_the_peak_the_plan_printed(tmp_path: Path) -> None:
    """Where the script dumps no snapshot, the one the plan writes holds a trace, and summary of
    it finds the peak the plan printed (not only what outlived the script)."""
    script(tmp_path, LEAK + "del model, opt, x, kept, out\n")
    doc = json.loads(plan(tmp_path, "--json", "train.py", "2").stdout)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    summary = subprocess.run(
        [sys.executable, "-m", "memforensics", "summary", "--json", doc["snapshots"][0]],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    found = json.loads(summary.stdout)
    assert found["allocated_bytes"] < doc["peak_allocated_bytes"] // 2  # the script freed its model
    assert found["peak"]["live_bytes"] == doc["peak_allocated_bytes"]


SHORT_HISTORY = """
import pickle
import torch
big = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")  # the peak, then gone
del big
torch.cuda.memory._record_memory_history(max_entries=40)  # a short ring, as a real run keeps
kept = [torch.empty(1024, device="cuda") for _ in range(50)]
torch.cuda.memory._dump_snapshot("short.pickle")
with open("by_hand.pickle", "wb") as f:
    pickle.dump(torch.cuda.memory._snapshot(), f)
"""


def test_a_dump_whose_trace_began_after_the_peak_says_the_plans_peak(tmp_path: Path) -> None:
    """A planned dump whose short history no longer holds the peak still gives summary the
    peak plan printed, with its sidecar or pickled by hand, and the cause line says the
    trace's peak is only the trace's."""
    script(tmp_path, SHORT_HISTORY)
    doc = json.loads(plan(tmp_path, "--json", "train.py").stdout)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    for name in ("short.pickle", "by_hand.pickle"):
        found = json.loads(subprocess.run(
            [sys.executable, "-m", "memforensics", "summary", "--json", "--no-cache", name],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=True,
        ).stdout)  # fmt: skip
        assert found["allocator_peak_bytes"] == doc["peak_allocated_bytes"], name
        assert found["peak"]["live_bytes"] < doc["peak_allocated_bytes"] // 2, name
    text = subprocess.run(
        [sys.executable, "-m", "memforensics", "summary", "--no-cache", "short.pickle"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    assert "peak in the trace" in text
    assert "peak            64.00 MiB" in text


def test_a_leak_grows_the_peak_with_the_steps(tmp_path: Path) -> None:
    """The leaked outputs (1 MiB each) raise the predicted peak by about a MiB per extra step."""
    script(tmp_path, LEAK)
    few = json.loads(plan(tmp_path, "--json", "train.py", "2").stdout)
    many = json.loads(plan(tmp_path, "--json", "train.py", "12").stdout)
    grown = many["peak_allocated_bytes"] - few["peak_allocated_bytes"]
    assert 10 * MiB <= grown <= 11 * MiB


def test_a_predicted_oom_exits_1_and_leaves_a_predicted_oom_dump(tmp_path: Path) -> None:
    """Under a small --device-memory the leak runs out: exit 1, PyTorch's message, and an OOM
    dump whose sidecar is predicted and whose figures show the request could not fit."""
    script(tmp_path, LEAK)
    done = plan(tmp_path, "--device-memory", "640MiB", "--context-memory", "128MiB",
                 "train.py", "1000")  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "CUDA out of memory. Tried to allocate" in done.stdout
    dumps = sorted((tmp_path / "memforensics-plan" / "oom").glob("*.pickle"))
    assert len(dumps) == 1
    named = [line for line in done.stdout.splitlines() if line.startswith("Predicted snapshot:")]
    assert len(named) == 1  # named once, though the run saw it by two paths
    diagnosis = explain(dumps[0]).diagnosis
    assert diagnosis is not None
    said = " ".join(done.stdout.split())  # the text wraps at 80 columns: compare the words
    assert f"cause: {' '.join(diagnosis.headline.split())}" in said  # summary's own cause
    sidecar = json.loads(dumps[0].with_suffix(".json").read_text())
    assert sidecar["predicted"]["device_total_bytes"] == 640 * MiB
    oom = sidecar["oom"]
    assert oom["device_total_bytes"] == 640 * MiB
    snapshot = pickle.loads(dumps[0].read_bytes())
    reserved = sum(s["total_size"] for s in snapshot["segments"])
    assert reserved + 128 * MiB + oom["allocation_bytes"] > 640 * MiB
    assert oom["device_free_bytes"] == 640 * MiB - 128 * MiB - reserved


TRACKED_LEAK = """
import sys
import memforensics, torch
mf = memforensics.install(steps=2, every=4, keep_last=None)
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).cuda()
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(256, 1024, device="cuda")
kept = []
for step in range(int(sys.argv[1])):
    with mf.step(step):
        out = model(x)
        kept.append(out * 2)  # the leak: a tensor of every step stays referenced
        out.sum().backward()
        opt.step()
        opt.zero_grad()
"""


def test_a_predicted_oom_names_the_leak_as_its_cause(tmp_path: Path) -> None:
    """A script that records steps and tracks its model runs into a small planned device: the
    predicted OOM's cause, in plan's output and in summary of its dump, is the leaking line's
    growth."""
    script(tmp_path, TRACKED_LEAK)
    done = plan(tmp_path, "--device-memory", "704MiB", "--context-memory", "128MiB",
                 "train.py", "1000")  # fmt: skip
    assert done.returncode == 1, done.stderr
    [dump] = (tmp_path / "memforensics" / "oom").glob("*.pickle")
    summary = explain(dump)  # what `summary` of the dump prints: the dump and its windows
    assert summary.diagnosis is not None
    top = summary.diagnosis.causes[0]
    assert top.name == "growth"
    assert any("train.py:12" in site for site in top.sites)
    said = " ".join(done.stdout.split())  # the text wraps at 80 columns: compare the words
    assert f"cause: {' '.join(summary.diagnosis.headline.split())}" in said


def test_a_failing_script_exits_2_with_its_traceback(tmp_path: Path) -> None:
    """A script that raises something other than an OOM: exit 2, its traceback on stderr."""
    script(tmp_path, "raise ValueError('the script broke')\n")
    done = plan(tmp_path, "train.py")
    assert done.returncode == 2
    assert "ValueError: the script broke" in done.stderr


def test_bad_options_are_usage_errors(tmp_path: Path) -> None:
    """A capability that is not MAJOR.MINOR, or no script, exits 2 with one line."""
    script(tmp_path, "pass\n")
    assert plan(tmp_path, "--device-capability", "nine", "train.py").returncode == 2
    assert plan(tmp_path).returncode == 2
    assert plan(tmp_path, "missing.py").returncode == 2


def test_a_module_runs_with_dash_m(tmp_path: Path) -> None:
    """-m MODULE plans a module found from the working folder, with its arguments."""
    script(tmp_path, LEAK, name="trainmod.py")
    done = plan(tmp_path, "--json", "-m", "trainmod", "1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fits"] is True


def test_a_console_script_on_path_is_planned_by_its_command_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`plan mftrain 16` plans the Python console script `mftrain` on PATH (as `yolo train`
    is typed), with its arguments: 16 MiB of float32 on the device, and nothing more."""
    folder = tmp_path / "bin"
    folder.mkdir()
    tool = folder / "mftrain"
    body = "import sys, torch\nx = torch.empty(int(sys.argv[1]) << 18, device='cuda')\n"
    tool.write_text(f"#!{sys.executable}\n{body}")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    done = plan(tmp_path, "--json", "mftrain", "16")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["peak_allocated_bytes"] == 16 * MiB


READS = """
import torch
x = torch.randn(1000, 100, device="cuda")
loss = (x * 2).sum()
print(f"loss {loss.item()} {loss:.3f} {x.tolist()[0][0]}")
kept = x[x > 0]
print(tuple(kept.shape), tuple(torch.nonzero(x).shape))
double = torch.compile(lambda t: t * 2)
print(tuple(double(x).shape))
"""


def test_reading_values_bounding_shapes_and_compiling_each_warn_once_naming_where(
    tmp_path: Path,
) -> None:
    """Unknown floating-point values read as the made-up loss (10 before any training), masks
    select every element (the upper bound), torch.compile runs Inductor's graphs unfused: the
    run fits, and each difference is said once with the script's file and line."""
    script(tmp_path, READS)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "loss 10.0 10.000 10.0" in done.stdout
    assert "(100000,) (100000, 2)" in done.stdout
    assert "(1000, 100)" in done.stdout
    path = str(tmp_path / "train.py")
    lines = [line for line in done.stderr.splitlines() if line.startswith("memforensics plan:")]
    assert len(lines) == 3
    assert "are made up in a plan" in lines[0]
    assert f"(first at {path}:5)" in lines[0]
    assert f"upper bound in a plan (first at {path}:6)" in lines[1]
    assert "graphs unfused in a plan" in lines[2]
    assert f"{path}:9" in lines[2]


def test_init_process_group_alone_plans_a_world_of_one(tmp_path: Path) -> None:
    """init_process_group("nccl") with no world given: rank 0 of 1 on the fake group, which
    answers the backend named, no NCCL."""
    script(
        tmp_path,
        "import torch.distributed as dist\ndist.init_process_group('nccl')\n"
        "print(dist.get_rank(), dist.get_world_size(), dist.get_backend())\n",
    )
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    assert "0 1 nccl" in done.stderr
    answer = json.loads(done.stdout)
    assert (answer["rank"], answer["world_size"], answer["nccl_bytes"]) == (0, 1, 0)


TRANSFORMER = Path(__file__).parent / "scripts" / "plan_transformer.py"


def test_a_transformer_with_adamw_and_bf16_autocast_plans_as_cuda_runs_it(tmp_path: Path) -> None:
    """autocast("cuda") casts as on a GPU (bf16 logits, float32 loss, bf16 weight copies), the
    attention takes flash attention (no B·H·S² scores), AdamW takes CUDA's foreach path, and
    what stays allocated is the weights, AdamW's two states, the logits and the workspaces."""
    done = plan(tmp_path, "--device-capability", "8.0", str(TRANSFORMER))
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[0])
    assert facts["logits_dtype"] == "torch.bfloat16"
    assert facts["loss_dtype"] == "torch.float32"
    snapshot = pickle.loads((tmp_path / "tf.pickle").read_bytes())
    trace = snapshot["device_traces"][0]
    sizes = {e["size"] for e in trace if e["action"] == "alloc"}
    assert set(facts["weight_bf16_bytes"]) <= sizes
    # no scores in the forward (backward's reductions stage buffers that may share their size)
    forward = {e["size"] for e in trace if e["action"] == "alloc" and e["frames"]}
    assert not forward & set(facts["scores_bytes"])
    frames = {f["name"] for e in trace for f in e["frames"]}
    assert "_multi_tensor_adam" in frames
    workspaces = 2 * 8_519_680
    floor = 3 * facts["param_bytes"] + workspaces + facts["logits_bytes"]
    assert floor <= facts["allocated"] <= floor + 2 * MiB


BATCHES = """
import argparse
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=1)
parser.add_argument("--steps", type=int, default=2)
args = parser.parse_args()
for _ in range(args.steps):
    acts = [torch.empty(args.batch_size, 1 << 20, device="cuda") for _ in range(3)]
    del acts
"""


def test_vary_finds_the_largest_batch_that_fits_as_each_run_alone_does(tmp_path: Path) -> None:
    """--vary batch-size plans each value in its own process: every row matches planning that
    value alone, and the largest value that fits is the largest whose lone run fits."""
    script(tmp_path, BATCHES)
    device = ("--device-memory", "1GiB", "--context-memory", "512MiB")
    done = plan(tmp_path, *device, "--json", "--jobs", "2", "--vary", "batch-size=16,48",
                 "train.py", "--batch-size", "4")  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    alone = {}
    for value in ("16", "48"):
        one = plan(tmp_path, *device, "--json", "train.py", "--batch-size", value)
        alone[value] = json.loads(one.stdout)
    for row in doc["rows"]:
        lone = alone[row["value"]]
        assert row["fits"] == lone["fits"]
        assert row["peak_reserved_bytes"] == lone["peak_reserved_bytes"]
        assert row["peak_allocated_bytes"] == lone["peak_allocated_bytes"]
    fitting = [int(v) for v, lone in alone.items() if lone["fits"]]
    assert doc["largest"] == str(max(fitting))
    assert doc["largest_expandable"] is not None


MOVE = """
import json, weakref
import torch
model = torch.nn.Linear(1024, 1024)
weight = model.weight
cpu_storage = weakref.ref(weight.untyped_storage())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model.to("cuda")
big = torch.empty(1 << 30, device="cuda")  # 4 GiB: never on the host
print(json.dumps({
    "same_parameter": model.weight is weight and opt.param_groups[0]["params"][0] is weight,
    "cpu_storage_released": cpu_storage() is None,
    "weight_on_host": weight.untyped_storage().device.type == "cpu",
    "big_on_host": big.untyped_storage().device.type == "cpu",
    "allocated": torch.cuda.memory_allocated(),
}))
"""


def test_a_model_moved_keeps_its_parameters_and_releases_their_cpu_storage(
    tmp_path: Path,
) -> None:
    """.to("cuda") keeps each parameter's identity (the optimizer's too) and frees its CPU
    storage; a tensor made on "cuda" never has host memory, only the model's block."""
    script(tmp_path, MOVE)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[0])
    assert facts["same_parameter"] is True
    assert facts["cpu_storage_released"] is True
    assert facts["weight_on_host"] is False
    assert facts["big_on_host"] is False
    assert facts["allocated"] >= (1 << 32) + 1024 * 1024 * 4


INSTALLED = """
import memforensics, torch
mf = memforensics.install(out_dir="mine", steps=2)
print("backend", mf.backend.name, "observer", mf.oom_attached, flush=True)
model = torch.nn.Linear(1024, 1024).cuda()
kept = []
for step in range(100000):
    with mf.step(step):
        kept.append(model(torch.randn(256, 1024, device="cuda")))
"""


def test_install_inside_the_script_captures_through_the_real_cuda_adapter(tmp_path: Path) -> None:
    """memforensics.install() in a planned script takes the real cuda adapter, attaches its OOM
    observer to the planned device, writes its step window and the predicted OOM dump into its
    own out_dir, each with a predicted sidecar."""
    script(tmp_path, INSTALLED)
    done = plan(tmp_path, "--device-memory", "1GiB", "train.py")
    assert done.returncode == 1, done.stderr
    assert "backend cuda observer True" in done.stdout
    ooms = sorted((tmp_path / "mine" / "oom").glob("*.pickle"))
    assert len(ooms) == 1
    windows = sorted((tmp_path / "mine").glob("steps*/*.pickle"))
    assert windows
    for dump in (*ooms, *windows):
        sidecar = json.loads(dump.with_suffix(".json").read_text())
        assert sidecar["predicted"]["device_total_bytes"] == 1 << 30
    oom = json.loads(ooms[0].with_suffix(".json").read_text())["oom"]
    assert oom["device_total_bytes"] == 1 << 30


META_INIT = """
import json, sys
import torch
how = sys.argv[1]
layers = lambda: torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)])
if how == "cuda":
    model = layers().to("cuda")
    before = 0
else:
    with torch.device("meta"):
        model = layers()
    before = torch.cuda.memory_allocated()
    model.to_empty(device="cuda")
x = torch.randn(64, 1024, device="cuda")
model(x).sum().backward()
print(json.dumps({"before": before}))
"""


def test_a_model_built_on_meta_then_to_empty_plans_as_one_built_on_cuda(tmp_path: Path) -> None:
    """A model built under torch.device("meta") holds nothing on the device until to_empty puts
    it there; then the run's peak allocated and reserved are those of building it on cuda."""
    script(tmp_path, META_INIT)
    planned = {}
    for how in ("meta", "cuda"):
        done = plan(tmp_path, "--json", "train.py", how)
        assert done.returncode == 0, done.stderr
        facts = json.loads(done.stderr.strip().splitlines()[-1])
        planned[how] = (json.loads(done.stdout), facts)
    (meta, meta_facts), (cuda, _) = planned["meta"], planned["cuda"]
    assert meta_facts == {"before": 0}
    assert meta["peak_allocated_bytes"] == cuda["peak_allocated_bytes"]
    assert meta["peak_reserved_bytes"] == cuda["peak_reserved_bytes"]
    assert cuda["peak_allocated_bytes"] >= 8 * 4 * MiB * 2  # weights and their gradients


GHOSTS = """
import json
import torch

def empty_weights(build):
    # what accelerate's init_empty_weights does: each parameter sent to meta as it registers
    register = torch.nn.Module.register_parameter
    def on_meta(module, name, param):
        register(module, name, param)
        if param is not None:
            kept = module._parameters[name]
            module._parameters[name] = torch.nn.Parameter(
                kept.to(torch.device("meta")), requires_grad=param.requires_grad)
    torch.nn.Module.register_parameter = on_meta
    try:
        return build()
    finally:
        torch.nn.Module.register_parameter = register

facts = {}
model = empty_weights(lambda: torch.nn.Linear(4096, 4096))
torch.set_default_device("meta")
other = torch.nn.Linear(4096, 4096)
torch.set_default_device(None)
made = torch.empty(4096, 4096, device="meta")
derived = (made @ made.t()).relu()[:10].contiguous()
alike = torch.empty(1024, 1024, device=model.weight.device)
facts["ghosts"] = torch.cuda.memory_allocated()
# what accelerate's set_module_tensor_to_device does with a loaded value
loaded = torch.nn.Linear(4096, 4096).state_dict()
for name, value in loaded.items():
    model._parameters[name] = torch.nn.Parameter(value.to("cuda"))
facts["loaded"] = torch.cuda.memory_allocated()
beside = torch.empty(1024, 1024, device=model.weight.device)
facts["beside"] = torch.cuda.memory_allocated() - facts["loaded"]
del beside
model.to("meta")
facts["sent_back"] = torch.cuda.memory_allocated()
torch.set_default_device("cuda")
on_cuda = torch.empty(1024, 1024)
on_meta = torch.empty(1024, 1024, device="meta")
torch.set_default_device(None)
facts["default_cuda"] = torch.cuda.memory_allocated()
print(json.dumps(facts))
"""


def test_meta_tensors_the_script_makes_hold_no_device_memory(tmp_path: Path) -> None:
    """Tensors the script puts on meta (init_empty_weights' way, set_default_device("meta"), a
    device="meta" factory, what is computed from them, and a factory given one's .device)
    leave memory_allocated at 0; a value loaded onto cuda is counted, as is a factory given its
    .device; sending it back to meta frees it; set_default_device("cuda") still makes
    stand-ins."""
    script(tmp_path, GHOSTS)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[0])
    weight = 4096 * 4096 * 4
    assert facts["ghosts"] == 0
    assert weight <= facts["loaded"] < weight + MiB  # the weight and its bias
    assert facts["beside"] == 4 * MiB
    assert facts["sent_back"] == 0
    assert facts["default_cuda"] == 4 * MiB


HAND_PICKLED = """
import pickle
import torch
torch.cuda.memory._record_memory_history(max_entries=1000)
x = torch.randn(1024, 1024, device="cuda")
y = (x @ x).relu()
with open("mem_snapshot.pickle", "wb") as f:
    pickle.dump(torch.cuda.memory._snapshot(), f)
"""


def test_a_snapshot_the_script_pickles_itself_is_summarised_as_predicted(tmp_path: Path) -> None:
    """A _snapshot() the script pickles by hand has no sidecar, yet memforensics summary and ls
    say it is predicted."""
    script(tmp_path, HAND_PICKLED)
    assert plan(tmp_path, "train.py").returncode == 0
    assert not (tmp_path / "mem_snapshot.json").exists()
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    summary = subprocess.run(
        [sys.executable, "-m", "memforensics", "summary", "--json", "mem_snapshot.pickle"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert json.loads(summary.stdout)["predicted"] is True
    listing = subprocess.run(
        [sys.executable, "-m", "memforensics", "ls", "--json", "."],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    flags = {Path(d["path"]).name: d["predicted"] for d in json.loads(listing.stdout)["dumps"]}
    assert flags["mem_snapshot.pickle"] is True


BACKWARD_FRAMES = """
import torch

class Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2  # BACKWARD

def hook(grad):
    return grad * 1.0  # HOOK

model = torch.nn.Linear(512, 512).cuda()
x = torch.randn(64, 512, device="cuda", requires_grad=True)
out = Doubled.apply(model(x))
out.register_hook(hook)
loss = out.sum()
torch.cuda.memory._record_memory_history()
loss.backward()  # CALL
torch.cuda.memory._dump_snapshot("bw.pickle")
"""


def test_backward_allocations_show_only_the_python_autograd_runs(tmp_path: Path) -> None:
    """In the predicted trace of a backward, a tensor hook's and a custom Function's allocations
    carry their own Python frames, as on a GPU, where autograd's device thread runs them (they
    had none); no allocation of the backward shows the script's ``loss.backward()`` line,
    which that thread never has on its stack, and the C++ gradients carry no frames."""
    lines = BACKWARD_FRAMES.splitlines()
    at = {tag: 1 + lines.index(next(x for x in lines if x.endswith(f"# {tag}"))) for tag in
          ("BACKWARD", "HOOK", "CALL")}  # fmt: skip
    script(tmp_path, BACKWARD_FRAMES)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    trace = pickle.loads((tmp_path / "bw.pickle").read_bytes())["device_traces"][0]
    allocs = [e for e in trace if e["action"] == "alloc"]
    places = [{(f["name"], f["line"]) for f in e["frames"]} for e in allocs]
    assert any(("hook", at["HOOK"]) in p for p in places)
    assert any(("backward", at["BACKWARD"]) in p for p in places)
    backward = [p for p in places if ("hook", at["HOOK"]) in p or ("backward", at["BACKWARD"]) in p]
    assert not any(("<module>", at["CALL"]) in p for p in backward)
    assert sum(1 for p in places if not p) >= 2  # the weight's and the bias's gradients
