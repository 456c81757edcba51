"""A script's own Triton under the real ``memforensics plan``, on a machine without Triton: its
kernels launch without allocating, autotuning and ``triton.testing.do_bench`` take on the
device what Triton's own take (the 256 MiB buffer it clears the L2 cache with, the copies
``restore_value`` makes), and the rest of the script runs on."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

MIB = 1 << 20
EMPTY_CACHE = 256 * MIB  # triton/backends/nvidia/driver.py: get_empty_cache_for_benchmark

KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    total = tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, total, mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    n = out.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
    add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024)
    return out


x = torch.randn(1024, 1024, device="cuda")  # 4 MiB
"""
LAUNCH = "    add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024)"


def _printed(stdout: str, label: str) -> list[str]:
    return next(line for line in stdout.splitlines() if line.startswith(label)).split()[1:]


def test_a_kernel_launch_allocates_nothing_and_the_script_runs_on(tmp_path: Path) -> None:
    """Two launches of a ``@triton.jit`` kernel into tensors the script made: the peak is those
    tensors alone, the script runs to its end, and the plan says once that kernels launched
    without running."""
    script(
        tmp_path,
        KERNEL
        + """
a = add(x, x)
b = add(a, x)
print("peak", torch.cuda.max_memory_allocated(), triton.next_power_of_2(1000))
""",
    )
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert _printed(done.stdout, "peak") == [str(12 * MIB), "1024"]
    said = [line for line in done.stderr.splitlines() if "Triton kernels" in line]
    assert len(said) == 1
    launch = (tmp_path / "train.py").read_text().splitlines().index(LAUNCH) + 1
    assert f"(first at {tmp_path / 'train.py'}:{launch})" in said[0]


def test_do_bench_holds_tritons_l2_buffer_while_it_calls_the_function(tmp_path: Path) -> None:
    """``triton.testing.do_bench`` of a function that makes a 4 MiB tensor peaks at the input,
    Triton's 256 MiB cache-clearing buffer and that tensor, gives a positive time, and leaves
    only the input allocated (the buffer cached, as the allocator keeps it)."""
    script(
        tmp_path,
        KERNEL
        + """
torch.cuda.reset_peak_memory_stats()
ms = triton.testing.do_bench(lambda: add(x, x))
low, mid, high = triton.testing.do_bench(lambda: add(x, x), quantiles=[0.2, 0.5, 0.8])
peak, now = torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated()
print("bench", peak, now, ms > 0, low <= high)
print("reserved", torch.cuda.memory_reserved())
""",
    )
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert _printed(done.stdout, "bench") == [str(4 * MIB + EMPTY_CACHE + 4 * MIB), str(4 * MIB),
                                              "True", "True"]  # fmt: skip
    assert int(_printed(done.stdout, "reserved")[0]) >= EMPTY_CACHE + 8 * MIB


AUTOTUNED = """
import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK": 256}, num_warps=4), triton.Config({"BLOCK": 1024})],
    key=["n"],
    restore_value=["out_ptr"],
)
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) * 2, mask=offsets < n)


x = torch.randn(1024, 1024, device="cuda")  # 4 MiB
out = torch.empty_like(x)
for n in (x.numel(), x.numel(), x.numel() // 2):
    torch.cuda.reset_peak_memory_stats()
    scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    print("launch", torch.cuda.max_memory_allocated())
"""


def test_autotuning_benchmarks_each_key_once_with_its_restored_copies(tmp_path: Path) -> None:
    """An autotuned kernel with two configs and ``restore_value``: its first launch of a key
    peaks at the input, the output, the output's saved copy and Triton's 256 MiB buffer; the
    same key again launches at once, with nothing beside the script's tensors; a new key
    benchmarks again."""
    script(tmp_path, AUTOTUNED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    launches = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("launch")]
    benchmarked = str(4 * MIB + 4 * MIB + 4 * MIB + EMPTY_CACHE)
    assert launches == [benchmarked, str(8 * MIB), benchmarked]


def test_a_triton_tutorial_sizes_its_grid_from_the_planned_device(tmp_path: Path) -> None:
    """Triton's fused-softmax tutorial reads the device's properties through Triton's driver,
    compiles its kernel ahead with ``warmup`` and launches the compiled kernel, checks it
    against torch with ``allclose``, and prints a ``perf_report`` table: it runs to its end."""
    script(
        tmp_path,
        """
import torch
import triton
import triton.language as tl
from triton.runtime import driver

DEVICE = triton.runtime.driver.active.get_active_torch_device()
properties = driver.active.utils.get_device_properties(DEVICE.index)
NUM_SM, NUM_REGS = properties["multiprocessor_count"], properties["max_num_regs"]
SIZE_SMEM, WARP_SIZE = properties["max_shared_mem"], properties["warpSize"]


@triton.jit
def softmax_kernel(output_ptr, input_ptr, n_rows, n_cols, BLOCK_SIZE: tl.constexpr):
    pass


def softmax(x):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    kernel = softmax_kernel.warmup(y, x, n_rows, n_cols, BLOCK_SIZE=triton.next_power_of_2(n_cols),
                                   num_warps=8, grid=(1,))
    kernel._init_handles()
    occupancy = NUM_REGS // (kernel.n_regs * WARP_SIZE * 8)
    occupancy = min(occupancy, SIZE_SMEM // kernel.metadata.shared)
    kernel[(min(NUM_SM * occupancy, n_rows), 1, 1)](y, x, n_rows, n_cols)
    return y


@triton.testing.perf_report(triton.testing.Benchmark(
    x_names=["N"], x_vals=[256, 512], line_arg="provider", line_vals=["triton", "torch"],
    line_names=["Triton", "Torch"], ylabel="ms", plot_name="softmax", args={"M": 64}))
def benchmark(M, N, provider):
    x = torch.randn(M, N, device=DEVICE)
    if provider == "torch":
        return triton.testing.do_bench(lambda: torch.softmax(x, axis=-1))
    return triton.testing.do_bench(lambda: softmax(x))


x = torch.randn(1823, 781, device=DEVICE)
assert torch.allclose(softmax(x), torch.softmax(x, axis=1))
print("device", DEVICE, NUM_SM, SIZE_SMEM)
benchmark.run(print_data=True, show_plots=True)
""",
    )
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    assert "device cuda:0 132 232448" in done.stdout
    table = done.stdout.splitlines()
    start = table.index("softmax:")
    assert table[start + 1].split() == ["N", "Triton", "Torch"]
    assert [row.split()[0] for row in table[start + 2 : start + 4]] == ["256", "512"]


def test_a_kernel_launched_inside_a_compiled_function_runs(tmp_path: Path) -> None:
    """A Triton launch inside a ``torch.compile``d function (dynamo breaks the graph around it,
    its rewritten bytecode holding a dict among its constants) runs, with the graphs on either
    side, and the script prints what it computed."""
    script(
        tmp_path,
        KERNEL
        + """
@torch.compile
def doubled_then_added(x, y):
    z = x * 2
    out = torch.empty_like(z)
    add_kernel[(triton.cdiv(z.numel(), 1024),)](z, y, out, z.numel(), BLOCK_SIZE=1024)
    return out.relu()


print("shape", *doubled_then_added(x, x).shape)
""",
    )
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert _printed(done.stdout, "shape") == ["1024", "1024"]


def test_a_kernels_outputs_read_as_made_up_and_its_integer_inputs_as_known(tmp_path: Path) -> None:
    """After a launch, a float tensor the kernel writes (a loss made as zeros) reads as the
    plan's made-up loss, not the zeros it held before, while integer arguments (labels) keep
    the values the script gave them; a library that tests for Triton with
    ``importlib.import_module`` (Liger Kernel's gates) finds it."""
    script(
        tmp_path,
        """
import importlib
import torch
import triton
import triton.language as tl


@triton.jit
def loss_kernel(loss_ptr, labels_ptr, n):
    pass


loss = torch.zeros(4, device="cuda")
labels = torch.arange(4, device="cuda")
loss_kernel[(1,)](loss, labels, 4)
print("read", loss.sum().item() > 0, *labels.tolist())
print("found", importlib.import_module("triton.language").__name__)
""",
    )
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert _printed(done.stdout, "read") == ["True", "0", "1", "2", "3"]
    assert _printed(done.stdout, "found") == ["triton.language"]


def test_a_kernel_annotated_with_tritons_types_is_defined_and_launches(tmp_path: Path) -> None:
    """A kernel whose parameters are annotated with Triton's type classes
    (``tl.pointer_type(tl.int64)``, evaluated when the module is imported, outside any kernel)
    is defined, and launches, where calling them had raised "Did you forget to add
    @triton.jit"; a kernel builtin called outside a kernel is still refused."""
    script(
        tmp_path,
        """
import torch
import triton
import triton.language as tl


@triton.jit
def copy_counts(counts: tl.pointer_type(tl.int64), out: tl.pointer_type(tl.int64), n: tl.int64):
    pass


counts = torch.arange(8, device="cuda")
out = torch.empty_like(counts)
copy_counts[(1,)](counts, out, 8)
try:
    tl.arange(0, 8)
except ValueError as refused:
    print("refused", "triton.jit" in str(refused))
print("type", tl.pointer_type(tl.int64))
""",
    )
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert _printed(done.stdout, "refused") == ["True"]
    assert _printed(done.stdout, "type") == ["triton.language.pointer_type(triton.language.int64)"]


def test_a_library_that_asks_whether_triton_is_installed_takes_its_triton_path(
    tmp_path: Path,
) -> None:
    """A library that asks ``importlib.util.find_spec`` and ``importlib.metadata`` whether
    Triton is installed (transformers' ``is_triton_available``, which TRL's fused
    log-probabilities follow) finds it, as on a GPU, and launches its kernel in place where its
    torch fallback would have made a float copy of the whole tile."""
    script(
        tmp_path,
        KERNEL
        + """
import importlib.metadata
import importlib.util

found = importlib.util.find_spec("triton") is not None
version = importlib.metadata.version("triton")
torch.cuda.reset_peak_memory_stats()
if found and version:
    out = add(x, x)
else:
    out = x.double() + x.double()
print("peak", found, torch.cuda.max_memory_allocated())
print("missing", importlib.util.find_spec("triton.no_such_module"))
""",
    )
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert _printed(done.stdout, "peak") == ["True", str(8 * MIB)]
    assert _printed(done.stdout, "missing") == ["None"]


@pytest.mark.extras
def test_a_library_version_gate_sees_the_triton_torch_pins(tmp_path: Path) -> None:
    """The stand-in reports the Triton torch 2.13.0's CUDA wheels require (3.7.1), so a
    library's version gate (transformers' ``is_triton_available("3.4.0")`` and ``"3.5.0"``,
    its MXFP4 quantizer's) takes the GPU's path, where 3.0.0 took the fallback."""
    pytest.importorskip("transformers")  # installed by the extras' session
    script(
        tmp_path,
        """
import importlib.metadata

import triton
from transformers.utils.import_utils import is_triton_available

print("version", triton.__version__.split("+")[0], importlib.metadata.version("triton"))
print("gates", is_triton_available("3.4.0"), is_triton_available("3.5.0"))
""",
    )
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert _printed(done.stdout, "version") == ["3.7.1", "3.7.1+memforensics.plan"]
    assert _printed(done.stdout, "gates") == ["True", "True"]
