"""A model loaded in 4 bits by bitsandbytes (QLoRA's ``BitsAndBytesConfig(load_in_4bit=True)``)
under the real ``memforensics plan``: its weights are packed on the planned device as on a GPU,
and PEFT and ``Trainer`` train it. A tiny Llama saved by the script itself (no downloads)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytest.importorskip("transformers")
pytest.importorskip("bitsandbytes")

pytestmark = [pytest.mark.integration, pytest.mark.torch, pytest.mark.extras]

FOUR_BITS = """
import json
import torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM

config = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, vocab_size=64)
LlamaForCausalLM(config).save_pretrained("tiny")  # on the host: real values, no device
quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                  bnb_4bit_compute_dtype=torch.bfloat16,
                                  bnb_4bit_use_double_quant=True)
model = AutoModelForCausalLM.from_pretrained("tiny", quantization_config=quantization,
                                             device_map={"": 0})
weight = model.model.layers[0].self_attn.q_proj.weight
loaded = torch.cuda.memory_allocated()
model.to("cuda")  # as Trainer and Accelerate's prepare do
y = model(torch.randint(0, 64, (2, 8), device="cuda")).logits
print(json.dumps({"kind": type(weight).__name__, "dtype": str(weight.dtype),
                  "shape": list(weight.shape), "stats": weight.quant_state is not None,
                  "loaded": loaded, "logits": list(y.shape)}))
"""


def test_a_model_loaded_in_4_bits_is_packed_on_the_device(tmp_path: Path) -> None:
    """Each 4-bit weight is packed two values a byte (``uint8``, half its elements) with its
    block statistics, as bitsandbytes packs it on a GPU, and the device holds the packed
    weights once loaded: the two layers' 14 projections' 4-bit bytes at least, below their
    16-bit bytes (they used to be held unpacked at their 32-bit size until the model's next
    move, since a stand-in's ``.device`` reads ``meta``); the model then moves and runs."""
    script(tmp_path, FOUR_BITS)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    assert facts["kind"] == "Params4bit"
    assert facts["dtype"] == "torch.uint8"
    assert facts["shape"] == [256 * 256 // 2, 1]
    assert facts["stats"] is True
    elements = 2 * (2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 512)  # 2 layers' projections
    assert elements // 2 <= facts["loaded"] < elements * 2
    assert facts["logits"] == [2, 8, 64]
