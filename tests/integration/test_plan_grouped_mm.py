"""``torch._grouped_mm`` on the planned device takes the dtypes CUDA's kernel takes (float32
and float16 by its loop of products, bfloat16 by CUTLASS) where torch's ``meta`` kernel takes
bfloat16 only, and makes its output as CUDA does, rows padded to 16 bytes
(``create_grouped_gemm_output_tensor`` in ``ATen/native/GroupedMMUtils.h``); the sizes are
worked out here from the shapes. Each runs through the real ``memforensics plan`` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

TOKENS, DIM, EXPERTS, BLOCK = 512, 64, 4, 512

GROUPED = f"""
import json, sys
import torch

dtype = getattr(torch, sys.argv[1])
out_features = int(sys.argv[2])
x = torch.randn({TOKENS}, {DIM}, device="cuda", dtype=dtype, requires_grad=True)
# stored (experts, out, in) as a Linear's weight, multiplied transposed: column-major
w = torch.randn({EXPERTS}, out_features, {DIM}, device="cuda", dtype=dtype, requires_grad=True)
offs = torch.tensor([128, 256, 384, 512], device="cuda", dtype=torch.int32)
before = torch.cuda.memory_allocated()
y = torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
made = torch.cuda.memory_allocated() - before
grads = None
if sys.argv[3] == "backward":
    y.backward(torch.ones_like(y))
    grads = [list(x.grad.shape), list(w.grad.shape)]
print(json.dumps({{
    "made": made, "shape": list(y.shape), "stride": list(y.stride()), "dtype": str(y.dtype),
    "grads": grads,
}}))
"""


def _rounded(nbytes: int) -> int:
    return -(-nbytes // BLOCK) * BLOCK


@pytest.mark.parametrize(
    ("dtype", "out_features", "size"), [("float32", 96, 4), ("float16", 64, 2)]
)
def test_grouped_mm_of_float32_and_float16_experts_runs_as_on_cuda(
    tmp_path: Path, dtype: str, out_features: int, size: int
) -> None:
    """A float32 or float16 grouped product (a mixture of experts' layers, as Hugging Face's
    ``grouped_mm`` experts call it) runs forward and backward, its output in its operands'
    dtype, where torch's ``meta`` kernel refused anything but bfloat16."""
    script(tmp_path, GROUPED)
    done = plan(tmp_path, "train.py", dtype, str(out_features), "backward")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    assert found["shape"] == [TOKENS, out_features]
    assert found["dtype"] == f"torch.{dtype}"
    assert found["made"] == _rounded(TOKENS * out_features * size)
    assert found["grads"] == [[TOKENS, DIM], [EXPERTS, out_features, DIM]]


@pytest.mark.parametrize(
    ("dtype", "out_features", "size"), [("float32", 98, 4), ("float16", 100, 2)]
)
def test_a_grouped_output_s_rows_are_padded_to_16_bytes(
    tmp_path: Path, dtype: str, out_features: int, size: int
) -> None:
    """An output row whose bytes are no multiple of 16 is padded to one, as CUDA allocates it for
    TMA: the padded bytes are held."""
    script(tmp_path, GROUPED)
    done = plan(tmp_path, "train.py", dtype, str(out_features), "forward")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    per_row = 16 // size
    padded = -(-out_features // per_row) * per_row
    assert padded > out_features
    assert found["shape"] == [TOKENS, out_features]
    assert found["stride"] == [padded, 1]
    assert found["made"] == _rounded(TOKENS * padded * size)
