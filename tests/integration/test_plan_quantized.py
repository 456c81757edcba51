"""A model loaded in 4 bits by bitsandbytes (QLoRA's ``BitsAndBytesConfig(load_in_4bit=True)``)
under the real ``memforensics plan``: its weights are packed on the planned device as on a GPU,
and PEFT and ``Trainer`` train it. A tiny Llama saved by the script itself (no downloads). And
bitsandbytes' paged optimizers, whose states are managed memory outside PyTorch's allocator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, printed_facts, script

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
    16-bit bytes; the model then moves and runs."""
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


EIGHT_BITS = """
import json
import torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM

config = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, vocab_size=64)
LlamaForCausalLM(config).save_pretrained("tiny")
model = AutoModelForCausalLM.from_pretrained(
    "tiny", quantization_config=BitsAndBytesConfig(load_in_8bit=True), device_map={"": 0}
)
weight = model.model.layers[0].self_attn.q_proj.weight
loaded = torch.cuda.memory_allocated()
y = model(torch.randint(0, 64, (2, 8), device="cuda")).logits
print(json.dumps({"kind": type(weight).__name__, "dtype": str(weight.dtype),
                  "shape": list(weight.shape), "loaded": loaded, "logits": list(y.shape)}))
"""


def test_a_model_loaded_in_8_bits_holds_int8_weights_and_runs(tmp_path: Path) -> None:
    """A model loaded with load_in_8bit holds each projection as int8 (one byte an element,
    with its row statistics) as bitsandbytes quantizes it on a GPU, and its forward runs
    through LLM.int8()'s outlier columns (a size that depends on values, which failed on meta),
    where the weights stayed at 32 bits and the forward failed."""
    script(tmp_path, EIGHT_BITS)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    assert (facts["kind"], facts["dtype"], facts["shape"]) == (
        "Int8Params",
        "torch.int8",
        [256, 256],
    )
    elements = 2 * (2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 512)  # 2 layers' projections
    assert elements <= facts["loaded"] < elements * 2
    assert facts["logits"] == [2, 8, 64]
    assert "outlier columns" in done.stderr


PAGED = """
import json
import sys
import bitsandbytes as bnb
import torch

paged = sys.argv[1] == "paged"
model = torch.nn.Sequential(torch.nn.Linear(512, 256, bias=False),
                            torch.nn.Linear(256, 512, bias=False)).cuda()
optimizer = (bnb.optim.PagedAdamW if paged else bnb.optim.AdamW)(model.parameters(), lr=1e-3)
for _ in range(3):
    model(torch.randn(8, 512, device="cuda")).square().mean().backward()
    optimizer.step()
state = optimizer.state[model[0].weight]
print(json.dumps({"allocated": torch.cuda.memory_allocated(),
                  "paged": bool(getattr(state["state1"], "is_paged", False)),
                  "shape": list(state["state2"].shape)}))
"""


def _stepped(tmp_path: Path, *args: str) -> tuple[dict[str, object], str]:
    """The planned script's printed facts, and all it said."""
    done = plan(tmp_path, "train.py", *args)
    assert done.returncode == 0, done.stderr
    facts = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    return facts, done.stdout + done.stderr


def test_a_paged_optimizer_keeps_its_states_outside_the_allocator(tmp_path: Path) -> None:
    """bitsandbytes' ``PagedAdamW`` steps a model whose parameters have 100,000 elements or
    more (it used to fail calling the native ``cget_managed_ptr``): its two states per
    parameter are paged (CUDA managed memory, outside PyTorch's allocator), so the memory
    allocated after the steps is that of ``AdamW``'s run less exactly the states' bytes, and
    the plan says they are left out."""
    script(tmp_path, PAGED)
    paged, said = _stepped(tmp_path, "paged")
    plain, _ = _stepped(tmp_path, "plain")
    assert paged["paged"] is True
    assert plain["paged"] is False
    assert paged["shape"] == plain["shape"] == [256, 512]
    states = 2 * (2 * 512 * 256) * 4  # two float32 states for each of the two weights
    assert isinstance(paged["allocated"], int)
    assert isinstance(plain["allocated"], int)
    assert plain["allocated"] - paged["allocated"] == states
    assert paged["allocated"] >= 2 * (2 * 512 * 256) * 4  # the weights and their gradients
    assert "paged optimizer states" in said


RESUMED = """
import json
import bitsandbytes as bnb
import torch

model = torch.nn.Linear(512, 512, bias=False).cuda()
optimizer = bnb.optim.PagedAdamW(model.parameters(), lr=1e-3)
model(torch.randn(4, 512, device="cuda")).sum().backward()
optimizer.step()
torch.save(optimizer.state_dict(), "optimizer.pt")
saved = torch.load("optimizer.pt")["state"][0]["__bnb_optimizer_quant_state__"]["state1"]
before = torch.cuda.memory_allocated()
optimizer.load_state_dict(torch.load("optimizer.pt"))
model(torch.randn(4, 512, device="cuda")).sum().backward()
optimizer.step()
state = optimizer.state[model.weight]
print(json.dumps({"saved": str(saved.device), "grown": torch.cuda.memory_allocated() - before,
                  "paged": bool(getattr(state["state1"], "is_paged", False))}))
"""


def test_a_paged_optimizer_resumes_from_its_saved_state(tmp_path: Path) -> None:
    """A ``PagedAdamW`` state saved with ``torch.save`` is a host tensor in the file (on a GPU
    it is a host tensor over managed memory), and loaded back it goes onto the device as an
    ordinary tensor: the memory allocated grows by the two states' bytes (it used to fail
    copying out of a ``meta`` tensor) and the optimizer steps on."""
    script(tmp_path, RESUMED)
    facts, _ = _stepped(tmp_path)
    assert facts["saved"] == "cpu"
    assert facts["paged"] is False
    assert isinstance(facts["grown"], int)
    assert facts["grown"] >= 2 * 512 * 512 * 4


IMPORTED = """
import sys
import bitsandbytes.cextension as native
import torch
print(type(native.lib).__name__, torch.cuda.is_available(), file=sys.stderr)
if sys.argv[1] == "quantize":
    import bitsandbytes.functional as F
    F.quantize_4bit(torch.randn(64, 64, device="cuda", dtype=torch.float16))
    F.quantize_4bit(torch.randn(64, 64, device="cuda", dtype=torch.float16))
"""


@pytest.mark.parametrize(("run", "notes"), [("import", 0), ("quantize", 1)])
def test_bitsandbytes_failed_native_load_is_a_note_once_used_not_an_error(
    tmp_path: Path, run: str, notes: int
) -> None:
    """Importing bitsandbytes (``import peft`` does) loads its CUDA library, which cannot load
    without a CUDA runtime: no error record or traceback, which a GPU run never prints; a
    script that only imports it is told nothing, one whose bitsandbytes operators run on the
    planned device is told once."""
    script(tmp_path, IMPORTED)
    done = plan(tmp_path, "--json", "train.py", run)
    assert done.returncode == 0, done.stderr
    assert "library load error" not in done.stderr
    assert "Traceback" not in done.stderr
    mock = "ErrorHandlerMockBNBNativeLibrary True" in done.stderr
    said = [w for w in json.loads(done.stdout)["warnings"] if "native CUDA library" in w]
    assert len(said) == (notes if mock else 0)


PRODUCT = """
import json
import bitsandbytes as bnb
import bitsandbytes.functional as F
import torch

torch.mm(torch.ones(8, 8, device="cuda"), torch.ones(8, 8, device="cuda"))  # cuBLAS's workspace
weight, state = F.quantize_4bit(torch.randn(1024, 1024, device="cuda", dtype=torch.float16))
grown = {}
for rows in (2, 2048):
    x = torch.randn(rows, 1024, device="cuda", dtype=torch.float16)
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    y = bnb.matmul_4bit(x, weight.t(), quant_state=state)
    grown[rows] = torch.cuda.max_memory_allocated() - before
    del x, y
print(json.dumps(grown))
"""


def test_a_4_bit_product_over_many_rows_holds_its_dequantized_weight(tmp_path: Path) -> None:
    """bitsandbytes' ``gemm_4bit`` on CUDA dequantizes the whole weight into the input's dtype
    and multiplies by it where its fused kernel is not the faster (past 1,536 rows), so the
    peak holds that weight beside the output; over two rows it runs the fused kernel, which
    makes the output alone."""
    script(tmp_path, PRODUCT)
    facts = printed_facts(tmp_path)
    assert facts["2"] == 4096
    assert facts["2048"] == 2048 * 1024 * 2 + 1024 * 1024 * 2


LAYER = """
import json
import bitsandbytes as bnb
import torch

layer = bnb.nn.Linear4bit(256, 128, bias=False, compute_dtype=torch.float16).cuda()
y = layer(torch.randn(4, 256, device="cuda", dtype=torch.float16))
print(json.dumps({"dtype": str(layer.weight.dtype), "shape": list(layer.weight.shape),
                  "out": list(y.shape), "allocated": torch.cuda.memory_allocated()}))
"""


def test_a_4_bit_layer_built_on_the_host_moves_to_the_device(tmp_path: Path) -> None:
    """A ``Linear4bit`` made on the host and moved with ``.cuda()`` quantizes its weight onto
    the device, as on a GPU, where the plan stopped with "Couldn't swap Linear4bit.weight"."""
    script(tmp_path, LAYER)
    facts = printed_facts(tmp_path)
    assert facts["dtype"] == "torch.uint8"
    assert (facts["shape"], facts["out"]) == ([256 * 128 // 2, 1], [4, 128])
    assert isinstance(facts["allocated"], int)
    assert facts["allocated"] >= 256 * 128 // 2
