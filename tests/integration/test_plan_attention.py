"""Which attention kernel a planned script gets: the one CUDA's dispatcher picks for the
script's own backend restrictions (``sdpa_kernel``, ``enable_*_sdp``, the deprecated
``sdp_kernel``), each checked by the bytes that kernel holds, computed here from the shapes.
Each runs through the real ``memforensics plan`` console command."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

B, H, S, D = 8, 16, 2048, 64
HALF = 2
FLOAT = 4
SMALL_WORKSPACE = 8_519_680  # cuBLAS's workspace below capability 9.0
SCALAR = 512  # a 0-dim tensor's block

ATTENTION = f"""
import json, sys, warnings
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

q = torch.randn({B}, {H}, {S}, {D}, device="cuda", dtype=torch.float16, requires_grad=True)
base = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
how = sys.argv[1]
if how == "math":
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
elif how == "no-flash":
    torch.backends.cuda.enable_flash_sdp(False)
    out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
elif how == "deprecated":
    warnings.simplefilter("ignore")
    with torch.backends.cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False):
        out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
elif how == "none":
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        out = F.scaled_dot_product_attention(q.float(), q.float(), q.float())
else:
    out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
print(json.dumps({{"peak": torch.cuda.max_memory_allocated() - base}}))
"""


def _peak(tmp_path: Path, how: str) -> int:
    script(tmp_path, ATTENTION)
    done = plan(tmp_path, "--device-capability", "8.0", "train.py", how)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("{"))
    return int(json.loads(line)["peak"])


def _fused_peak() -> int:
    """A fused kernel's output and its float32 log-sum-exp (B·H·S), kept for backward."""
    return B * H * S * D * HALF + B * H * S * FLOAT


SEEDS = 2 * SCALAR
"""What a fused kernel adds beside its output and log-sum-exp: flash attention's philox seed
and offset, which CUDA makes on the device (memory-efficient attention keeps them on the host)."""


def test_sdpa_kernel_math_holds_the_float32_scores_that_cuda_materialises(
    tmp_path: Path,
) -> None:
    """``sdpa_kernel(MATH)`` on half inputs plans CUDA's math path: float32 copies of q, k and
    v, the scaled query and keys, the causal bias, the B·H·S² scores and _safe_softmax's
    temporaries, at the bytes each holds on the GPU."""
    vector = B * H * S * D * FLOAT  # one float32 copy of q
    scores = B * H * S * S * FLOAT
    bias = S * S * FLOAT
    kept = 3 * vector + vector + bias + vector  # q, k, v upcast; q and kᵀ scaled; causal bias
    # inside _safe_softmax: the input scores, softmax, the -inf test (bool), its row reduction
    # (bool, B·H·S), the result; two 0-dim fills
    softmax = scores + scores + scores // FLOAT + B * H * S + scores + 2 * SCALAR
    assert _peak(tmp_path, "math") == SMALL_WORKSPACE + kept + softmax


def test_flash_disabled_on_half_inputs_plans_memory_efficient_attention(tmp_path: Path) -> None:
    """``enable_flash_sdp(False)`` on float16 at capability 8.0 leaves memory-efficient
    attention first: its output and log-sum-exp, no scores."""
    assert _fused_peak() <= _peak(tmp_path, "no-flash") <= _fused_peak() + SEEDS


def test_the_deprecated_context_manager_restricts_the_backends_too(tmp_path: Path) -> None:
    """``torch.backends.cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False)``
    leaves only math (cuDNN attention is not chosen on 8.0 ahead of it): the peak is the math
    path's, far above a fused kernel's."""
    assert _peak(tmp_path, "deprecated") > B * H * S * S * FLOAT > _fused_peak()


def test_no_restriction_keeps_the_fused_kernel(tmp_path: Path) -> None:
    """Without restrictions a half-precision causal attention gets flash attention: output and
    log-sum-exp only."""
    assert _fused_peak() <= _peak(tmp_path, "default") <= _fused_peak() + SEEDS


def test_a_restriction_no_kernel_satisfies_fails_as_torch_does(tmp_path: Path) -> None:
    """Flash attention alone on float32 inputs cannot run: the script fails with CUDA's
    error, not with a prediction."""
    script(tmp_path, ATTENTION)
    done = plan(tmp_path, "--device-capability", "8.0", "train.py", "none")
    assert done.returncode != 0
    assert "No available kernel" in done.stderr


GROUPED = """
import contextlib, json, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

kw = dict(device="cuda", requires_grad=True)
q = torch.randn(2, 8, 256, 64, **kw)
k, v = torch.randn(2, 2, 256, 64, **kw), torch.randn(2, 2, 256, 64, **kw)
only = {"math": SDPBackend.MATH, "efficient": SDPBackend.EFFICIENT_ATTENTION}.get(sys.argv[1])
torch.cuda.memory._record_memory_history(max_entries=100000)
with contextlib.nullcontext() if only is None else sdpa_kernel([only]):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    out.sum().backward()
trace = torch.cuda.memory._snapshot()["device_traces"][0]
sizes = [(e["action"], e["size"]) for e in trace if e["action"] in ("alloc", "free_completed")]
print(json.dumps({"key_grad": list(k.grad.shape), "trace": sizes}))
"""


def _grouped(tmp_path: Path, how: str) -> subprocess.CompletedProcess[str]:
    script(tmp_path, GROUPED)
    return plan(tmp_path, "--device-capability", "9.0", "train.py", how)


def test_float32_grouped_query_attention_falls_to_math_as_cuda_does(tmp_path: Path) -> None:
    """Float32 attention with fewer key heads (``enable_gqa``, a Llama's grouped heads trained
    in float32) runs math, as CUDA's dispatcher picks: memory-efficient attention's filters take
    no grouped heads (``check_batch_size_and_num_heads_dense<false>``). Forward and backward
    allocate what an explicit ``sdpa_kernel(MATH)`` allocates, and the keys' gradient has
    their two heads."""
    default, math = _grouped(tmp_path, "default"), _grouped(tmp_path, "math")
    assert default.returncode == 0, default.stderr
    assert math.returncode == 0, math.stderr
    found = json.loads(default.stdout.splitlines()[0])
    assert found["key_grad"] == [2, 2, 256, 64]
    assert found == json.loads(math.stdout.splitlines()[0])


def test_memory_efficient_attention_alone_refuses_grouped_heads_as_torch_does(
    tmp_path: Path,
) -> None:
    """``sdpa_kernel(EFFICIENT_ATTENTION)`` with grouped heads has no kernel that can run: the
    script fails with torch's error."""
    done = _grouped(tmp_path, "efficient")
    assert done.returncode != 0
    assert "No available kernel" in done.stderr
