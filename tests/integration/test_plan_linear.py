"""``linear`` on an input it cannot fold into one ``addmm`` (a transposed batch) adds its bias
into the product in place on the planned device, as CUDA does; the CPU build under a dispatch
mode adds out of place. Runs through the real ``memforensics plan`` console command."""

from __future__ import annotations

import json
import pickle
import subprocess
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

BATCH, SEQ, IN, OUT = 8, 64, 256, 768
WORKSPACE = 8_519_680  # cuBLAS's workspace on capability 8.0
TRANSPOSED = f"""
import contextlib, json, sys
import torch
torch.cuda.memory._record_memory_history(max_entries=100000)
layer = torch.nn.Linear({IN}, {OUT}).cuda()
x = torch.zeros({BATCH}, {SEQ}, {IN}, device="cuda")
modes = {{"no_grad": torch.no_grad, "inference_mode": torch.inference_mode,
         "grad": contextlib.nullcontext}}
with modes[sys.argv[1]]():
    y = layer(x.transpose(0, 1))
if y.requires_grad:
    y.sum().backward()
torch.cuda.memory._dump_snapshot("linear.pickle")
print(json.dumps({{"shape": list(y.shape), "bias_grad": layer.bias.grad is not None}}))
"""


def _printed(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    """The JSON line the script printed (its output goes to stderr under --json)."""
    [line] = [line for line in done.stderr.splitlines() if line.startswith("{")]
    found: dict[str, object] = json.loads(line)
    return found


def _allocations(folder: Path) -> list[int]:
    """The sizes of the planned trace's allocations, in order."""
    snapshot = pickle.loads((folder / "linear.pickle").read_bytes())
    return [e["size"] for e in snapshot["device_traces"][0] if e["action"] == "alloc"]


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "grad"])
def test_bias_goes_into_the_product_in_place(tmp_path: Path, mode: str) -> None:
    """nn.Linear on a transposed batch makes what CUDA's at::native::linear makes: the weight,
    the bias, the input, matmul's contiguous copy of it, one product and cuBLAS's workspace; the
    bias is added into that product, so the forward makes no second product-sized block (the
    backward makes one: cuBLAS's copy of the sum's expanded gradient for the weight's
    product)."""
    script(tmp_path, TRANSPOSED)
    done = plan(tmp_path, "--json", "--device-capability", "8.0", "train.py", mode)
    assert done.returncode == 0, done.stderr
    printed = _printed(done)
    assert printed["shape"] == [SEQ, BATCH, OUT]
    assert printed["bias_grad"] is (mode == "grad")
    rows = BATCH * SEQ
    weight, bias, data = OUT * IN * 4, OUT * 4, rows * IN * 4
    product = rows * OUT * 4
    allocations = _allocations(tmp_path)
    assert allocations[:6] == [weight, bias, data, data, product, WORKSPACE]
    assert allocations.count(product) == (2 if mode == "grad" else 1)
    if mode != "grad":
        peak = json.loads(done.stdout)["peak_allocated_bytes"]
        assert peak == weight + _block(bias) + 2 * data + product + WORKSPACE


def _block(nbytes: int) -> int:
    """The caching allocator's block for a request of ``nbytes`` (a multiple of 512 B)."""
    return -(-nbytes // 512) * 512


PRODUCT = """
import json, sys
import torch
a = torch.randn(64, 512, device="cuda")
b = torch.randn(512, 1024, device="cuda")
acc = torch.zeros(64, 1024, device="cuda")
batch = torch.zeros(4, 64, 1024, device="cuda")
left, right = torch.randn(4, 64, 512, device="cuda"), torch.randn(4, 512, 1024, device="cuda")
a16, b16 = a.bfloat16(), b.bfloat16()
products = {
    "addmm_": lambda: acc.addmm_(a, b),
    "mm_out": lambda: torch.mm(a, b, out=acc),
    "baddbmm_": lambda: batch.baddbmm_(left, right),
    "out_dtype": lambda: torch.mm(a16, b16, out_dtype=torch.float32),
}
product = products[sys.argv[1]]
before = torch.cuda.memory_allocated()
made = product()
print(json.dumps({"grew": torch.cuda.memory_allocated() - before}))
"""


@pytest.mark.parametrize(
    ("variant", "output"),
    [("addmm_", 0), ("mm_out", 0), ("baddbmm_", 0), ("out_dtype", 64 * 1024 * 4)],
)
def test_a_product_in_place_or_into_out_takes_cublas_workspace(
    tmp_path: Path, variant: str, output: int
) -> None:
    """The first product of a run takes cuBLAS's workspace whether it writes in place
    (acc.addmm_), into out=, or with out_dtype, as each reaches the same cuBLAS call on CUDA;
    only the plain call took it."""
    script(tmp_path, PRODUCT)
    done = plan(tmp_path, "--json", "--device-capability", "8.0", "train.py", variant)
    assert done.returncode == 0, done.stderr
    assert _printed(done)["grew"] == WORKSPACE + output
