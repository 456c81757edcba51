"""What ``flex_attention`` allocates on the planned device: the fused Triton kernel's buffers
when ``torch.compile`` (Inductor) wraps it, torch's dense path (the scores materialised)
when it runs uncompiled, each checked against the sizes torch 2.13's source gives, computed
here from the shapes. Each runs through the real ``memforensics plan`` console command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

B, H, S, D = 2, 4, 512, 64
HALF = 2
FLOAT = 4
INT = 4
SCALAR = 512  # a 0-dim tensor's block
BLOCK = 128  # the block mask's default block size
SMALL_WORKSPACE = 8_519_680  # cuBLAS's workspace below capability 9.0

FLEX = f"""
import json, sys
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx

def relative(score, b, h, q_idx, kv_idx):
    return score + (q_idx - kv_idx)

how = sys.argv[1]
def used():
    return torch.cuda.memory_allocated()
figures = {{}}
start = used()
block_mask = create_block_mask(causal, {B}, {H}, {S}, {S}, device="cuda")
figures["mask"] = used() - start
q, k, v = (
    torch.randn({B}, {H}, {S}, {D}, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    for _ in range(3)
)
flex = flex_attention if how == "eager" else torch.compile(flex_attention)
score_mod = relative if how == "score" else None
before = used()
torch.cuda.reset_peak_memory_stats()
out = flex(q, k, v, score_mod=score_mod, block_mask=block_mask)
figures["forward_kept"] = used() - before
figures["forward_peak"] = torch.cuda.max_memory_allocated() - before
before = used()
torch.cuda.reset_peak_memory_stats()
out.sum().backward()
figures["backward_peak"] = torch.cuda.max_memory_allocated() - before
figures["grads"] = [tuple(t.grad.shape) == tuple(t.shape) for t in (q, k, v)]
print(json.dumps(figures))
"""


def _figures(tmp_path: Path, how: str) -> dict[str, object]:
    script(tmp_path, FLEX)
    done = plan(tmp_path, "--device-capability", "8.0", "train.py", how)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("{"))
    figures: dict[str, object] = json.loads(line)
    return figures


def _block(nbytes: int) -> int:
    """The caching allocator's block for a small request: a multiple of 512 bytes."""
    return -(-nbytes // 512) * 512


VECTOR = B * H * S * D * HALF  # q, k, v, the output and each gradient
ROWS = B * H * S * FLOAT  # a log-sum-exp, the row maxima, delta


def test_create_block_mask_on_cuda_keeps_the_block_masks_eight_int32_tensors(
    tmp_path: Path,
) -> None:
    """``create_block_mask(..., device="cuda")`` leaves the BlockMask's partial and full
    block counts (B, H, blocks) and indices (B, H, blocks, blocks), for queries and keys."""
    blocks = S // BLOCK
    counts = _block(B * H * blocks * INT)
    indices = _block(B * H * blocks * blocks * INT)
    assert _figures(tmp_path, "compiled")["mask"] == 4 * counts + 4 * indices


@pytest.mark.parametrize("how", ["compiled", "score"])
def test_compiled_flex_attention_allocates_the_fused_kernels_buffers(
    tmp_path: Path, how: str
) -> None:
    """Inside torch.compile the forward makes the log-sum-exp, the row maxima (freed) and the
    output, no scores; the backward makes the contiguous incoming gradient, delta and the
    three gradients (``torch/_inductor/kernel/flex/flex_attention.py``), with or without a
    score_mod."""
    figures = _figures(tmp_path, how)
    assert figures["forward_kept"] == VECTOR + ROWS
    assert figures["forward_peak"] == VECTOR + 2 * ROWS
    # out.sum() and its 0-dim gradient, then grad_out made contiguous, delta, dq, dk, dv
    assert figures["backward_peak"] == 2 * SCALAR + VECTOR + ROWS + 3 * VECTOR
    assert figures["grads"] == [True, True, True]


def test_uncompiled_flex_attention_materialises_the_scores_and_keeps_what_autograd_saves(
    tmp_path: Path,
) -> None:
    """Without torch.compile, CUDA runs flex's dense path: the float32 B·H·S² scores exist
    during the forward, which keeps its output, log-sum-exp and maxima for backward (beside
    the first matmul's cuBLAS workspace); the backward holds the scores again."""
    figures = _figures(tmp_path, "eager")
    scores = B * H * S * S * FLOAT
    assert figures["forward_kept"] == SMALL_WORKSPACE + VECTOR + 2 * ROWS
    assert int(figures["forward_peak"]) >= SMALL_WORKSPACE + 3 * scores  # type: ignore[call-overload]
    assert int(figures["backward_peak"]) >= 3 * scores + 3 * VECTOR  # type: ignore[call-overload]
    assert figures["grads"] == [True, True, True]


MODEL = f"""
import json
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx

class Attention(torch.nn.Module):
    def forward(self, q, k, v, block_mask):
        out = flex_attention(q, k, v, block_mask=block_mask)
        return (torch.sigmoid(out.float() / 7.5) * 30).sum()

block_mask = create_block_mask(causal, {B}, {H}, {S}, {S}, device="cuda")
q, k, v = (
    torch.randn({B}, {H}, {S}, {D}, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    for _ in range(3)
)
model = torch.compile(Attention(), fullgraph=True)
before = torch.cuda.memory_allocated()
loss = model(q, k, v, block_mask)
kept = torch.cuda.memory_allocated() - before
loss.backward()
print(json.dumps({{"forward_kept": kept, "grads": [t.grad is not None for t in (q, k, v)]}}))
"""


def test_a_compiled_model_calling_flex_attention_runs_as_inductors_graphs(
    tmp_path: Path,
) -> None:
    """A compiled module that calls flex_attention runs as Inductor's graphs, not eagerly:
    its forward keeps the output and log-sum-exp the fused kernel's backward reads and the
    loss, and none of the float32 copies eager autograd would save for the pointwise tail."""
    script(tmp_path, MODEL)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    assert "runs eagerly" not in done.stderr
    figures = json.loads(next(x for x in done.stdout.splitlines() if x.startswith("{")))
    assert figures["forward_kept"] == VECTOR + ROWS + SCALAR
    assert figures["grads"] == [True, True, True]
