"""Attention kernels' own memory under the real ``memforensics plan``, against the traces an
H200 (torch 2.11.0+cu130, cuDNN 9.19) wrote for the same calls on 2026-12-04: flash attention's
backward copies the output and its gradient contiguous and takes its row sums and float32
accumulator, memory-efficient attention's its row sums and workspace (and for float32 inputs
the temporaries computing the sums), cuDNN attention its graph's workspaces; each freed as the
kernel returns. The expected traces are the real ones, allocation by allocation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

CALL = """
import json, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
backend = getattr(SDPBackend, sys.argv[1])
"""
TRACE = """
trace = torch.cuda.memory._snapshot()["device_traces"][0]
kept = {"alloc": "a", "free_completed": "f"}
print(json.dumps([[kept[e["action"]], e["size"]] for e in trace if e["action"] in kept]))
"""
"""The script's trace, printed as the allocations and frees it holds, in order."""

ATTENTION = (
    CALL
    + """b, hq, hkv, s, d = (int(a) for a in sys.argv[2:7])
causal, dtype = sys.argv[7] == "causal", getattr(torch, sys.argv[8])
q = torch.randn(b, hq, s, d, device="cuda", dtype=dtype, requires_grad=True)
k = torch.randn(b, hkv, s, d, device="cuda", dtype=dtype, requires_grad=True)
v = torch.randn(b, hkv, s, d, device="cuda", dtype=dtype, requires_grad=True)
torch.cuda.memory._record_memory_history(max_entries=100000)
with sdpa_kernel([backend]):
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hq != hkv)
    g = torch.ones_like(o)
    o.backward(g)
"""
    + TRACE
)

REAL = {
    "flash-1000": (
        "FLASH_ATTENTION 4 8 8 1000 64 causal bfloat16",
        "a4096000 a128000 a16 a8 a4096000 a4096000 a4096000 a4096000 a4096000 a4096000 a131072 "
        "a8388608 f8388608 f131072 f4096000 f4096000 f128000 f16 f8",
    ),
    "flash-grouped": (
        "FLASH_ATTENTION 3 16 4 1024 128 causal bfloat16",
        "a12582912 a196608 a16 a8 a12582912 a12582912 a12582912 a12582912 a3145728 a3145728 "
        "a196608 a25165824 a12582912 a12582912 f12582912 f12582912 f25165824 f196608 f12582912 "
        "f12582912 f196608 f16 f8",
    ),
    "efficient-777": (
        "EFFICIENT_ATTENTION 2 12 12 777 96 full bfloat16",
        "a3580416 a76800 a3580416 a3580416 a3580416 a3580416 a74592 a11012736 f74592 f11012736 "
        "f76800 a3580416 f3580416 a3580416 f3580416 a3580416 f3580416",
    ),
    "efficient-float32": (
        "EFFICIENT_ATTENTION 2 4 4 512 128 full float32",
        "a2097152 a16384 a2097152 a2097152 a2097152 a2097152 a2097152 a16384 a16384 f16384 "
        "f2097152 a2098176 f16384 f2098176 f16384 a2097152 f2097152 a2097152 f2097152 a2097152 "
        "f2097152",
    ),
}


@pytest.mark.parametrize("case", list(REAL))
def test_a_fused_attentions_backward_allocates_and_frees_as_an_h200_did(
    tmp_path: Path, case: str
) -> None:
    """The planned trace of one attention's forward and backward equals the H200's, block by
    block in order: the kernel's own copies, row sums, accumulators and workspaces included,
    and no philox seed or offset where the kernel makes them on the host."""
    arguments, real = REAL[case]
    assert _planned_trace(tmp_path, ATTENTION, arguments) == real.split()


def _planned_trace(tmp_path: Path, body: str, arguments: str) -> list[str]:
    """The trace ``body`` prints under ``plan`` on capability 9.0, as ``a<size>``/``f<size>``."""
    script(tmp_path, body)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py", *arguments.split())
    assert done.returncode == 0, done.stderr
    return [f"{action}{size}" for action, size in json.loads(done.stdout.splitlines()[0])]


WIDE = (
    CALL
    + """b, h, sq, sk, d = (int(a) for a in sys.argv[2:7])
causal, dtype = sys.argv[7] == "causal", getattr(torch, sys.argv[8])
kw = dict(device="cuda", dtype=dtype, requires_grad=True)
q = torch.randn(b, h, sq, d, **kw)
k, v = torch.randn(b, h, sk, d, **kw), torch.randn(b, h, sk, d, **kw)
g = torch.ones(b, h, sq, d, device="cuda", dtype=dtype)  # laid out (batch, heads, length, head)
torch.cuda.memory._record_memory_history(max_entries=100000)
with sdpa_kernel([backend]):
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    o.backward(g)
"""
    + TRACE
)

REAL_WIDE = {
    "efficient-256": (
        "EFFICIENT_ATTENTION 2 8 1024 1024 256 causal bfloat16",
        "a8388608 a65536 a16777216 f16777216 a8388608 a8388608 a8388608 a8388608 a65536 "
        "a41951232 f65536 f41951232 f8388608 f65536 a8388608 f8388608 a8388608 f8388608 "
        "a8388608 f8388608",
    ),
    "efficient-160-float32": (
        "EFFICIENT_ATTENTION 1 8 777 777 160 full float32",
        "a3978240 a25600 a3978240 a3978240 a3978240 a3978240 a3978240 a24864 a24864 f24864 "
        "f3978240 a5507712 f24864 f5507712 f3978240 f25600 a3978240 f3978240 a3978240 "
        "f3978240 a3978240 f3978240",
    ),
    "efficient-256-longer-keys": (
        "EFFICIENT_ATTENTION 4 4 512 1024 256 full bfloat16",
        "a4194304 a32768 a8388608 f8388608 a4194304 a4194304 a8388608 a8388608 a32768 "
        "a33558528 f32768 f33558528 f4194304 f32768 a4194304 f4194304 a8388608 f8388608 "
        "a8388608 f8388608",
    ),
    "flash-padded-100": (
        "FLASH_ATTENTION 2 8 1024 1024 100 causal bfloat16",
        "a3407872 a3407872 a3407872 a3407872 a65536 a16 a8 a3407872 a3407872 a3407872 a3407872 "
        "a3407872 a3407872 a65536 a8388608 f8388608 f65536 f3407872 f3407872 f3407872 "
        "f3407872 f3407872 f3407872 f65536 f16 f8 a3276800 f3407872 a3276800 f3407872 "
        "a3276800 f3407872",
    ),
}
"""Traces an H200 (torch 2.11.0+cu130) wrote on 2026-12-04 for :data:`WIDE`: heads above
128 for memory-efficient attention, a head size flash pads to a multiple of 8, and a gradient
laid out (batch, heads, length, head), which both kernels copy contiguous."""


@pytest.mark.parametrize("case", list(REAL_WIDE))
def test_wide_heads_padded_heads_and_a_strided_gradient_allocate_as_an_h200_did(
    tmp_path: Path, case: str
) -> None:
    """Memory-efficient attention above 128 wide heads takes its float32 output accumulator
    (half inputs) and its larger workspace, both kernels copy a (batch, heads, length, head)
    gradient contiguous, and flash pads a 100-wide head to 104: block by block, as the H200."""
    arguments, real = REAL_WIDE[case]
    assert _planned_trace(tmp_path, WIDE, arguments) == real.split()


CUDNN_ALLOCATIONS = {
    "cudnn-heads-12": (
        "CUDNN_ATTENTION 8 12 12 1024 64 causal bfloat16",
        [8, 8, 12582912, 393216, 256, 12582912, 12582912, 12582912, 12582912, 25559296],
    ),
    "cudnn-grouped": (
        "CUDNN_ATTENTION 3 16 4 1024 128 causal bfloat16",
        [8, 8, 12582912, 196608, 256, 12582912, 12582912, 3145728, 3145728, 50528512],
    ),
}


@pytest.mark.parametrize("case", list(CUDNN_ALLOCATIONS))
def test_cudnn_attention_takes_its_graphs_workspaces_as_an_h200_did(
    tmp_path: Path, case: str
) -> None:
    """cuDNN attention's allocations equal the H200's in size and order (its philox seed and
    offset first, 256 B of workspace after the forward's outputs, the backward's workspace
    after the three gradients), and each workspace is freed as soon as it is taken."""
    arguments, real = CUDNN_ALLOCATIONS[case]
    script(tmp_path, ATTENTION)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py", *arguments.split())
    assert done.returncode == 0, done.stderr
    events = [(action, size) for action, size in json.loads(done.stdout.splitlines()[0])]
    assert [size for action, size in events if action == "a"] == real
    for workspace in (256, real[-1]):
        taken = events.index(("a", workspace))
        assert events[taken + 1] == ("f", workspace)
