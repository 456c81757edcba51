"""One training step of a GPT-style language model, built on the CPU and moved to CUDA.

Shaped like the cs336 assignment's model (the shared ``small-lm-forward-backward`` workload):
truncated-normal ``Linear`` weights made with ``torch.empty`` in each module's ``__init__``,
RMSNorm, rotary embeddings, SwiGLU, an untied head; AdamW; bf16 autocast. The defaults are the
assignment's "2.7B" size (d_model 2560, 32 layers, SwiGLU d_ff 6912, vocabulary 50,257: 2.79B
parameters) at batch 4, context 512.

    memforensics plan benchmarks/plan_scripts/gpt_train.py [--d-model 2560 --layers 32 ...]
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        std = math.sqrt(2 / (d_in + d_out))
        weight = nn.init.trunc_normal_(torch.empty(d_out, d_in), std=std, a=-3 * std, b=3 * std)
        self.weight = nn.Parameter(weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.t()


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * x).to(dtype)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, d: int, heads: int, d_ff: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.q, self.k, self.v, self.o = (Linear(d, d) for _ in range(4))
        self.w1, self.w2, self.w3 = Linear(d, d_ff), Linear(d_ff, d), Linear(d, d_ff)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.norm1(x)
        q, k, v = (
            p(h).view(b, s, self.heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v)
        )
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(attn.transpose(1, 2).reshape(b, s, d))
        h = self.norm2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class GPT(nn.Module):
    def __init__(self, vocab: int, ctx: int, d: int, layers: int, heads: int, d_ff: int) -> None:
        super().__init__()
        std = 1.0
        self.embedding = nn.Parameter(
            nn.init.trunc_normal_(torch.empty(vocab, d), std=std, a=-3 * std, b=3 * std)
        )
        self.blocks = nn.ModuleList(Block(d, heads, d_ff) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = Linear(d, vocab)
        half = d // heads // 2
        angles = torch.outer(torch.arange(ctx), 10000 ** (-torch.arange(half) / half))
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        s = tokens.shape[1]
        x = self.embedding[tokens]
        for block in self.blocks:
            x = block(x, self.cos[:s], self.sin[:s])
        return self.head(self.norm(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--d-model", type=int, default=2560)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--d-ff", type=int, default=6912)
    parser.add_argument("--batch-size", type=int, default=4)
    args = parser.parse_args()
    model = GPT(args.vocab, args.context, args.d_model, args.layers, args.heads, args.d_ff)
    model = model.to("cuda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    shape = (args.batch_size, args.context)
    tokens = torch.randint(0, args.vocab, shape).to("cuda")
    targets = torch.randint(0, args.vocab, shape).to("cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(tokens)
    loss = F.cross_entropy(logits.float().view(-1, args.vocab), targets.view(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    params = sum(p.numel() for p in model.parameters())
    print(f"{params} parameters, peak {torch.cuda.max_memory_allocated()} B allocated")


if __name__ == "__main__":
    main()
