"""A small GPT-2 generating text on CUDA: the shape of an inference loop, one token at a time.

A 4-layer GPT-2 (d_model 256, 4 heads, vocabulary 5,000) with random weights, moved to CUDA,
then ``model.generate`` of 64 new tokens for a batch of 2 prompts of 16 tokens, greedy: some
ten thousand small operators, each on the same few shapes, where a training step runs fewer
and larger ones. Needs ``transformers``.

    memforensics plan benchmarks/plan_scripts/gpt2_generate.py
"""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main() -> None:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=5000, n_positions=256)
    model = GPT2LMHeadModel(config).to("cuda").eval()
    prompts = torch.randint(0, 5000, (2, 16), device="cuda")
    with torch.no_grad():
        out = model.generate(prompts, max_new_tokens=64, do_sample=False, pad_token_id=0)
    print(tuple(out.shape), torch.cuda.max_memory_allocated())


if __name__ == "__main__":
    main()
