"""RMSNorm under ``memforensics plan`` is the one kernel CUDA runs (``_fused_rms_norm``), not the
composite the CPU build runs for ``meta``: its forward makes the output and one float32 per
row, autograd keeps the input and those, and its backward makes the two gradients."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

torch = pytest.importorskip("torch")
if not hasattr(torch.ops.aten, "_fused_rms_norm_backward"):  # pragma: no cover - older torch
    pytest.skip("this torch's rms_norm runs its composite on CUDA too", allow_module_level=True)

ROWS, COLS = 16384, 256
HALF = ROWS * COLS * 2
"""Bytes of one bfloat16 ``ROWS`` by ``COLS`` tensor."""
RSTD = ROWS * 4
"""``rstd``: one float32 per row."""

NORM = """
import json
import torch
import torch.nn.functional as F

x = torch.randn({rows}, {cols}, device="cuda", dtype={dtype}, requires_grad=True)
w = torch.ones({cols}, device="cuda", dtype={weight_dtype}, requires_grad=True)
start = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
y = {call}
kept = torch.cuda.memory_allocated() - start
forward_peak = torch.cuda.max_memory_allocated() - start
loss = y.sum()
torch.cuda.reset_peak_memory_stats()
before = torch.cuda.memory_allocated()
loss.backward()
print(json.dumps({{
    "kept": kept,
    "forward_peak": forward_peak,
    "backward_rise": torch.cuda.max_memory_allocated() - before,
    "node": type(y.grad_fn).__name__,
}}))
"""


def _norm(
    folder: Path,
    call: str = "F.rms_norm(x, ({cols},), w, 1e-5)",
    dtype: str = "torch.bfloat16",
    weight_dtype: str = "torch.bfloat16",
) -> dict[str, object]:
    body = NORM.format(
        rows=ROWS, cols=COLS, dtype=dtype, weight_dtype=weight_dtype, call=call.format(cols=COLS)
    )
    script(folder, body)
    done = plan(folder, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    found: dict[str, object] = json.loads(done.stdout.splitlines()[0])
    return found


def test_rms_norm_keeps_its_output_and_rstd_as_the_fused_kernel_does(tmp_path: Path) -> None:
    """A bfloat16 ``F.rms_norm`` makes its output and ``rstd`` and nothing else (the composite
    kept two float32 copies of the input more, four times its bytes, and peaked higher); its
    backward makes the input's gradient and the weight's, and runs its kernel on a contiguous
    copy of the gradient (``dY.contiguous()`` in ``RMSNormBackwardKernelImpl``), which the
    ``sum``'s gradient, expanded from one value, is not."""
    found = _norm(tmp_path)
    assert found["node"] == "FusedRmsNormBackward0"
    assert found["kept"] == found["forward_peak"] == HALF + RSTD
    # the input's gradient, the weight's (512 B, a block), the gradient's copy, and sum's
    # 0-dim seed (512 B)
    assert found["backward_rise"] == HALF + 512 + HALF + 512


def test_an_rms_norm_module_runs_the_fused_kernel(tmp_path: Path) -> None:
    """``nn.RMSNorm`` (``F.rms_norm`` underneath) holds the same as the function."""
    call = "torch.nn.RMSNorm({cols}, device='cuda', dtype=torch.bfloat16)(x)"
    found = _norm(tmp_path, call=call)
    assert found["node"] == "FusedRmsNormBackward0"
    assert found["kept"] == HALF + RSTD + 512  # and the module's weight


def test_a_weight_of_another_dtype_takes_the_composite_as_on_cuda(tmp_path: Path) -> None:
    """``rms_norm_symint`` sends a weight whose dtype differs from the input's to the composite
    on CUDA too: upcast, scaled in float32, kept for its backward."""
    found = _norm(tmp_path, weight_dtype="torch.float32")
    assert found["node"] != "FusedRmsNormBackward0"
    assert int(str(found["kept"])) > 2 * HALF
