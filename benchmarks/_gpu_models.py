"""The training loops the real-GPU check runs: a small transformer, and its shape on the sim.

``CudaTransformer`` is plain torch (a randomly initialised model, nothing downloaded), so the
check needs no other package. ``SimTransformer`` allocates what that model allocates, block for
block in kind if not in exact size, on the sim device: weights, AdamW state created by the first
step, activations saved forward and freed backward, gradients.
"""

from __future__ import annotations

from typing import Any


class CudaTransformer:
    """Embedding, ``layers`` transformer blocks, LM head; next-token loss on random tokens."""

    vocab = 8192

    def __init__(self, torch: Any, device: Any, *, width: int, layers: int, seq: int) -> None:
        nn = torch.nn
        torch.manual_seed(0)
        self.torch = torch
        self.seq = seq
        self.device = device
        block = nn.TransformerEncoderLayer(
            width, nhead=max(1, width // 64), dim_feedforward=4 * width, batch_first=True
        )
        self.model: Any = nn.ModuleDict(
            {
                "embed": nn.Embedding(self.vocab, width),
                "blocks": nn.TransformerEncoder(block, layers, enable_nested_tensor=False),
                "head": nn.Linear(width, self.vocab),
            }
        ).to(self.device)
        self.optimizer: Any = torch.optim.AdamW(self.model.parameters(), lr=1e-4)

    def step(self, batch: int) -> None:
        """One optimizer step on a random batch of ``batch`` sequences."""
        torch = self.torch
        tokens = torch.randint(self.vocab, (batch, self.seq + 1), device=self.device)
        hidden = self.model["blocks"](self.model["embed"](tokens[:, :-1]))
        logits = self.model["head"](hidden)
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, self.vocab), tokens[:, 1:].reshape(-1)
        )
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def close(self) -> None:
        """Drop everything that holds device memory."""
        self.model = None
        self.optimizer = None


class SimTransformer:
    """The CUDA transformer's memory pattern: weights, optimizer state, activations per block."""

    def __init__(self, rig: Any, *, width: int, layers: int, seq: int) -> None:
        self.rig = rig
        self.width, self.layers, self.seq = width, layers, seq
        vocab = 8192
        shapes = [vocab * width, vocab * width]  # embedding, head
        shapes += [12 * width * width] * layers  # attention + feed-forward weights per block
        self.weights = [rig.empty(4 * n) for n in shapes]
        self.state: list[Any] = []  # AdamW moments, created by the first step like torch's

    def step(self, batch: int) -> None:
        """Activations forward, gradients backward (activations freed), optimizer state."""
        token = 4 * batch * self.seq
        heads = max(1, self.width // 64)
        saved = [self.rig.empty(token * self.width)]
        for _ in range(self.layers):
            saved.append(self.rig.empty(token * 3 * self.width))  # q, k, v
            saved.append(self.rig.empty(token * heads * self.seq))  # attention probabilities
            saved.append(self.rig.empty(token * 4 * self.width))  # feed-forward hidden
            saved.append(self.rig.empty(token * self.width))  # block output
        grads = [self.rig.empty(w.nbytes) for w in self.weights]
        while saved:
            activation = saved.pop()
            gradient = self.rig.empty(activation.nbytes)
            del activation, gradient
        if not self.state:
            self.state = [self.rig.empty(2 * w.nbytes) for w in self.weights]
        del grads

    def close(self) -> None:
        """Drop weights and optimizer state."""
        self.weights = []
        self.state = []
