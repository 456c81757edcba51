"""Which operations reach the planned device, and what CUDA adds to them: composite operators
under ``inference_mode`` reach it by their parts (with cuBLAS's workspace), CPU operators never
reach it, and cuBLAS's workspace takes the installed torch's size. Each runs through the real
``memforensics plan`` console command."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from planned import plan, printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

MiB = 1 << 20
SMALL_WORKSPACE = 8_519_680

COMPOSITES = """
import json, sys
import torch

torch.cuda.memory._record_memory_history(max_entries=100000)
model = torch.nn.Sequential(
    torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)
).cuda()
x = torch.randn(4, 256, 512, device="cuda")
with torch.inference_mode() if sys.argv[1] == "inference" else torch.no_grad():
    y = model(x)
    scores = torch.einsum("bsd,btd->bst", y, x)  # non-contiguous operands: einsum copies them
    mixed = y.transpose(1, 2) @ x  # matmul of a transposed batch copies it as well
    kept = scores.sum() + mixed.sum()
torch.cuda.memory._dump_snapshot("ops.pickle")
print(json.dumps({"peak": torch.cuda.max_memory_allocated()}))
"""


def _facts(done: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """The JSON line the script printed (its output goes to stderr under --json)."""
    [line] = [line for line in done.stderr.splitlines() if line.startswith("{")]
    return dict(json.loads(line))


def _allocations(folder: Path) -> list[int]:
    """The sizes of the planned trace's allocations, in order."""
    snapshot = pickle.loads((folder / "ops.pickle").read_bytes())
    return [e["size"] for e in snapshot["device_traces"][0] if e["action"] == "alloc"]


def test_inference_mode_makes_what_no_grad_makes(tmp_path: Path) -> None:
    """nn.Linear, einsum and matmul under inference_mode allocate what they do under no_grad,
    in the same order, to the same peak: the copies these composites make and cuBLAS's
    workspace included."""
    script(tmp_path, COMPOSITES)
    peaks, traces = {}, {}
    for mode in ("no_grad", "inference"):
        done = plan(tmp_path, "--json", "--device-capability", "8.0", "train.py", mode)
        assert done.returncode == 0, done.stderr
        peaks[mode] = _facts(done)["peak"]
        traces[mode] = _allocations(tmp_path)
    assert peaks["inference"] == peaks["no_grad"]
    assert traces["inference"] == traces["no_grad"]
    assert traces["inference"].count(SMALL_WORKSPACE) == 1
    # beyond the weights, input and three outputs: the workspace and einsum's copies
    outputs = 4 * 256 * (2048 + 512 + 256 + 512 + 512) * 4
    weights = (512 * 2048 * 2 + 2048 + 512) * 4
    assert peaks["inference"] >= weights + outputs + SMALL_WORKSPACE


UPSAMPLES = """
import json, sys
import torch
import torch.nn.functional as F

torch.cuda.memory._record_memory_history(max_entries=100000)
x = torch.randn(8, 3, 64, 64, device="cuda")
with torch.inference_mode() if sys.argv[1] == "inference" else torch.no_grad():
    y = F.interpolate(x, size=(256, 256), mode=sys.argv[2])
torch.cuda.memory._dump_snapshot("ops.pickle")
print(json.dumps({"peak": torch.cuda.max_memory_allocated()}))
"""


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_upsampling_under_inference_mode_makes_its_output_alone(tmp_path: Path, mode: str) -> None:
    """F.interpolate under inference_mode allocates what it does under no_grad, its output
    alone, as CUDA's upsample kernel does: not the corners and blends of torch's Python
    decomposition (six more output-sized tensors for bilinear)."""
    script(tmp_path, UPSAMPLES)
    peaks, traces = {}, {}
    for grad in ("no_grad", "inference"):
        done = plan(tmp_path, "--json", "--device-capability", "9.0", "train.py", grad, mode)
        assert done.returncode == 0, done.stderr
        peaks[grad] = _facts(done)["peak"]
        traces[grad] = _allocations(tmp_path)
    assert traces["inference"] == traces["no_grad"]
    assert peaks["inference"] == (8 * 3 * 64 * 64 + 8 * 3 * 256 * 256) * 4


ATTENTION = """
import json, sys
import torch

attention = torch.nn.MultiheadAttention(64, 4, batch_first=True).cuda()
x = torch.randn(2, 32, 64, device="cuda")
torch.cuda.memory._record_memory_history(max_entries=100000)
with torch.inference_mode() if sys.argv[1] == "inference" else torch.no_grad():
    y, _ = attention(x, x, x)
torch.cuda.memory._dump_snapshot("ops.pickle")
print(json.dumps({"peak": torch.cuda.max_memory_allocated()}))
"""


def test_a_composite_inside_a_module_folds_its_batch_under_inference_mode(tmp_path: Path) -> None:
    """nn.MultiheadAttention(batch_first=True) projects its transposed batch with F.linear,
    which reaches the plan whole under inference_mode: matmul folds the batch into one mm as
    under no_grad (the weight's transpose requires grad, a view of a parameter), so it copies
    the batch first, and the trace is no_grad's."""
    script(tmp_path, ATTENTION)
    traces = {}
    for grad in ("no_grad", "inference"):
        done = plan(tmp_path, "--json", "--device-capability", "9.0", "train.py", grad)
        assert done.returncode == 0, done.stderr
        traces[grad] = _allocations(tmp_path)
    batch, projected = 2 * 32 * 64 * 4, 2 * 32 * 3 * 64 * 4
    assert traces["inference"][:2] == [batch, projected]
    assert traces["inference"] == traces["no_grad"]


CPU_ONLY = """
import json
import torch
a = torch.ones(512, 512)
product = a @ a  # cuBLAS is not involved: nothing on the planned device
q = torch.ones(2, 4, 128, 64)
attended = torch.nn.functional.scaled_dot_product_attention(q, q, q)
with torch.inference_mode():
    linear = torch.nn.Linear(64, 64)(q)
print(json.dumps({
    "sum": product.sum().item(), "attended": attended.mean().item(),
    "linear_shape": list(linear.shape), "peak": torch.cuda.max_memory_allocated(),
}))
"""


def test_a_script_that_never_touches_cuda_computes_on_the_cpu_and_plans_to_nothing(
    tmp_path: Path,
) -> None:
    """CPU matmul, attention and an inference-mode linear give the CPU's values, put nothing on
    the planned device (no workspace either), and fit a 256 MiB device needing nothing: a
    process that never initializes CUDA holds no CUDA context."""
    script(tmp_path, CPU_ONLY)
    done = plan(tmp_path, "--json", "--device-memory", "256MiB", "--context-memory", "64MiB",
                "train.py")  # fmt: skip
    assert done.returncode == 0, done.stderr
    facts = _facts(done)
    assert facts["sum"] == 512**3
    assert facts["attended"] == 1.0
    assert facts["linear_shape"] == [2, 4, 128, 64]
    assert facts["peak"] == 0
    doc = json.loads(done.stdout)
    assert doc["peak_allocated_bytes"] == 0
    assert doc["peak_reserved_bytes"] == 0
    assert doc["fits"] is True
    assert doc["cuda_initialized"] is False
    assert doc["needed_bytes"] == 0
    text = plan(tmp_path, "--device-memory", "256MiB", "--context-memory", "64MiB", "train.py")
    assert "Fits: 0 B with no CUDA context (the script never initialized CUDA)" in text.stdout


@pytest.mark.parametrize(
    ("touch", "initialized"),
    [
        ("torch.cuda.init()", True),
        ("torch.cuda.set_device(0)", True),
        ("torch.cuda.mem_get_info()", True),
        ("torch.cuda.synchronize()", True),
        ("torch.cuda.current_device()", True),
        ('torch.empty(0, device="cuda")', True),
        ("torch.cuda.is_available(), torch.cuda.device_count()", False),
        ("torch.cuda.memory_allocated(), torch.cuda.max_memory_reserved()", False),
    ],
)
def test_the_cuda_context_is_counted_once_the_script_initializes_cuda(
    tmp_path: Path, touch: str, initialized: bool
) -> None:
    """A script that initializes CUDA without allocating (``torch.cuda.init()``, ``set_device``,
    a query that needs the device, an empty device tensor) needs the CUDA context on the device;
    one that only asks whether CUDA is there, or reads the allocator's zero statistics, as
    PyTorch answers them before initializing, needs nothing; NVML's used memory agrees, and
    ``torch.cuda.is_initialized()`` says False before and whether it did after, as on a GPU."""
    script(
        tmp_path,
        "import torch\nbefore = torch.cuda.is_initialized()\n"
        f"{touch}\nprint(torch.cuda.device_memory_used())\n"
        "print('is_initialized', before, torch.cuda.is_initialized())\n",
    )
    done = plan(tmp_path, "--json", "--context-memory", "64MiB", "train.py")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    context = 64 * MiB if initialized else 0
    assert doc["peak_reserved_bytes"] == 0
    assert doc["cuda_initialized"] is initialized
    assert doc["needed_bytes"] == context
    assert [int(line) for line in done.stderr.splitlines() if line.isdigit()] == [context]
    assert f"is_initialized False {initialized}" in done.stderr.splitlines()


MIXED = """
import json
import torch
a = torch.randn(256, 256)
b = a @ a
x = torch.randn(256, 256, device="cuda")
print(json.dumps({"after_cpu": torch.cuda.max_memory_allocated()}))
y = x @ x
print(json.dumps({"after_cuda": torch.cuda.max_memory_allocated()}), file=__import__("sys").stderr)
"""


@pytest.mark.parametrize(
    ("capability", "workspace"),
    [("8.0", SMALL_WORKSPACE), ("9.0", 32 * MiB), ("10.0", 32 * MiB), ("12.0", 32 * MiB)],
)
def test_the_workspace_comes_with_the_first_cuda_matmul_at_the_installed_torchs_size(
    tmp_path: Path, capability: str, workspace: int
) -> None:
    """A CPU matmul before any CUDA work charges nothing; the first matmul on CUDA takes the
    workspace torch 2.13 takes for the capability (32 MiB for Hopper and Blackwell)."""
    script(tmp_path, MIXED)
    done = plan(tmp_path, "--json", "--device-capability", capability, "train.py")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    facts = {key: value for line in lines for key, value in line.items()}
    tensor = 256 * 256 * 4
    assert facts["after_cpu"] == tensor
    assert facts["after_cuda"] == 2 * tensor + workspace


NORM_GRAD = """
import torch
torch.cuda.memory._record_memory_history(max_entries=100000)
weight = torch.ones(768, device="cuda", requires_grad=True)
x = torch.randn(32, 256, 768, device="cuda")
(x * weight).sum().backward()  # the weight's gradient sums 8,192 rows into 768
torch.cuda.memory._dump_snapshot("ops.pickle")
"""


def test_a_gradient_summed_over_the_batch_stages_as_the_real_gpu_did(tmp_path: Path) -> None:
    """The reduction behind a norm weight's gradient takes, right after its 3,072-byte output,
    the 50,331,648-byte staging buffer and 24 bytes of semaphores the real forward-backward
    workload's GPU took for the same shape, and frees them, semaphores first."""
    script(tmp_path, NORM_GRAD)
    done = plan(tmp_path, "--device-capability", "8.0", "train.py")
    assert done.returncode == 0, done.stderr
    snapshot = pickle.loads((tmp_path / "ops.pickle").read_bytes())
    blocks = ("alloc", "free_requested", "free_completed")
    events = [(e["action"], e["size"]) for e in snapshot["device_traces"][0]]
    events = [event for event in events if event[0] in blocks]
    start = events.index(("alloc", 50_331_648))
    assert events[start - 1] == ("alloc", 768 * 4)
    assert events[start + 1 : start + 4] == [
        ("alloc", 24), ("free_requested", 24), ("free_completed", 24),
    ]  # fmt: skip
    assert ("free_requested", 50_331_648) in events[start + 4 :]


CLIP = """
import sys
import torch

model = torch.nn.Linear(500, 400).cuda().bfloat16()  # 200,000 weights: 4 chunks of 65,536
extra = torch.nn.Parameter(torch.ones(10, device="cuda", dtype=torch.bfloat16))
model(torch.ones(2, 500, device="cuda", dtype=torch.bfloat16)).sum().add(extra.sum()).backward()
torch.cuda.memory._record_memory_history()
torch.nn.utils.clip_grad_norm_([*model.parameters(), extra], 1.0, norm_type=float(sys.argv[1]))
torch.cuda.memory._dump_snapshot("clip.pickle")
"""


def _blocks(path: Path) -> list[tuple[str, int]]:
    """The snapshot's trace as (action, size), allocations and frees only."""
    trace = pickle.loads(path.read_bytes())["device_traces"][0]
    return [(e["action"], e["size"]) for e in trace if e["action"] in ("alloc", "free_completed")]


def test_clip_grad_norm_takes_the_partial_norms_foreach_norm_takes_on_cuda(tmp_path: Path) -> None:
    """``clip_grad_norm_``'s ``_foreach_norm`` over 3 bfloat16 gradients takes, before its
    3 two-byte norms, the float32 partial norms CUDA's kernel zeroes (3 tensors x 4 chunks x
    4 B) and frees them once the norms are made; an order it computes per tensor takes none."""
    script(tmp_path, CLIP)
    done = plan(tmp_path, "train.py", "2")
    assert done.returncode == 0, done.stderr
    events = _blocks(tmp_path / "clip.pickle")
    partials, norm = ("alloc", 48), ("alloc", 2)
    assert events[:5] == [partials, norm, norm, norm, ("free_completed", 48)]
    done = plan(tmp_path, "train.py", "3")
    assert done.returncode == 0, done.stderr
    assert ("alloc", 48) not in _blocks(tmp_path / "clip.pickle")


POW = """
import torch

exponents = torch.arange(0, 64, 2, device="cuda", dtype=torch.float32) / 64
torch.cuda.memory._record_memory_history()
frequencies = 10000.0 ** exponents
twos = 2 ** exponents
ones = 1 ** exponents
torch.cuda.memory._dump_snapshot("pow.pickle")
"""


def test_a_number_raised_to_a_tensor_puts_the_number_on_the_device(tmp_path: Path) -> None:
    """``number ** tensor`` (RoPE's ``theta ** exponents``) takes, after its output, the base
    ``pow_Scalar_out`` wraps as a zero-dimensional float64 or int64 tensor on the exponent's
    device, and frees it as it returns; a base of 1 only fills its output."""
    script(tmp_path, POW)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    events = _blocks(tmp_path / "pow.pickle")
    power, base, freed = ("alloc", 128), ("alloc", 8), ("free_completed", 8)
    assert events == [power, base, freed, power, base, freed, power]  # 1 ** t takes no base


THREADS = """
from concurrent.futures import ThreadPoolExecutor
import threading
import torch

def load(n):
    return torch.ones(n, 1024, device="cuda")  # 4 KiB a row

with ThreadPoolExecutor(max_workers=2) as pool:
    loaded = list(pool.map(load, [256, 512]))
seen = []
worker = threading.Thread(target=lambda: seen.append(torch.zeros(4).device.type))
worker.start()
worker.join()
print("threads", torch.cuda.memory_allocated(), [t.shape[0] for t in loaded], seen)
"""


def test_tensors_a_thread_puts_on_cuda_are_on_the_planned_device(tmp_path: Path) -> None:
    """Tensors a thread pool makes on "cuda" (as Hugging Face loads a checkpoint) are stand-ins
    held by the planned device, 3 MiB here, and a thread's CPU tensors stay on the CPU."""
    script(tmp_path, THREADS)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert f"threads {3 * MiB} [256, 512] ['cpu']" in done.stdout


HANDLES = """
import json
import threading
import torch

a = torch.randn(64, 64, device="cuda")
start = torch.cuda.memory_allocated()

def product(wait=None):
    torch.mm(a, a)
    if wait is not None:
        wait.wait()

def run(count):
    together = threading.Barrier(count)
    threads = [threading.Thread(target=product, args=(together,)) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return torch.cuda.memory_allocated() - start

joined = run(1)  # as generate() run from a Thread for a streamer
product()  # the main thread's first product, after that thread ended
main = torch.cuda.memory_allocated() - start
together = run(2)  # two threads alive at once
again = run(1)
print(json.dumps({"joined": joined, "main": main, "together": together, "again": again}))
"""


def test_a_thread_that_ended_leaves_its_cublas_workspace_to_the_next(tmp_path: Path) -> None:
    """cuBLAS's handles are pooled: a joined thread gives its handle back, so the main thread's
    first product after it uses that handle's workspace and takes none (it took a second one);
    two threads alive at once take one each, and a later thread reuses one of theirs."""
    script(tmp_path, HANDLES)
    facts = printed_facts(tmp_path)
    workspace = facts["joined"]
    assert isinstance(workspace, int)
    assert workspace > 0
    assert facts == {"joined": workspace, "main": workspace, "together": 3 * workspace,
                     "again": 3 * workspace}  # fmt: skip


CELLS = """
import json, sys
import torch

kind, grad = sys.argv[1], sys.argv[2]
cell = (torch.nn.LSTMCell if kind == "lstm" else torch.nn.GRUCell)(64, 128).cuda()
x = torch.randn(32, 64, device="cuda")
h = torch.randn(32, 128, device="cuda")
hx = (h, torch.randn(32, 128, device="cuda")) if kind == "lstm" else h
torch.mm(x, x.t())  # cuBLAS's workspace, taken before the trace
torch.cuda.memory._record_memory_history(max_entries=100000)
start = torch.cuda.memory_allocated()
modes = {"grad": torch.enable_grad, "no_grad": torch.no_grad, "inference": torch.inference_mode}
with modes[grad]():
    out = cell(x, hx)
    held = torch.cuda.memory_allocated() - start
    if grad == "grad":
        (out[0] if kind == "lstm" else out).sum().backward()
torch.cuda.memory._dump_snapshot("ops.pickle")
print(json.dumps({"held": held}))
"""


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_an_rnn_cell_runs_cudas_fused_cell_kernel(tmp_path: Path, kind: str) -> None:
    """nn.LSTMCell and nn.GRUCell allocate what RNN.cpp's CUDA branch does: the two gates'
    products, then _thnn_fused_*_cell's workspace and outputs; autograd keeps the gates and
    the workspace, no_grad and inference_mode only the outputs."""
    script(tmp_path, CELLS)
    batch, hidden = 32, 128
    hidden_bytes = batch * hidden * 4
    gates = {"lstm": 4, "gru": 3}[kind] * hidden_bytes
    # RNN.cu: the LSTM's workspace is empty_like(input_gates), then hy and cy; the GRU's is
    # hx.size(0) by hx.size(1) * GRU_WORKSPACE_MULTIPLIER (5), then hy
    made = {"lstm": [gates, hidden_bytes, hidden_bytes], "gru": [5 * hidden_bytes, hidden_bytes]}
    outputs = {"lstm": 2 * hidden_bytes, "gru": hidden_bytes}[kind]
    for grad in ("grad", "no_grad", "inference"):
        done = plan(tmp_path, "--json", "--device-capability", "9.0", "train.py", kind, grad)
        assert done.returncode == 0, done.stderr
        trace = _allocations(tmp_path)
        assert trace[: 4 + (kind == "lstm")] == [gates, gates, *made[kind]], grad
        kept = 2 * gates + sum(made[kind]) if grad == "grad" else outputs
        assert _facts(done)["held"] == kept, grad


ATTENTION_DROPOUT = """
import json, sys
import torch

attention = torch.nn.MultiheadAttention(64, 2, dropout=0.5, batch_first=True).cuda()
x = torch.randn(2, 48, 64, device="cuda")
torch.cuda.memory._record_memory_history(max_entries=100000)
with torch.enable_grad() if sys.argv[1] == "grad" else torch.no_grad():
    y, _ = attention(x, x, x, need_weights=sys.argv[2] == "weights")
torch.cuda.memory._dump_snapshot("ops.pickle")
print(json.dumps({"peak": torch.cuda.max_memory_allocated()}))
"""


def test_dropout_inside_multi_head_attention_runs_cudas_kernel(tmp_path: Path) -> None:
    """nn.MultiheadAttention(dropout=0.5) in training drops its attention weights with CUDA's
    native_dropout (a bool mask beside the output, no float noise) where it returns the weights,
    and runs scaled_dot_product_attention's fused kernel, which makes no score matrix, where
    it does not (nn.TransformerEncoderLayer's call)."""
    script(tmp_path, ATTENTION_DROPOUT)
    scores = 2 * 2 * 48 * 48  # batch, heads, queries, keys
    for grad in ("grad", "no_grad"):
        done = plan(tmp_path, "--json", "--device-capability", "9.0", "train.py", grad, "weights")
        assert done.returncode == 0, done.stderr
        trace = _allocations(tmp_path)
        assert trace.count(scores) == 1, grad  # dropout_cuda's bool mask
        assert trace.count(4 * scores) == 3, grad  # bmm's scores, softmax, dropout's output
        done = plan(tmp_path, "--json", "--device-capability", "9.0", "train.py", grad, "fused")
        assert done.returncode == 0, done.stderr
        trace = _allocations(tmp_path)
        assert scores not in trace, grad
        assert 4 * scores not in trace, grad


FAKE_MODE = """
import json, sys
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

real = torch.empty(1 << 18, device="cuda")
with FakeTensorMode():
    big = torch.empty(1 << 30, device="cuda")
    doubled = big * 2
held, peak = torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
print(json.dumps({"held": held, "peak": peak}))
"""


def test_tensors_made_under_a_fake_tensor_mode_take_no_device_memory(tmp_path: Path) -> None:
    """A script's own FakeTensorMode makes fake tensors, as on a GPU: its 4 GiB ``empty`` and
    the product of it hold nothing; only the real 1 MiB tensor beside them is on the device."""
    script(tmp_path, FAKE_MODE)
    assert printed_facts(tmp_path, "--device-capability", "9.0") == {
        "held": MiB,
        "peak": MiB,
    }


FAKE_CUDA = """
import json
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

with FakeTensorMode():
    made = torch.empty(4, 4, device="cuda")
    product = made @ made
print(json.dumps({
    "made": str(made.device), "is_cuda": made.is_cuda, "product": str(product.device)
}))
"""


def test_a_scripts_fake_cuda_tensors_report_cuda_as_torch_does(tmp_path: Path) -> None:
    """A script's own FakeTensorMode tensors on "cuda" read their fake device, ``cuda:0``, as
    the same script run by torch without the plan (no GPU needed) reads it."""
    script(tmp_path, FAKE_CUDA)
    unplanned = subprocess.run(
        [sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    torch_facts = json.loads(unplanned.stdout.splitlines()[0])
    assert torch_facts["made"] == "cuda:0"
    assert printed_facts(tmp_path, "--device-capability", "9.0") == torch_facts


AS_HOST_TENSOR = """
import json
import torch

ts = torch.linspace(0, 1, 5, device="cuda")
print(json.dumps({
    "as_tensor": torch.as_tensor(ts, dtype=torch.float64, device="cpu").tolist(),
    "tensor": torch.tensor(ts, device="cpu").tolist(),
}))
"""


def test_a_device_tensor_made_a_host_tensor_reads_its_values(tmp_path: Path) -> None:
    """``torch.as_tensor(t, device="cpu")`` of a device tensor (torchcde's interpolation of
    device times) copies its values to the host, as ``t.to("cpu")`` does."""
    script(tmp_path, AS_HOST_TENSOR)
    quarters = [0.0, 0.25, 0.5, 0.75, 1.0]
    facts = printed_facts(tmp_path, "--device-capability", "9.0")
    assert facts == {"as_tensor": quarters, "tensor": quarters}
