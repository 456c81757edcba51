"""CUDA's runtime objects under the real ``memforensics plan``: streams and ``record_stream``,
bare device indices, the per-process memory fraction, CUDA graphs and memory pools, pinned
memory and the profiler's start and stop. Each script is of a shape that real training and
inference code uses, and each test checks what the user reads: it runs, and the figures are
the ones CUDA's caching allocator gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

MiB = 1 << 20
WORKSPACE = 8_519_680
"""cuBLAS's workspace on capability 8.0, one per stream."""


STREAMS = """
import json
import torch
side = torch.cuda.Stream(priority=-1)
least, greatest = torch.cuda.Stream.priority_range()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    x = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
x.record_stream(torch.cuda.current_stream())
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
torch.cuda.current_stream().wait_stream(side)
end.record()
end.synchronize()
torch.cuda.synchronize(torch.device("cuda:0"))
kept = torch.cuda.memory_allocated()
del x
print(json.dumps({"kept": kept, "after": torch.cuda.memory_allocated(),
                  "range": [least, greatest], "priority": side.priority,
                  "elapsed": start.elapsed_time(end)}))
"""


def test_record_stream_and_side_streams_run_and_count(tmp_path: Path) -> None:
    """``tensor.record_stream(stream)`` on a side stream's tensor runs (it raised a TypeError),
    the tensor is counted until it is freed, and priorities and events answer as CUDA's."""
    script(tmp_path, STREAMS)
    facts = printed_facts(tmp_path, "--device-capability", "8.0")
    assert (facts["kept"], facts["after"]) == (4 * MiB, 0)
    assert facts["range"] == [0, -3]
    assert facts["priority"] == -1
    assert facts["elapsed"] > 0.0


EVENT_TIMING = """
import json
import torch
x = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(10):
    y = x @ x
end.record()
torch.cuda.synchronize()
ms = start.elapsed_time(end)
tflops = 2 * 1024**3 * 10 / (ms / 1e3) / 1e12
refused = []
for first, second in [(torch.cuda.Event(), torch.cuda.Event()),
                      (torch.cuda.Event(enable_timing=True), end)]:
    try:
        first.elapsed_time(second)
    except ValueError as error:
        refused.append(str(error))
print(json.dumps({"ms": ms, "tflops": tflops, "refused": refused}))
"""


def test_cuda_event_timing_is_positive_and_refuses_what_torch_refuses(tmp_path: Path) -> None:
    """A benchmark dividing work by ``start.elapsed_time(end)`` runs (it divided by zero): the
    time is positive, and events without timing or unrecorded raise torch's ValueErrors."""
    script(tmp_path, EVENT_TIMING)
    facts = printed_facts(tmp_path, "--device-capability", "9.0")
    assert isinstance(facts["ms"], float)
    assert facts["ms"] > 0.0
    assert isinstance(facts["tflops"], float)
    assert facts["tflops"] > 0.0
    assert facts["refused"] == [
        "Both events must be created with argument 'enable_timing=True'.",
        "Both events must be recorded before calculating elapsed time.",
    ]


PREFETCH = """
import json
import torch
copy_stream = torch.cuda.Stream()
batches = [torch.randn(256, 1024).pin_memory() for _ in range(3)]
with torch.cuda.stream(copy_stream):
    nxt = batches[0].to("cuda", non_blocking=True)
    ready = copy_stream.record_event()
seen = []
for i in range(3):
    torch.cuda.current_stream().wait_event(ready)
    ready.synchronize()
    current = nxt
    current.record_stream(torch.cuda.current_stream())
    if i + 1 < 3:
        with torch.cuda.stream(copy_stream):
            nxt = batches[i + 1].to("cuda", non_blocking=True)
            ready = copy_stream.record_event()
    seen.append(ready.query())
print(json.dumps({"seen": seen, "allocated": torch.cuda.memory_allocated()}))
"""


def test_a_recorded_event_is_an_event_a_prefetcher_waits_on(tmp_path: Path) -> None:
    """A data prefetcher's ``stream.record_event()`` returns an event it can wait on, query
    and synchronize (it returned None and the loop failed), and the batches are counted."""
    script(tmp_path, PREFETCH)
    facts = printed_facts(tmp_path, "--device-capability", "9.0")
    assert facts["seen"] == [True, True, True]
    assert facts["allocated"] == 256 * 1024 * 4


ACCELERATOR_TIMING = """
import json
import torch
device = torch.accelerator.current_accelerator()
x = torch.randn(1024, 1024, device=device)
start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
start.record()
y = x @ x
end.record()
torch.accelerator.synchronize()
side = torch.Stream(device)
side.wait_stream(torch.accelerator.current_stream())
before = torch.cuda.memory_allocated()
with side:
    z = torch.empty(1 << 20, dtype=torch.uint8, device=device)
print(json.dumps({"ms": start.elapsed_time(end), "device": str(device),
                  "kinds": [isinstance(side, torch.Stream), isinstance(end, torch.Event),
                            isinstance(torch.accelerator.current_stream(), torch.Stream)],
                  "cpu": str(torch.Event("cpu").device),
                  "allocated": torch.cuda.memory_allocated() - before}))
"""


def test_device_generic_events_and_streams_are_the_planned_devices(tmp_path: Path) -> None:
    """``torch.Event``/``torch.Stream`` as the ``torch.accelerator`` examples use them are CUDA's
    on the planned device (recording raised "cpu backend doesn't support events") and time and
    allocate as ``torch.cuda``'s; a CPU event stays torch's."""
    script(tmp_path, ACCELERATOR_TIMING)
    facts = printed_facts(tmp_path, "--device-capability", "9.0")
    assert facts["device"] == "cuda"
    assert isinstance(facts["ms"], float)
    assert facts["ms"] > 0.0
    assert facts["kinds"] == [True, True, True]
    assert facts["cpu"] == "cpu"
    assert facts["allocated"] == 1 << 20


INDICES = """
import json
import torch
device = torch.device(0)
model = torch.nn.Linear(1024, 1024).to(0)
made = torch.empty(1024, device=0)
moved = torch.ones(1024).to(0, torch.float16, True)
print(json.dumps({"device": str(device), "allocated": torch.cuda.memory_allocated()}))
"""


def test_a_bare_device_index_is_the_planned_cuda_device(tmp_path: Path) -> None:
    """``torch.device(0)``, ``module.to(0)``, ``device=0`` and ``tensor.to(0, ...)`` (Accelerate's
    ``device_map`` names devices so) are the planned CUDA device, counted there, where they
    raised "Cannot access accelerator device"."""
    script(tmp_path, INDICES)
    facts = printed_facts(tmp_path, "--device-capability", "8.0")
    assert facts["device"] == "cuda:0"
    weights = 1024 * 1024 * 4 + 1024 * 4
    assert facts["allocated"] == weights + 1024 * 4 + 1024 * 2


FRACTION = """
import sys
import torch
torch.cuda.set_per_process_memory_fraction(float(sys.argv[1]))
kept = [torch.empty(128 << 20, dtype=torch.uint8, device="cuda") for _ in range(16)]
"""


def test_the_memory_fraction_is_the_allocators_limit(tmp_path: Path) -> None:
    """Under ``set_per_process_memory_fraction(0.01)`` on an 80 GiB device (819.2 MiB allowed)
    sixteen 128 MiB tensors run out at the seventh, with PyTorch's message saying what is
    allowed; the same script under a fraction of 1.0 fits."""
    script(tmp_path, FRACTION)
    device = ("--device-memory", "80GiB", "--device-capability", "8.0", "--json")
    doc = json.loads(plan(tmp_path, *device, "train.py", "0.01").stdout)
    assert doc["fits"] is False
    assert doc["peak_allocated_bytes"] == 6 * 128 * MiB
    assert "Tried to allocate 128.00 MiB" in doc["oom_message"]
    assert "819.20 MiB allowed; Of the allocated memory 768.00 MiB" in doc["oom_message"]
    whole = json.loads(plan(tmp_path, *device, "train.py", "1.0").stdout)
    assert whole["fits"] is True
    assert whole["peak_allocated_bytes"] == 16 * 128 * MiB


WARMED = """
import json
import torch
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
).cuda()
static_x = torch.randn(256, 1024, device="cuda")
with torch.no_grad():
    model(static_x)  # warm-up on the default stream: its cuBLAS workspace
"""
"""A model and its static input, warmed up on the default stream (its cuBLAS workspace)."""

GRAPH = (
    WARMED
    + """
torch.cuda.empty_cache()
before = torch.cuda.memory_allocated()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    capturing = torch.cuda.is_current_stream_capturing()
    with torch.no_grad():
        static_y = model(static_x)
captured = torch.cuda.memory_allocated()
reserved = torch.cuda.memory_reserved()
for _ in range(5):
    static_x.copy_(torch.ones(256, 1024, device="cuda"))
    g.replay()
torch.cuda.empty_cache()
replayed = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
pools = {str(tuple(s["segment_pool_id"])) for s in torch.cuda.memory_snapshot()}
del static_y
g.reset()
torch._C._cuda_clearCublasWorkspaces()
torch.cuda.empty_cache()
print(json.dumps({
    "capturing": [capturing, torch.cuda.is_current_stream_capturing()],
    "output": captured - before, "reserved": reserved, "replayed": list(replayed),
    "pools": sorted(pools),
    "gone": [torch.cuda.memory_allocated() - before, torch.cuda.memory_reserved()],
}))
"""
)


def test_a_cuda_graphs_capture_lives_in_its_private_pool_and_replay_allocates_nothing(
    tmp_path: Path,
) -> None:
    """``torch.cuda.CUDAGraph`` and ``torch.cuda.graph`` run: the capture keeps its static output
    and its capture stream's cuBLAS workspace allocated (the 4 MiB hidden activation is freed
    inside it) while its pool's segments stay reserved through ``empty_cache``; five replays
    allocate nothing; after ``reset``, clearing cuBLAS's workspaces and ``empty_cache`` the
    pool's memory is back."""
    script(tmp_path, GRAPH)
    facts = printed_facts(tmp_path, "--device-capability", "8.0")
    assert facts["capturing"] == [True, False]
    assert facts["output"] == 1 * MiB + WORKSPACE
    replayed = facts["replayed"]
    assert isinstance(replayed, list)
    assert replayed[0] == facts["output"] + _weights_and_input()
    assert replayed[1] == facts["reserved"]  # the pool's segment is kept; the ones() was freed
    assert facts["pools"] == ["(0, 0)", "(1, 0)"]
    gone = facts["gone"]
    assert isinstance(gone, list)
    assert gone[0] == -WORKSPACE  # both streams' workspaces cleared: the default's was before
    assert gone[1] < replayed[1]


RESET_GRAPH = (
    WARMED
    + """
before = torch.cuda.memory_allocated()
figures = []
for _ in range(2):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        static_y = model(static_x)
    for _ in range(3):
        g.replay()
    captured = torch.cuda.memory_allocated() - before
    del static_y
    g.reset()
    torch.cuda.empty_cache()
    pools = sorted({str(tuple(s["segment_pool_id"])) for s in torch.cuda.memory_snapshot()})
    figures.append([captured, torch.cuda.memory_allocated() - before, pools])
print(json.dumps({"figures": figures}))
"""
)


def test_a_reset_graph_frees_its_capture_streams_cublas_workspace(tmp_path: Path) -> None:
    """``CUDAGraph::reset`` clears the cuBLAS workspaces of its capture stream
    (``clearCublasWorkspacesForStream``) before releasing its pool: after ``reset`` and
    ``empty_cache``, without clearing every workspace, the capture's workspace is no longer
    allocated and the pool's segments are gone, and the next capture takes a new one."""
    script(tmp_path, RESET_GRAPH)
    facts = printed_facts(tmp_path, "--device-capability", "8.0")
    output = 1 * MiB
    assert facts["figures"] == [[output + WORKSPACE, 0, ["(0, 0)"]]] * 2


def _weights_and_input() -> int:
    """The model's parameters, the static input and the default stream's cuBLAS workspace."""
    weights = (1024 * 4096 + 4096 + 4096 * 1024 + 1024) * 4
    return weights + 256 * 1024 * 4 + WORKSPACE


GRAPHED = """
import json
import torch
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                            torch.nn.Linear(2048, 512)).cuda()
x = torch.randn(64, 512, device="cuda")
graphed = torch.cuda.make_graphed_callables(model, (x,), pool=torch.cuda.graph_pool_handle())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    graphed(x).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
pool = torch.cuda.MemPool()
with torch.cuda.use_mem_pool(pool):
    pooled = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
segments = pool.snapshot()
in_pool = sorted(s["total_size"] for s in segments)
del pooled
outside = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
reused = any(s["address"] <= outside.data_ptr() < s["address"] + s["total_size"]
             for s in segments)
before = torch.cuda.memory_reserved()
del pool
print(json.dumps({"in_pool": in_pool, "reused": reused,
                  "freed": before - torch.cuda.memory_reserved()}))
"""


def test_graphed_callables_train_and_a_mem_pool_keeps_its_segments_to_itself(
    tmp_path: Path,
) -> None:
    """``make_graphed_callables`` trains for three steps under plan; a ``MemPool`` used with
    ``use_mem_pool`` holds its 3 MiB tensor in a 20 MiB segment of its own, which a later
    allocation outside cannot reuse even once free, and which goes back when the pool is
    gone."""
    script(tmp_path, GRAPHED)
    facts = printed_facts(tmp_path, "--device-capability", "8.0")
    assert facts["in_pool"] == [20 * MiB]
    assert facts["reused"] is False
    assert facts["freed"] == 20 * MiB


PINNED = """
import json
import torch
from torch.utils.data import DataLoader, TensorDataset
staging = torch.empty(1024, pin_memory=True)
with torch.cuda.profiler.profile():
    torch.cuda.cudart().cudaProfilerStart()
data = TensorDataset(torch.randn(64, 32), torch.randint(0, 10, (64,)))
seen = 0
for xb, yb in DataLoader(data, batch_size=16, pin_memory=True, num_workers=2):
    xb, yb = xb.cuda(non_blocking=True), yb.to("cuda", non_blocking=True)
    seen += xb.shape[0]
print(json.dumps({"seen": seen, "allocated": torch.cuda.memory_allocated()}))
"""


def test_pinned_host_memory_and_the_profilers_range_run_unchanged(tmp_path: Path) -> None:
    """``pin_memory=True`` in a factory and in a two-worker ``DataLoader``, and the CUDA
    profiler's start and stop, run under plan; every batch arrives and the last one is on the
    device (16x32 floats and 16 int64 labels, each rounded to 512 bytes)."""
    script(tmp_path, PINNED)
    facts = printed_facts(tmp_path, "--device-capability", "8.0")
    assert facts == {"seen": 64, "allocated": 2048 + 512}


SHARED = """
import json, torch
model = torch.nn.Linear(1024, 1024).cuda()
model.share_memory()
host = torch.zeros(4).share_memory_()
print(json.dumps({"shared": next(model.parameters()).is_shared(), "host": host.is_shared(),
                  "allocated": torch.cuda.memory_allocated()}))
"""


def test_a_device_model_shared_for_other_processes_stays_where_it_is_and_is_said(
    tmp_path: Path,
) -> None:
    """model.share_memory() of a CUDA model keeps its blocks (it crashed) and says the
    processes that use it are not planned; a host tensor is still put in shared memory."""
    script(tmp_path, SHARED)
    done = plan(tmp_path, "--device-capability", "8.0", "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[0])
    assert facts == {"shared": True, "host": True, "allocated": 4 * MiB + 4096}
    said = [line for line in done.stderr.splitlines() if line.startswith("memforensics plan:")]
    assert any("shared for other processes" in line and "train.py:4)" in line for line in said)


OWN_SETTINGS = """
import json, os, sys
import torch
if sys.argv[1] == "before":
    os.environ["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"
first = torch.empty(10 << 20, dtype=torch.uint8, device="cuda")
if sys.argv[1] == "after":
    os.environ["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"
if sys.argv[1] == "set":
    torch.cuda.memory._set_allocator_settings("expandable_segments:True")
later = [torch.empty(100 << 20, dtype=torch.uint8, device="cuda") for _ in range(3)]
kinds = [s["is_expandable"] for s in torch.cuda.memory_snapshot()]
print(json.dumps({"kinds": sorted(kinds), "reserved": torch.cuda.memory_reserved()}))
"""


@pytest.mark.parametrize(
    ("when", "kinds", "reserved", "conf"),
    [
        ("before", [True], 320 * MiB, "expandable_segments:True"),  # mapped 20 MiB at a time
        ("after", [False, False, False, False], 310 * MiB, ""),
        ("set", [False, True], 310 * MiB, "expandable_segments:True"),
    ],
)
def test_the_scripts_own_allocator_settings_apply_as_on_a_gpu(
    tmp_path: Path, when: str, kinds: list[bool], reserved: int, conf: str
) -> None:
    """Settings the script puts in ``PYTORCH_ALLOC_CONF`` before it first uses the device are
    the allocator's (one expandable segment), ones put there later are not (a segment per
    tensor), and ``_set_allocator_settings`` makes later segments expandable; the plan reports
    the settings the allocator ended with."""
    script(tmp_path, OWN_SETTINGS)
    done = plan(tmp_path, "--json", "train.py", when)
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith('{"kinds"')]
    seen = json.loads(line)
    assert seen["kinds"] == kinds
    assert seen["reserved"] == reserved
    assert json.loads(done.stdout)["allocator_conf"] == conf


RAW_STREAM = """
import json
import torch
default = torch._C._cuda_getCurrentRawStream(0)
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    inside = torch._C._cuda_getCurrentRawStream(torch.cuda.current_device())
print(json.dumps({"default": default == torch.cuda.default_stream().cuda_stream,
                  "inside": inside == side.cuda_stream, "differ": inside != default}))
"""


def test_the_raw_current_stream_is_the_current_streams_handle(tmp_path: Path) -> None:
    """``torch._C._cuda_getCurrentRawStream`` (bitsandbytes reads it when imported, so
    ``import peft`` with bitsandbytes installed failed) answers the current stream's handle,
    the one ``torch.cuda.current_stream().cuda_stream`` gives, inside a side stream too."""
    script(tmp_path, RAW_STREAM)
    facts = printed_facts(tmp_path)
    assert facts == {"default": True, "inside": True, "differ": True}


STREAM_PER_EPOCH = """
import json, sys
import torch
epochs = int(sys.argv[1])
for epoch in range(epochs):  # a prefetcher made anew each epoch, with its own side stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        batch = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")
    del batch
pooled = torch.cuda.memory_reserved()
with torch.cuda.stream(torch.cuda.Stream(priority=-1)):
    urgent = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")
print(json.dumps({"pooled": pooled, "with_urgent": torch.cuda.memory_reserved()}))
"""


def test_new_streams_are_taken_round_robin_from_cudas_stream_pool(tmp_path: Path) -> None:
    """``torch.cuda.Stream()`` made each epoch is the next of CUDA's 32 pooled streams, so the
    blocks cached on a stream are reused when it comes round again: reserved stops growing
    after 32 epochs, as on a GPU (it grew by a stream's blocks every epoch); a high-priority
    stream is from another pool and caches its own."""
    script(tmp_path, STREAM_PER_EPOCH)
    runs = [plan(tmp_path, "train.py", epochs) for epochs in ("32", "40")]
    assert all(done.returncode == 0 for done in runs), runs[-1].stderr
    thirty_two, forty = (json.loads(done.stdout.splitlines()[0]) for done in runs)
    assert thirty_two["pooled"] == 32 * 16 * MiB
    assert forty["pooled"] == thirty_two["pooled"]
    assert forty["with_urgent"] == thirty_two["pooled"] + 16 * MiB


EXTERNAL_STREAM = """
import json
import torch
side = torch.cuda.Stream()
wrapped = torch.cuda.ExternalStream(side.cuda_stream)  # a handle passed through another library
with torch.cuda.stream(wrapped):
    batch = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
del batch
before = torch.cuda.memory_reserved()
with torch.cuda.stream(side):
    again = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
on_side = torch.cuda.memory_reserved() - before
elsewhere = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
on_default = torch.cuda.memory_reserved() - before - on_side
print(json.dumps({"on_side": on_side, "on_default": on_default, "equal": wrapped == side,
                  "found": torch.cuda.get_stream_from_external(side.cuda_stream) == side}))
"""


def test_an_external_stream_is_the_stream_of_its_handle(tmp_path: Path) -> None:
    """``torch.cuda.ExternalStream(handle)`` and ``get_stream_from_external`` (which failed: the
    CPU build's class is a dummy) are the stream that handle names: a block cached on the
    wrapped stream serves that stream again, and the default stream takes a segment of its own,
    as CUDA's allocator keeps blocks by stream."""
    script(tmp_path, EXTERNAL_STREAM)
    facts = printed_facts(tmp_path)
    # 4 MiB is over 1 MiB and under 10 MiB: a new segment of 20 MiB (kLargeBuffer)
    assert facts == {"on_side": 0, "on_default": 20 * MiB, "equal": True, "found": True}


READ_IN_CAPTURE = """
import sys
import torch
model = torch.nn.Linear(256, 256).cuda()
static_x = torch.randn(64, 256, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g, capture_error_mode=sys.argv[1]):
    static_loss = model(static_x).pow(2).mean()
    if sys.argv[2] == "item":
        print("loss", static_loss.item())  # the host waits on the device: refused in capture
    if sys.argv[2] == "synchronize":
        torch.cuda.synchronize()  # so is a wait for the whole device
g.replay()
print("after replay", static_loss.item())
"""


@pytest.mark.parametrize(
    ("mode", "wait", "line"),
    [("global", "item", 10), ("relaxed", "item", 10), ("global", "synchronize", 12)],
)
def test_a_wait_for_the_device_inside_a_graph_capture_fails_as_on_a_gpu(
    tmp_path: Path, mode: str, wait: str, line: int
) -> None:
    """A script that reads ``loss.item()`` or calls ``torch.cuda.synchronize()`` inside
    ``torch.cuda.graph`` fails with CUDA's "operation not permitted when stream is capturing"
    at that line, as on a GPU (the plan had it fit); read after the replay, the value runs."""
    script(tmp_path, READ_IN_CAPTURE)
    failed = plan(tmp_path, "train.py", mode, wait)
    assert failed.returncode == 2, failed.stdout
    assert "operation not permitted when stream is capturing" in failed.stdout + failed.stderr
    assert f"train.py:{line}" in failed.stdout + failed.stderr
    done = plan(tmp_path, "train.py", mode, "after")
    assert done.returncode == 0, done.stderr
    assert "after replay" in done.stdout


WAIT_IN_CAPTURE = """
import sys
import torch
model = torch.nn.Linear(256, 256).cuda()
static_x = torch.randn(64, 256, device="cuda")
side = torch.cuda.Stream()
before = torch.cuda.Event(enable_timing=True)
before.record()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g, capture_error_mode=sys.argv[1]):
    static_y = model(static_x)
    inside = torch.cuda.Event(enable_timing=True)
    inside.record()
    wait = sys.argv[2]
    if wait == "stream.synchronize":
        torch.cuda.current_stream().synchronize()
    if wait == "stream.query":
        torch.cuda.current_stream().query()
    if wait == "side.synchronize":
        side.synchronize()
    if wait == "event.synchronize":
        inside.synchronize()
    if wait == "event.query":
        inside.query()
    if wait == "elapsed_time":
        before.elapsed_time(inside)
    if wait == "before.query":
        before.query()
    if wait == "never_recorded.query":
        torch.cuda.Event().query()
g.replay()
torch.cuda.synchronize()
print("after replay", before.elapsed_time(inside) > 0, side.query(), inside.query())
"""
CAPTURING = "operation not permitted when stream is capturing"
CAPTURED_EVENT = "operation not permitted on an event last recorded in a capturing stream"


@pytest.mark.parametrize(
    ("mode", "wait", "line", "error"),
    [
        ("global", "stream.synchronize", 16, CAPTURING),
        ("relaxed", "stream.query", 18, CAPTURING),  # the capturing stream, whatever the mode
        ("global", "side.synchronize", 20, CAPTURING),  # any stream, in global mode
        ("relaxed", "side.synchronize", None, None),
        ("relaxed", "event.synchronize", 22, CAPTURED_EVENT),
        ("global", "event.query", 24, CAPTURED_EVENT),
        ("relaxed", "elapsed_time", 26, CAPTURED_EVENT),
        ("thread_local", "before.query", 28, CAPTURING),
        ("relaxed", "before.query", None, None),
        ("global", "never_recorded.query", None, None),  # torch asks CUDA nothing
    ],
)
def test_a_stream_or_event_wait_inside_a_graph_capture_fails_as_on_a_gpu(
    tmp_path: Path, mode: str, wait: str, line: int | None, error: str | None
) -> None:
    """Inside ``torch.cuda.graph``, ``Stream.synchronize()``/``query()`` fail as
    ``cudaStreamSynchronize``/``cudaStreamQuery`` do (the capturing stream in any mode, any
    stream in global or thread-local mode), and ``Event.synchronize()``/``query()``/
    ``elapsed_time`` fail as ``cudaEvent*`` do: on an event recorded in the capture with
    ``cudaErrorCapturedEvent``, on another in global or thread-local mode; what CUDA allows
    runs, and after the capture every wait runs."""
    script(tmp_path, WAIT_IN_CAPTURE)
    done = plan(tmp_path, "train.py", mode, wait)
    if error is None:
        assert done.returncode == 0, done.stderr
        assert "after replay True True True" in done.stdout
        return
    assert done.returncode == 2, done.stdout
    assert error in done.stdout + done.stderr
    assert f"train.py:{line}" in done.stdout + done.stderr


GENERATORS = """
import json, sys
import torch

def set_state(new_state):  # Megatron's and DeepSpeed's activation checkpointing, as they do it
    torch.cuda.default_generators[torch.cuda.current_device()].set_state(new_state)

saved = torch.cuda.get_rng_state()
torch.cuda.manual_seed(1234)
seeded = torch.cuda.get_rng_state()
set_state(saved)
generator = torch.cuda.default_generators[0]
held = generator.clone_state()
generator.graphsafe_set_state(held)
drawn = torch.randn(64, 64, device="cuda", generator=generator)
json.dump({
    "generators": len(torch.cuda.default_generators),
    "device": str(generator.device),
    "state": [len(saved), saved.dtype == torch.uint8],
    "seed": int.from_bytes(bytes(seeded[:8].tolist()), "little"),
    "restored": torch.cuda.get_rng_state().tolist() == saved.tolist(),
    "drawn": [list(drawn.shape), str(drawn.device)],
}, open(sys.argv[1], "w"))
"""


def test_cuda_default_generators_hold_cuda_states_per_device(tmp_path: Path) -> None:
    """``torch.cuda.default_generators`` (empty on the CPU build: Megatron's RNG tracker
    stopped with an IndexError) has one generator per local device, whose state is CUDA's
    16 bytes with the seed first, which ``manual_seed`` sets, ``set_state`` restores and
    ``torch.cuda.get_rng_state`` reads; an operator draws with it as ``generator=``."""
    script(tmp_path, GENERATORS)
    done = plan(tmp_path, "--nproc-per-node", "2", "train.py", "out.json")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out.json").read_text()) == {
        "generators": 2,
        "device": "cuda:0",
        "state": [16, True],
        "seed": 1234,
        "restored": True,
        "drawn": [[64, 64], "cuda:0"],
    }
