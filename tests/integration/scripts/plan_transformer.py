"""A small transformer trained two steps with AdamW under bf16 autocast (planned by the tests)."""

import json

import torch
import torch.nn.functional as F
from torch import nn

B, S, D, H, V, L = 8, 512, 256, 4, 1000, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ff1 = nn.Linear(D, 4 * D)
        self.ff2 = nn.Linear(4 * D, D)
        self.n1 = nn.LayerNorm(D)
        self.n2 = nn.LayerNorm(D)

    def forward(self, x):
        q, k, v = self.qkv(self.n1(x)).view(B, S, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, S, D))
        return x + self.ff2(F.gelu(self.ff1(self.n2(x))))


model = nn.Sequential(nn.Embedding(V, D), *[Block() for _ in range(L)], nn.Linear(D, V))
model.to("cuda")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
tokens = torch.randint(0, V, (B, S), device="cuda")
param_bytes = sum(p.numel() * 4 for p in model.parameters())
weights = [p for p in model.parameters() if p.dim() == 2 and p is not model[0].weight]
torch.cuda.memory._record_memory_history()
for _step in range(2):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(tokens)
        loss = F.cross_entropy(logits.view(-1, V), tokens.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.memory._dump_snapshot("tf.pickle")
print(
    json.dumps(
        {
            "param_bytes": param_bytes,
            "allocated": torch.cuda.memory_allocated(),
            "weight_bf16_bytes": sorted({p.numel() * 2 for p in weights}),
            "is_cuda_param": next(model.parameters()).is_cuda,
            "logits_dtype": str(logits.dtype),
            "loss_dtype": str(loss.dtype),
            "scores_bytes": [B * H * S * S * 2, B * H * S * S * 4],
            "logits_bytes": logits.numel() * logits.element_size(),
        }
    )
)
