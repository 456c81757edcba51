"""The kinds ``summary`` gives a planned dump: the real ``memforensics plan`` console command on
small training scripts whose memory is known by construction, then the dump it writes explained.

A planned dump has what a real one recorded with Python frames has: the stacks of the script's
own code, and none on autograd's device thread.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import plan, script

from memforensics.analysis import explain

pytestmark = [pytest.mark.integration, pytest.mark.torch]

MiB = 1 << 20
HOPPER_WORKSPACE = 32 * MiB
"""cuBLAS's workspace per handle and stream on capability 9.0."""

ROPE_TRAINING = """
import torch
from torch import nn


class RoPE(nn.Module):
    def __init__(self, dim, end):
        super().__init__()
        freqs = torch.outer(torch.arange(end).float(), torch.ones(dim // 2))
        self.register_buffer("cache", torch.polar(torch.ones_like(freqs), freqs))

    def _reshape_cache(self, q, positions):
        return self.cache[positions].view(1, q.shape[1], 1, q.shape[-1] // 2)

    def forward(self, q, positions):
        c = self._reshape_cache(q, positions)
        q_ = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
        return torch.view_as_real(q_ * c).flatten(3).type_as(q)


class Block(nn.Module):
    def __init__(self, rope):
        super().__init__()
        self.rope, self.qkv = rope, nn.Linear(512, 1536, bias=False)
        self.out = nn.Linear(512, 512, bias=False)

    def forward(self, x, positions):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 8, 64).unbind(2)
        q, k = self.rope(q, positions), self.rope(k, positions)
        y = nn.functional.scaled_dot_product_attention(q, k, v)
        return x + self.out(y.reshape(b, s, d))


rope = RoPE(64, 2048).cuda()
blocks = nn.ModuleList([Block(rope) for _ in range(2)]).cuda()
opt = torch.optim.AdamW(blocks.parameters())
positions = torch.arange(1024, device="cuda")
for step in range(2):
    opt.zero_grad(set_to_none=True)
    h = torch.randn(4, 1024, 512, device="cuda")
    for block in blocks:
        h = block(h, positions)
    h.square().mean().backward()
    opt.step()
"""
WEIGHT_BYTES = 2 * (512 * 1536 + 512 * 512) * 4
"""The two blocks' float32 weights, and as many gradient bytes asked for after the last
backward (the allocator may serve one from a larger block it does not split)."""


def test_rope_s_gather_is_no_kv_cache_and_backward_s_workspace_no_gradient(
    tmp_path: Path,
) -> None:
    """Training with RoPE read through ``_reshape_cache`` in each attention: its gathers are
    activations, never a KV cache, and the workspace of autograd's thread is a workspace, so
    the gradients held at the end are the weights' bytes exactly."""
    script(tmp_path, ROPE_TRAINING)
    done = plan(tmp_path, "--device-capability", "9.0", "--out-dir", "out", "train.py")
    assert done.returncode == 0, done.stderr
    summary = explain(tmp_path / "out" / "planned.pickle")
    kinds = {k.kind: k.requested_bytes for k in summary.kinds}
    assert kinds["workspace"] == 2 * HOPPER_WORKSPACE
    assert kinds["gradient"] == WEIGHT_BYTES
    assert summary.peak is not None
    assert "kv_cache" not in {k.kind for k in summary.peak.kinds}
