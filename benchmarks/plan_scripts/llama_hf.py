"""A Llama model built the way Hugging Face builds one, moved to CUDA, and one forward pass.

``AutoModelForCausalLM.from_config`` under ``torch.device("cpu")`` (every weight made on the
CPU, then ``_init_weights``' ``normal_``), then ``model.to("cuda", torch.bfloat16)``, then a
forward pass without gradients. The defaults are Llama 3 70B's shape (hidden 8192, 80 layers,
intermediate 28672, 64 heads, 8 key-value heads, vocabulary 128,256: 70.6B parameters), built
in float32 as ``from_config`` does without a dtype: 282 GB of weights on the host, were they
made. Needs ``transformers``.

    memforensics plan --device-memory 192GiB benchmarks/plan_scripts/llama_hf.py
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForCausalLM, LlamaConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hidden", type=int, default=8192)
    parser.add_argument("--intermediate", type=int, default=28672)
    parser.add_argument("--layers", type=int, default=80)
    parser.add_argument("--heads", type=int, default=64)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--tokens", type=int, default=512)
    args = parser.parse_args()
    config = LlamaConfig(
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        vocab_size=args.vocab,
    )
    with torch.device("cpu"):
        model = AutoModelForCausalLM.from_config(config)
    model = model.to("cuda", torch.bfloat16)
    tokens = torch.randint(0, args.vocab, (1, args.tokens)).to("cuda")
    with torch.no_grad():
        model(tokens)
    params = sum(p.numel() for p in model.parameters())
    print(f"{params} parameters, peak {torch.cuda.max_memory_allocated()} B allocated")


if __name__ == "__main__":
    main()
