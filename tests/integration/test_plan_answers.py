"""What ``torch.cuda`` and ``torch.accelerator`` answer under the real ``memforensics plan``, and
what plan answers around the run: the script's exit status, its JSON, its one-line errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from planned import SRC, plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

MiB = 1 << 20

NVTX = """
import torch

@torch.cuda.nvtx.range("forward")
def forward(x):
    return x * 2

with torch.cuda.nvtx.range("step {}", 1):
    depth = torch.cuda.nvtx.range_push("inner")
    torch.cuda.nvtx.mark("here")
    x = torch.ones(1024, 1024, device="cuda")
    y = forward(x)
    torch.cuda.nvtx.range_pop()
handle = torch.cuda.nvtx.range_start("across")
torch.cuda.nvtx.range_end(handle)
print("depth", depth, "allocated", torch.cuda.memory_allocated())
"""


def test_nvtx_ranges_as_decorator_context_and_calls_run_unchanged(tmp_path: Path) -> None:
    """``@torch.cuda.nvtx.range(...)`` as a decorator, as a context, and the push/pop/mark and
    start/end calls run under plan: exit 0, the nesting depth torch reports, the tensors
    counted."""
    script(tmp_path, NVTX)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert f"depth 1 allocated {8 * MiB}" in done.stdout  # x, and forward's result y


EMITTED = """
import torch
model = torch.nn.Linear(1024, 1024, bias=False).cuda()
x = torch.ones(256, 1024, device="cuda", requires_grad=True)
torch.cuda.profiler.start()
emitter = torch.autograd.profiler.emit_nvtx(record_shapes=True)
with emitter:
    model(x).sum().backward()
    try:
        with emitter:
            pass
    except RuntimeError as error:
        print("nested:", error)
with torch.autograd.profiler.emit_nvtx(enabled=False):
    pass
torch.cuda.profiler.stop()
print("grads", model.weight.grad.numel() + x.grad.numel())
"""


def test_autograd_nvtx_emission_runs_as_around_an_nsys_capture(tmp_path: Path) -> None:
    """``torch.autograd.profiler.emit_nvtx`` (Megatron's ``--profile`` under nsys), which the
    CPU build's profiler refuses, runs under plan: the step inside it runs, and torch's own
    refusal to nest it stays."""
    script(tmp_path, EMITTED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "nested: NVTX annotation context manager is not reentrant" in done.stdout
    assert f"grads {1024 * 1024 + 256 * 1024}" in done.stdout


MEMORY = """
import json, sys
import torch
import torch.cuda.memory as memory
from memforensics.plan import OutOfScope

def disabled():
    with memory.caching_allocator_disabled():
        pass

def pooled():
    with memory.use_mem_pool(memory.MemPool()):
        torch.empty(10, device="cuda")

calls = {
    "caching_allocator_alloc": lambda: memory.caching_allocator_delete(
        memory.caching_allocator_alloc(1 << 20)),
    "caching_allocator_delete": lambda: memory.caching_allocator_delete(
        memory.caching_allocator_alloc(1 << 20)),
    "caching_allocator_disabled": disabled,
    "caching_allocator_enable": lambda: memory.caching_allocator_enable(True),
    "get_per_process_memory_fraction": memory.get_per_process_memory_fraction,
    "set_per_process_memory_fraction": lambda: memory.set_per_process_memory_fraction(1.0),
    "CUDAPluggableAllocator": lambda: memory.CUDAPluggableAllocator("a.so", "alloc", "free"),
    "change_current_allocator": lambda: memory.change_current_allocator(None),
    "MemPool": lambda: memory.MemPool().id,
    "use_mem_pool": pooled,
}
outcome = {}
for name in memory.__all__:
    call = calls.get(name, getattr(memory, name))
    try:
        call()
        outcome[name] = "answered"
    except OutOfScope as exc:
        outcome[name] = "out of scope"
    except Exception as exc:
        outcome[name] = f"{type(exc).__name__}: {exc}"
before = torch.cuda.memory_allocated()
address = torch.cuda.caching_allocator_alloc(3 << 20)
grown = torch.cuda.memory_allocated() - before
torch.cuda.caching_allocator_delete(address)
facts = {"grown": grown, "after": torch.cuda.memory_allocated() - before}
print(json.dumps({"outcome": outcome, "facts": facts}))
"""
PLUGGABLE = {"CUDAPluggableAllocator", "change_current_allocator"}


def test_every_memory_function_of_torch_cuda_memory_is_answered(tmp_path: Path) -> None:
    """Each public name of the installed ``torch.cuda.memory`` answers under plan (a pluggable
    allocator is out of scope, said so), where plain python on the CPU build fails on them;
    ``caching_allocator_alloc`` takes a block of the model and its delete gives it back."""
    script(tmp_path, MEMORY)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    outcome = found["outcome"]
    expected = {name: "out of scope" if name in PLUGGABLE else "answered" for name in outcome}
    assert outcome == expected
    assert found["facts"] == {"grown": 3 * MiB, "after": 0}
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    plain = subprocess.run(
        [sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    unplanned = json.loads(plain.stdout.splitlines()[0])["outcome"] if plain.stdout else {}
    assert plain.returncode != 0 or unplanned["reset_peak_host_memory_stats"] != "answered"


CURRENT_ALLOCATOR = """
import json
import torch
from torch.cuda.memory import CUDAPluggableAllocator, _get_current_allocator
current = _get_current_allocator()
x = torch.empty(1 << 20, device="cuda")
print(json.dumps({
    "pluggable": isinstance(current, CUDAPluggableAllocator),
    "handle": isinstance(current.allocator(), torch._C._cuda_CUDAAllocator),
    "backend": torch.cuda.get_allocator_backend(),
    "allocated": torch.cuda.memory_allocated(),
}))
"""


def test_the_current_allocator_is_the_native_caching_allocator(tmp_path: Path) -> None:
    """``torch.cuda.memory._get_current_allocator()`` (an AttributeError on the CPU build's
    ``torch._C``) answers as on a GPU: a wrapper whose ``allocator()`` is a
    ``torch._C._cuda_CUDAAllocator``, not a ``CUDAPluggableAllocator`` (the check runs), and
    the allocations after it are counted as before."""
    script(tmp_path, CURRENT_ALLOCATOR)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    assert found == {"pluggable": False, "handle": True, "backend": "native", "allocated": 4 * MiB}


NVML = """
import json
import torch
held = torch.empty(100 << 20, dtype=torch.uint8, device="cuda")
free, total = torch.cuda.mem_get_info()
readings = {name: getattr(torch.cuda, name)() for name in
            ("utilization", "memory_usage", "temperature", "power_draw", "clock_rate")}
print(json.dumps({"used": torch.cuda.device_memory_used(), "free": free, "total": total,
                  "reserved": torch.cuda.memory_reserved(), "readings": readings}))
"""


def test_nvml_queries_answer_as_the_planned_device(tmp_path: Path) -> None:
    """torch.cuda's NVML queries, which raise without nvidia-ml-py (as on this CPU build),
    answer under plan: device_memory_used is what mem_get_info finds used (the context and
    the reserved 100 MiB), and the telemetry a training log reads is 0, said once."""
    script(tmp_path, NVML)
    done = plan(tmp_path, "--context-memory", "300MiB", "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    assert found["used"] == found["total"] - found["free"] == found["reserved"] + 300 * MiB
    assert found["reserved"] >= 100 * MiB
    assert set(found["readings"].values()) == {0}
    assert done.stderr.count("GPU telemetry") == 1


PROPERTIES = """
import json
import torch
props = torch.cuda.get_device_properties(0)
print(json.dumps([props.major, props.minor, props.multi_processor_count,
                  props.max_threads_per_multi_processor]))
"""


@pytest.mark.parametrize(
    ("capability", "multiprocessors", "threads"),
    [("8.0", 108, 2048), ("9.0", 132, 2048), ("8.6", 84, 1536)],
)
def test_device_properties_are_those_of_the_capabilitys_part(
    tmp_path: Path, capability: str, multiprocessors: int, threads: int
) -> None:
    """The planned device's multiprocessors and threads per multiprocessor are those of its
    capability's datacenter part (an A100's 108, an H100's 132, an A40's 84 and 1,536), which
    a library choosing its kernel by them (bitsandbytes' 4-bit product) reads."""
    script(tmp_path, PROPERTIES)
    done = plan(tmp_path, "--device-capability", capability, "train.py")
    assert done.returncode == 0, done.stderr
    major, minor, found, per_sm = json.loads(done.stdout.splitlines()[0])
    assert f"{major}.{minor}" == capability
    assert (found, per_sm) == (multiprocessors, threads)


NVIDIA_SMI = """
import json, os, subprocess
import torch
table = subprocess.run(["nvidia-smi"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
held = torch.empty(100 << 20, dtype=torch.uint8, device="cuda")
query = subprocess.check_output(
    "nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv,noheader,nounits",
    shell=True, text=True,
)
print(json.dumps({"table": table.stdout, "code": table.returncode, "rows": query.splitlines(),
                  "used": torch.cuda.device_memory_used(), "name": torch.cuda.get_device_name(),
                  "path": os.environ["PATH"]}))
"""


def test_nvidia_smi_run_by_the_script_answers_as_the_planned_devices(tmp_path: Path) -> None:
    """A script that runs the ``nvidia-smi`` program (to log its GPUs, or to read their
    memory) gets the planned node's GPUs, each using what the planned process holds at that
    moment, where a CPU host has no such program; PATH is the script's own otherwise."""
    script(tmp_path, NVIDIA_SMI)
    done = plan(
        tmp_path, "--nproc-per-node", "2", "--device-memory", "80GiB", "--context-memory",
        "300MiB", "train.py",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    assert found["code"] == 0
    name = found["name"]
    assert name in found["table"]
    assert "0MiB / 81920MiB" in found["table"]  # before the script initialized CUDA
    used = found["used"] // MiB
    assert used >= 400
    assert found["rows"] == [f"0, {name}, 81920, {used}", f"1, {name}, 81920, {used}"]
    assert os.environ["PATH"] in found["path"]


SUMMARY = """
import torch
kept = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
gone = torch.empty(5 << 20, dtype=torch.uint8, device="cuda")
del gone
print(torch.cuda.memory_summary())
"""


def test_memory_summary_is_pytorchs_table_of_the_models_figures(tmp_path: Path) -> None:
    """``memory_summary()`` prints PyTorch's own table with the model's figures: 3 MiB allocated
    now, 8 MiB at the peak, 8 MiB allocated in all and 5 MiB freed, two allocations made."""
    script(tmp_path, SUMMARY)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "PyTorch CUDA memory summary, device ID 0" in lines[1]
    allocated = next(line for line in lines if line.startswith("| Allocated memory"))
    assert allocated.split("|")[2:6] == ["   3072 KiB ", "   8192 KiB ", "   8192 KiB ",
                                          "   5120 KiB "]  # fmt: skip
    allocations = next(line for line in lines if line.startswith("| Allocations"))
    assert [cell.strip() for cell in allocations.split("|")[2:6]] == ["1", "2", "2", "1"]


ACCELERATOR = """
import json
import torch
acc = torch.accelerator
device = acc.current_accelerator()
torch.accelerator.set_device_index(0)
with torch.accelerator.device_index(0):
    x = torch.empty(1 << 20, device=device)
acc.synchronize()
print(json.dumps({
    "type": device.type,
    "checked": acc.current_accelerator(check_available=True).type,
    "count": acc.device_count(),
    "available": acc.is_available(),
    "index": acc.current_device_index(),
    "allocated": acc.memory_allocated(),
    "cuda_allocated": torch.cuda.memory_allocated(),
    "reserved": acc.memory_reserved(),
    "info": list(acc.get_memory_info()),
    "cuda_info": list(torch.cuda.mem_get_info()),
}))
"""


def test_torch_accelerator_names_the_planned_device(tmp_path: Path) -> None:
    """``torch.accelerator`` says CUDA, one device, index 0, and answers memory from the model:
    a tensor made on its device is counted as ``torch.cuda`` counts it."""
    script(tmp_path, ACCELERATOR)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[0])
    assert facts["type"] == facts["checked"] == "cuda"
    assert (facts["count"], facts["available"], facts["index"]) == (1, True, 0)
    assert facts["allocated"] == facts["cuda_allocated"] == 4 * MiB
    assert facts["reserved"] >= 4 * MiB
    assert facts["info"] == facts["cuda_info"]


EXITS = """
import sys
import torch
x = torch.empty(1 << 20, device="cuda")
sys.exit(int(sys.argv[1]) if sys.argv[1].isdigit() else sys.argv[1])
"""


def test_the_scripts_exit_status_passes_through_with_the_figures(tmp_path: Path) -> None:
    """``sys.exit(3)`` in the script: plan exits 3, prints the figures, no traceback; its JSON
    says ``exit_status`` 3; ``sys.exit(0)`` is a run that fits; a message exits 1 and is
    shown, as python shows it."""
    script(tmp_path, EXITS)
    done = plan(tmp_path, "train.py", "3")
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert "peak allocated   4.00 MiB" in done.stdout
    assert "The script exited with status 3." in done.stdout
    as_json = plan(tmp_path, "--json", "train.py", "3")
    assert as_json.returncode == 3
    doc = json.loads(as_json.stdout)
    assert (doc["exit_status"], doc["peak_allocated_bytes"]) == (3, 4 * MiB)
    assert plan(tmp_path, "train.py", "0").returncode == 0
    said = plan(tmp_path, "train.py", "stopped early")
    assert said.returncode == 1
    assert said.stderr.strip().splitlines()[0] == "stopped early"


INTERRUPTED = """
import os, signal, time
import torch
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, also where the
x = torch.empty(1 << 20, device="cuda")  # test runs in the background (SIGINT ignored)
os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, as a terminal sends it
while True:
    time.sleep(0.01)
"""


def test_an_interrupted_script_shows_the_figures_so_far(tmp_path: Path) -> None:
    """SIGINT (Ctrl-C) while the script runs: its traceback as python prints it, then the
    figures up to there and the script's line it stopped at; plan exits 130, and its JSON says
    where."""
    path = script(tmp_path, INTERRUPTED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 130, done.stderr
    assert "KeyboardInterrupt" in done.stderr
    assert "peak allocated   4.00 MiB" in done.stdout
    words = " ".join(done.stdout.split())  # the text wraps long lines
    stopped = re.search(r"Interrupted at (\S+):(\d+) \(Ctrl-C\)", words)
    assert stopped is not None, done.stdout
    assert (stopped[1], int(stopped[2]) in (6, 7, 8)) == (str(path), True)
    as_json = plan(tmp_path, "--json", "train.py")
    assert as_json.returncode == 130
    doc = json.loads(as_json.stdout)
    assert (doc["interrupted"], doc["exit_status"]) == (f"{path}:{stopped[2]}", 130)
    assert doc["peak_allocated_bytes"] == 4 * MiB


TERMINATED = """
import os, signal, time
import torch
x = torch.empty(1 << 20, device="cuda")
os.kill(os.getpid(), signal.SIGTERM)  # as a batch system's time limit or `timeout` sends it
while True:
    time.sleep(0.01)
"""


def test_a_terminated_plan_answers_and_leaves_no_folder_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM while the script runs: the figures up to there and the line it stopped at, exit
    143 as a shell reports it, and none of the plan's folders left in the temporary
    directory."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    path = script(tmp_path, TERMINATED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 143, done.stderr
    assert "peak allocated   4.00 MiB" in done.stdout
    words = " ".join(done.stdout.split())
    assert re.search(rf"Interrupted at {re.escape(str(path))}:[567] \(SIGTERM\)", words), words
    assert list(temporary.iterdir()) == []


TERMINATED_PARENT = """
import os, signal, time
import torch
x = torch.empty(1 << 20, device="cuda")
if os.environ["RANK"] == "0":
    os.kill(os.getppid(), signal.SIGTERM)  # the plan that started this rank's plan
while True:
    time.sleep(0.01)
"""


def test_a_terminated_plan_of_every_rank_ends_the_ranks_plans_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM to ``plan --ranks all`` is passed to the ranks' plans running, and ranks not
    begun are not: all end (exit 143) and leave no folder in the temporary directory."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    script(tmp_path, TERMINATED_PARENT)
    done = plan(tmp_path, "--ranks", "all", "--nproc-per-node", "4", "--jobs", "2", "train.py")
    assert done.returncode == 143, done.stderr
    assert list(temporary.iterdir()) == []


STOPPED_RANKS = """
import os, time
from pathlib import Path
import torch
rank = int(os.environ["RANK"])
x = torch.empty((rank + 1) << 18, device="cuda")  # rank + 1 MiB
if rank > 0:  # rank 0 runs to its end; the others wait for SIGTERM
    (Path(os.environ["READY"]) / str(rank)).write_text("")
    while True:
        time.sleep(0.01)
"""


def _planning(folder: Path, *args: str, terminal: bool = False) -> subprocess.Popen[str]:
    """``plan ARGS`` started in ``folder`` as :func:`planned.plan` runs it, not waited for.
    ``terminal``: the real ``memforensics`` console script, started as a shell starts a
    foreground job: leading a process group of its own, with Ctrl-C (SIGINT) at its default
    however this test process was started (a background job of a non-interactive shell
    ignores it, and an ignored signal stays ignored across ``exec``; a handled one is reset to
    the default, so one is handled while starting), so that a Ctrl-C can be sent to the group
    as a terminal sends it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFORENSICS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    command = [sys.executable, "-m", "memforensics", "plan", *args]
    pipe = subprocess.PIPE
    if not terminal:
        return subprocess.Popen(command, cwd=folder, env=env, stdout=pipe, stderr=pipe, text=True)
    console = shutil.which("memforensics", path=str(Path(sys.executable).parent))
    assert console is not None, "the memforensics console script is not installed"
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(
            [console, "plan", *args], cwd=folder, env=env, stdout=pipe, stderr=pipe, text=True,
            start_new_session=True,
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, previous)


def _when_ready(plan: subprocess.Popen[str], ready: Path, count: int) -> None:
    """Wait until ``count`` of the plan's scripts wrote their marker into ``ready`` (or it
    ended first)."""
    while len(list(ready.iterdir())) < count and plan.poll() is None:
        time.sleep(0.05)  # waiting for the markers, not timing anything


def _terminated_when_ready(plan: subprocess.Popen[str], ready: Path, count: int) -> tuple[str, str]:
    """SIGTERM to ``plan`` once ``count`` of its scripts wrote their marker into ``ready`` (or
    it ended first); what it printed."""
    _when_ready(plan, ready, count)
    plan.send_signal(signal.SIGTERM)
    return plan.communicate(timeout=300)


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize(
    ("by", "status"), [("SIGTERM", 143), ("Ctrl-C", 130)], ids=["sigterm", "ctrl-c"]
)
def test_a_stopped_plan_of_every_rank_prints_the_ranks_planned_so_far(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, as_json: bool, by: str, status: int
) -> None:
    """SIGTERM to ``plan --ranks all``, or Ctrl-C as a terminal sends it to the foreground
    process group, once rank 0 ran to its end and ranks 1 and 2 run: the table of ranks 0 to 2
    (rank 0 fits; ranks 1 and 2 with their figures so far, 2 and 3 MiB, marked interrupted by
    that signal at the script's line), rank 3 not planned, exit 143 or 130."""
    ready = tmp_path / "ready"
    ready.mkdir()
    monkeypatch.setenv("READY", str(ready))
    path = script(tmp_path, STOPPED_RANKS)
    options = ("--json",) if as_json else ()
    plan_all = _planning(
        tmp_path, *options, "--ranks", "all", "--nproc-per-node", "4", "--jobs", "2",
        "train.py", terminal=by == "Ctrl-C",
    )  # fmt: skip
    if by == "SIGTERM":
        stdout, stderr = _terminated_when_ready(plan_all, ready, 2)
    else:
        _when_ready(plan_all, ready, 2)
        os.killpg(plan_all.pid, signal.SIGINT)
        stdout, stderr = plan_all.communicate(timeout=300)
    assert plan_all.returncode == status, stderr
    if as_json:
        doc = json.loads(stdout)
        assert (doc["interrupted_by"], doc["not_planned"]) == (by, [3])
        assert doc["terminated"] is (by == "SIGTERM")
        rows = {row["rank"]: row for row in doc["rows"]}
        assert sorted(rows) == [0, 1, 2]
        assert (rows[0]["fits"], rows[0]["interrupted"], rows[0]["interrupted_by"]) == (
            True, None, None
        )  # fmt: skip
        for rank in (1, 2):
            assert rows[rank]["peak_allocated_bytes"] == (rank + 1) * MiB
            assert (rows[rank]["fits"], rows[rank]["interrupted_by"]) == (None, by)
            assert re.fullmatch(rf"{re.escape(str(path))}:(9|10)", rows[rank]["interrupted"])
        return
    table = [line.split() for line in stdout.splitlines() if re.match(r" +\d+ ", line)]
    # reserved: PyTorch's 2 MiB small-pool segment for 1 MiB, a 20 MiB segment below 10 MiB
    assert {row[0]: row[1:] for row in table} == {
        "0": ["1.00", "MiB", "2.00", "MiB", "yes"],
        "1": ["2.00", "MiB", "20.00", "MiB", "interrupted"],
        "2": ["3.00", "MiB", "20.00", "MiB", "interrupted"],
    }, stdout
    words = " ".join(stdout.split())
    stopped = rf"interrupted at {re.escape(str(path))}:(9|10) \({by}\)"
    assert len(re.findall(stopped, words)) == 2, stdout
    assert f"Interrupted ({by}): the rows are those planned so far; rank 3 not planned." in words
    assert "Every planned rank" not in words


RANK_TERMINATED = """
import os, signal
import torch
rank = int(os.environ["RANK"])
x = torch.empty((rank + 1) << 18, device="cuda")  # rank + 1 MiB
if rank == 1:
    os.kill(os.getpid(), signal.SIGTERM)  # this rank's plan alone is sent SIGTERM
"""


def test_a_rank_s_plan_sent_sigterm_alone_makes_the_plan_exit_as_it_does(tmp_path: Path) -> None:
    """SIGTERM to one rank's plan, not to ``plan --ranks all``: every rank is planned, rank 1's
    row marked interrupted by SIGTERM with its figures so far (2 MiB), and the command exits
    143, as that rank's own plan does, not 2 as for a script that failed."""
    path = script(tmp_path, RANK_TERMINATED)
    done = plan(tmp_path, "--ranks", "all", "--nproc-per-node", "3", "train.py")
    assert done.returncode == 143, done.stdout + done.stderr
    table = [line.split() for line in done.stdout.splitlines() if re.match(r" +\d+ ", line)]
    assert {row[0]: (row[1], row[-1]) for row in table} == {
        "0": ("1.00", "yes"),
        "1": ("2.00", "interrupted"),
        "2": ("3.00", "yes"),
    }, done.stdout
    words = " ".join(done.stdout.split())
    assert re.search(rf"interrupted at {re.escape(str(path))}:[67] \(SIGTERM\)", words), words
    assert "failed" not in words
    assert "Interrupted (SIGTERM): the rows" not in words  # the plan itself ran to its end


WAITING_RANKS = """
import os, time
from pathlib import Path
import torch
x = torch.empty(1 << 18, device="cuda")
ready = Path(os.environ["READY"])
written = ready.parent / f"pid{os.environ['RANK']}"
written.write_text(str(os.getpid()))
written.replace(ready / os.environ["RANK"])  # whole when it appears
while True:
    time.sleep(0.01)
"""


def _running(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie waiting for its reaper has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal")
def test_rank_plans_end_when_the_plan_that_started_them_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``kill -9`` of ``plan --ranks all``'s process group, as a shell kills a job, once both
    ranks' plans run their scripts: the ranks' plans, which lead process groups of their own,
    end too (nothing outlives the command)."""
    ready = tmp_path / "ready"
    ready.mkdir()
    monkeypatch.setenv("READY", str(ready))
    script(tmp_path, WAITING_RANKS)
    plan_all = _planning(
        tmp_path, "--ranks", "all", "--nproc-per-node", "2", "--jobs", "2", "train.py",
        terminal=True,
    )  # fmt: skip
    _when_ready(plan_all, ready, 2)
    ranks = [int(marker.read_text()) for marker in ready.iterdir()]
    assert len(ranks) == 2
    os.killpg(plan_all.pid, signal.SIGKILL)
    plan_all.communicate(timeout=300)
    deadline = time.monotonic() + 300  # a bound on a broken run, not a timing
    while any(_running(pid) for pid in ranks) and time.monotonic() < deadline:
        time.sleep(0.05)  # waiting for the ranks' plans to end, not timing anything
    assert not any(_running(pid) for pid in ranks)


STOPPED_VALUES = """
import argparse, os, time
from pathlib import Path
import torch
n = argparse.ArgumentParser()
n.add_argument("--n", type=int)
n = n.parse_args().n
x = torch.empty(n << 18, device="cuda")  # n MiB
expandable = "expandable" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
(Path(os.environ["READY"]) / f"{n}-{expandable}").write_text("")
while True:
    time.sleep(0.01)
"""


def test_a_terminated_vary_prints_the_values_planned_so_far(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM to ``plan --vary`` while the first value's two runs run: its row with their
    figures so far (3 MiB allocated), marked interrupted; the other values not planned; exit
    143, as ``--ranks all`` answers it."""
    ready = tmp_path / "ready"
    ready.mkdir()
    monkeypatch.setenv("READY", str(ready))
    path = script(tmp_path, STOPPED_VALUES)
    vary = _planning(tmp_path, "--vary", "n=3,5,7", "--jobs", "2", "train.py")
    stdout, stderr = _terminated_when_ready(vary, ready, 2)
    assert vary.returncode == 143, stderr
    lines = stdout.splitlines()
    # reserved: a 20 MiB segment, PyTorch's for a request below 10 MiB
    assert lines[1].split() == ["3", "3.00", "MiB", "20.00", "MiB", "interrupted", "interrupted"]
    words = " ".join(stdout.split())
    assert re.search(rf"interrupted at {re.escape(str(path))}:1[123] \(SIGTERM\)", words), stdout
    assert "n values 5, 7 not planned" in words, stdout
    assert "Largest n of those planned that fits: none" in words


def test_sigint_to_a_vary_plan_alone_is_passed_on_and_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``kill -INT`` of ``plan --vary`` alone (its values' plans lead process groups of their
    own, out of a terminal's reach): it passes Ctrl-C on to the plans running, which answer
    with their figures so far, and prints the table of the values planned so far, exit 130;
    it does not wait forever on plans that were never told."""
    ready = tmp_path / "ready"
    ready.mkdir()
    monkeypatch.setenv("READY", str(ready))
    path = script(tmp_path, STOPPED_VALUES)
    vary = _planning(tmp_path, "--vary", "n=3,5,7", "--jobs", "2", "train.py", terminal=True)
    _when_ready(vary, ready, 2)
    vary.send_signal(signal.SIGINT)
    stdout, stderr = vary.communicate(timeout=300)
    assert vary.returncode == 130, stderr
    lines = stdout.splitlines()
    assert lines[1].split() == ["3", "3.00", "MiB", "20.00", "MiB", "interrupted", "interrupted"]
    words = " ".join(stdout.split())
    assert re.search(rf"interrupted at {re.escape(str(path))}:1[123] \(Ctrl-C\)", words), stdout
    assert "Interrupted (Ctrl-C): the rows are those planned so far; n values 5, 7 not" in words


FAILS = """
import torch
x = torch.empty(1 << 20, device="cuda")
y = torch.empty(1 << 20, device="cuda")
del y
raise ValueError("the checkpoint folder is missing\\nsecond line")
"""


def test_a_script_that_fails_shows_its_traceback_and_the_figures_so_far(tmp_path: Path) -> None:
    """A script that raises after it used the device: its traceback as python prints it, the
    figures up to there and where and how it failed; plan exits 2, and its JSON says so under
    ``failed``, which ``--vary`` shows as that value's error."""
    path = script(tmp_path, FAILS)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 2, done.stderr
    assert "ValueError: the checkpoint folder is missing" in done.stderr
    assert "peak allocated   8.00 MiB" in done.stdout
    words = " ".join(done.stdout.split())
    assert (
        f"Failed at {path}:6: ValueError: the checkpoint folder is missing: the figures are "
        "the run's up to there." in words
    )
    as_json = plan(tmp_path, "--json", "train.py")
    assert as_json.returncode == 2
    doc = json.loads(as_json.stdout)
    assert doc["failed"] == f"{path}:6: ValueError: the checkpoint folder is missing"
    assert (doc["peak_allocated_bytes"], doc["exit_status"]) == (8 * MiB, None)
    varied = plan(tmp_path, "--json", "--vary", "batch=1,2", "train.py")
    rows = json.loads(varied.stdout)["rows"]
    assert [row["error"] for row in rows] == [doc["failed"]] * 2


UNEMULATED = """
import torch
x = torch.ones(4, device="cuda")
handle = torch.cuda.current_blas_handle()
"""

OWN_FAILURE = """
import torch
x = torch.ones(4, device="cuda")
raise ValueError("the script's own")
"""


def test_a_cuda_function_the_plan_does_not_emulate_is_said_to_be_the_plans(
    tmp_path: Path,
) -> None:
    """A script that calls a CUDA function the emulation does not answer fails with torch's
    traceback (the CPU build lacks the binding; a CUDA build without a GPU reaches the runtime,
    which blames the driver) and one line naming the script's call as the plan's failure; a
    script that fails for its own reason gets no such line."""
    path = script(tmp_path, UNEMULATED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 2
    [said] = [line for line in done.stderr.splitlines() if line.startswith("memforensics plan:")]
    assert f"the script's call at {path}:4 reached " in said
    assert "this failure is the plan's, not one a GPU run would meet" in said
    script(tmp_path, OWN_FAILURE)
    own = plan(tmp_path, "train.py")
    assert own.returncode == 2
    assert "ValueError: the script's own" in own.stderr
    assert "memforensics plan:" not in own.stderr


def test_plan_json_carries_its_schema_first(tmp_path: Path) -> None:
    """``plan --json`` and ``plan --vary --json`` begin with ``"schema"``, the version
    docs/json.md lists them under."""
    script(tmp_path, "import torch\nx = torch.empty(8, device='cuda')\n")
    doc = json.loads(plan(tmp_path, "--json", "train.py").stdout)
    assert next(iter(doc)) == "schema"
    page = (SRC.parent / "docs" / "json.md").read_text()
    assert f"## `plan --json` (schema {doc['schema']}, `PlanResult`)" in page
    script(tmp_path, "import argparse\nargparse.ArgumentParser().add_argument('--n')\n")
    vary = json.loads(plan(tmp_path, "--json", "--vary", "n=1", "train.py").stdout)
    assert next(iter(vary)) == "schema"
    assert f"## `plan --vary --json` (schema {vary['schema']}, `VaryAnswer`)" in page


GROW = """
import argparse
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--n", type=int)
kept = [torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        for _ in range(parser.parse_args().n)]
"""


def test_vary_marks_the_rows_that_ran_out(tmp_path: Path) -> None:
    """A value whose run runs out is marked OOM in the text and ``oom`` in the JSON; one that
    fits is not."""
    script(tmp_path, GROW)
    device = ("--device-memory", "1GiB", "--context-memory", "256MiB")
    done = plan(tmp_path, *device, "--vary", "n=2,40", "train.py")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:3]}
    assert rows["2"][-2:] == ["yes", "yes"]
    assert rows["40"][-2:] == ["OOM", "OOM"]
    doc = json.loads(plan(tmp_path, *device, "--json", "--vary", "n=2,40", "train.py").stdout)
    oom = {row["value"]: (row["oom"], row["oom_expandable"]) for row in doc["rows"]}
    assert oom == {"2": (False, False), "40": (True, True)}


def test_expandable_segments_are_not_said_to_be_zero_segments(tmp_path: Path) -> None:
    """With expandable segments PyTorch's segment count stays 0 while memory is reserved; the
    text says why instead of "segments 0" beside the reserved figure."""
    script(tmp_path, GROW)
    done = plan(tmp_path, "--alloc-conf", "expandable_segments:True", "train.py", "--n", "3")
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if "segments" in line)
    assert "0 at the end" not in line
    assert "expandable" in line


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (("--context-memory", "80GiB"), "--context-memory 80.00 GiB leaves nothing of"),
        (("--device-memory", "abc"), "--device-memory: not a size"),
        (("--device-capability", "-1.0"), "--device-capability must be MAJOR.MINOR"),
        (("--jobs", "x"), "argument --jobs: invalid int value"),
        (("--alloc-conf", "foo:1"), "Unrecognized key 'foo'"),
        (("--bogus",), "unrecognized arguments: --bogus"),
        (("--steps", "0"), "--steps must be at least 1, got 0"),
        (("torchrun", "--nproc-per-node", "gpu"), "give plan's --nproc-per-node N (the GPUs"),
        (("torchrun", "--nproc-per-node", "cpu"), "torchrun: --nproc-per-node cpu counts the"),
        (("torchrun", "--nnodes", "1:4"), "torchrun: --nnodes 1:4 is elastic; give the number"),
        (("torchrun", "--bogus"), "torchrun: unrecognized arguments: --bogus"),
    ],
)
def test_bad_options_get_one_line(tmp_path: Path, options: tuple[str, ...], says: str) -> None:
    """A bad option exits 2 with one line on stderr, saying ``memforensics plan:`` once."""
    script(tmp_path, "print('ran')\n")
    done = plan(tmp_path, *options, "train.py")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("memforensics plan: ")
    assert "plan: plan:" not in lines[0]
    assert says in lines[0]
    assert "ran" not in done.stdout


PEAKS_PER_EPOCH = """
import json, sys
import torch
for epoch, mib in enumerate((64, 64, 8)):  # a large epoch, then a small one
    torch.cuda.reset_peak_memory_stats()
    held = [torch.empty(mib << 18, device="cuda") for _ in range(2)]
    del held
    torch.cuda.empty_cache()
print(json.dumps({"allocated": torch.cuda.max_memory_allocated(),
                  "reserved": torch.cuda.max_memory_reserved()}), file=sys.stderr)
"""


def test_the_plans_peaks_are_the_runs_where_the_script_resets_them_each_epoch(
    tmp_path: Path,
) -> None:
    """A script that resets the peak statistics each epoch reads the last epoch's peak, as on a
    GPU; the plan's peak allocated, reserved and segments stay the run's largest, what the
    device must hold."""
    script(tmp_path, PEAKS_PER_EPOCH)
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    [line] = [line for line in done.stderr.splitlines() if line.startswith("{")]
    seen = json.loads(line)
    assert seen["allocated"] == 16 * MiB
    assert seen["reserved"] < 128 * MiB
    assert doc["peak_allocated_bytes"] == 128 * MiB
    assert doc["peak_reserved_bytes"] == 128 * MiB
    assert doc["peak_segments"] == 2


TOTALS_PER_EPOCH = """
import json
import torch
held = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
try:
    torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
except torch.cuda.OutOfMemoryError:
    pass
before = torch.cuda.memory_stats()
torch.cuda.reset_accumulated_memory_stats()
for _ in range(3):  # the epoch: three allocations of 1 MiB, each freed
    torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
after = torch.cuda.memory_stats()
print(json.dumps({"before": before, "after": after}))
"""


def test_reset_accumulated_memory_stats_starts_the_totals_and_counters_again(
    tmp_path: Path,
) -> None:
    """``reset_accumulated_memory_stats()`` zeroes each statistic's allocated and freed totals
    and the OOM and device-allocation counters, as on a GPU, so a script counting an epoch's
    allocations and OOMs reads that epoch's; current values and peaks go on."""
    script(tmp_path, TOTALS_PER_EPOCH)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    before, after = found["before"], found["after"]
    assert before["num_ooms"] == 1
    assert after["num_ooms"] == 0
    assert after["allocation.all.allocated"] == 3
    assert after["allocation.all.freed"] == 3
    assert after["allocated_bytes.all.allocated"] == 3 * MiB
    assert after["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]
    assert after["allocated_bytes.all.peak"] == 65 * MiB  # what is held and one of the epoch's
    grown = after["reserved_bytes.all.current"] - before["reserved_bytes.all.current"]
    assert after["reserved_bytes.all.allocated"] == grown  # the epoch's one new segment


PER_POOL = """
import json
import torch
torch.cuda.memory._set_allocator_settings("expandable_segments:{expandable}")
large = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")  # over 1 MiB: the large pool
small = [torch.empty(1000, device="cuda") for _ in range(4)]  # 1 MiB or less: the small pool
del small[0]
gone = torch.empty(30 << 20, dtype=torch.uint8, device="cuda")
del gone
torch.cuda.empty_cache()  # the 30 MiB go back to the device
pool = torch.cuda.MemPool()
with torch.cuda.use_mem_pool(pool):
    pooled = torch.empty(512, device="cuda")
stats = torch.cuda.memory_stats()
print(json.dumps({"stats": stats, "summary": torch.cuda.memory_summary()}))
"""


@pytest.mark.parametrize("expandable", ["False", "True"])
def test_memory_stats_keeps_the_small_and_the_large_pools_figures(
    tmp_path: Path, expandable: str
) -> None:
    """``memory_stats()`` has each statistic for the large and the small pool as well as for
    all (a script reading ``allocated_bytes.large_pool.current`` runs), the two adding up to
    all but for peaks; ``memory_summary()`` shows their rows, as on a GPU."""
    script(tmp_path, PER_POOL.replace("{expandable}", expandable))
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    stats = found["stats"]
    for key in [key for key in stats if ".all." in key]:
        large, small = key.replace(".all.", ".large_pool."), key.replace(".all.", ".small_pool.")
        if key.endswith(".peak"):  # each pool's peak is its own, reached at its own time
            assert max(stats[large], stats[small]) <= stats[key] <= stats[large] + stats[small]
        else:
            assert stats[large] + stats[small] == stats[key], key
    assert stats["allocated_bytes.large_pool.current"] == 3 * MiB
    assert stats["allocated_bytes.small_pool.current"] == 2048 + 3 * 4096  # 4,000 B: 4,096
    assert stats["allocation.small_pool.current"] == 4
    assert stats["allocation.small_pool.freed"] == 1
    assert stats["reserved_bytes.small_pool.current"] > 0
    assert stats["reserved_bytes.large_pool.freed"] > 0  # empty_cache gave memory back
    assert "from large pool" in found["summary"]
    assert "from small pool" in found["summary"]


METADATA = """
import json
import torch
memory = torch.cuda.memory
before = memory._get_memory_metadata()
memory._set_memory_metadata("epoch 1")
during = memory._get_memory_metadata()
x = torch.empty(1024, device="cuda")
memory._set_memory_metadata("")
print(json.dumps([before, during, memory._get_memory_metadata()]))
"""


def test_the_memory_metadata_set_is_read_back(tmp_path: Path) -> None:
    """``_get_memory_metadata()`` answers what ``_set_memory_metadata`` last set ("" before),
    as on a GPU, where the CPU build has no binding for it."""
    if not hasattr(pytest.importorskip("torch").cuda.memory, "_get_memory_metadata"):
        pytest.skip("this torch has no _get_memory_metadata")
    script(tmp_path, METADATA)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0]) == ["", "epoch 1", ""]
