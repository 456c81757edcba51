"""``x.to(other)`` takes ``other``'s device and dtype, as on a GPU: a mask cast like the
activations it multiplies (``mask.to(attentions)``, as ESM-2's contact head and many attention
masks do) is a tensor on the planned device whose bytes count, and ``.to`` a host tensor copies
to the host. Runs through the real ``memforensics plan`` console command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

MiB = 1 << 20

MASKED = """
import json
import torch

head = torch.nn.Linear(16, 1).cuda()
attentions = torch.rand(256, 1024, device="cuda")  # float32, 1 MiB
tokens = torch.randint(4, 24, (256, 1024), device="cuda")
before = torch.cuda.memory_allocated()
mask = tokens.ne(2).to(attentions)  # bool to float32, on the device: 1 MiB
masked = attentions * mask  # 1 MiB
moved = masked.to(head.weight.device)  # already there: the same tensor
after = torch.cuda.memory_allocated()
host = masked.to(torch.zeros(1, dtype=torch.float16))
print(json.dumps({
    "devices": [str(t.device) for t in (mask, masked, moved)],
    "mask_dtype": str(mask.dtype),
    "grown": after - before,
    "same": moved is masked and attentions.to(attentions) is attentions,
    "host": [str(host.device), str(host.dtype), list(host.shape)],
}))
"""


def test_a_tensor_cast_like_a_device_tensor_is_on_the_device(tmp_path: Path) -> None:
    """A bool mask ``.to(attentions)`` is a float32 tensor on cuda:0 that, with the product it
    makes, holds 2 MiB of the device; ``.to`` a tensor already like it is that tensor, and
    ``.to`` a host float16 tensor is a host float16 copy (as the same code gives on the CPU)."""
    script(tmp_path, MASKED)
    found = printed_facts(tmp_path, "--device-capability", "9.0")
    assert found["devices"] == ["cuda:0", "cuda:0", "cuda:0"]
    assert found["mask_dtype"] == "torch.float32"
    assert found["grown"] == 2 * MiB
    assert found["same"] is True
    assert found["host"] == ["cpu", "torch.float16", [256, 1024]]


MODULE = """
import json
import torch

like = torch.zeros(4, device="cuda", dtype=torch.float16)
model = torch.nn.Linear(1024, 1024)
before = torch.cuda.memory_allocated()
model.to(like)
print(json.dumps({
    "device": str(model.weight.device),
    "dtype": str(model.weight.dtype),
    "grown": torch.cuda.memory_allocated() - before,
}))
"""


def test_a_module_moved_like_a_device_tensor_holds_its_weights_there(tmp_path: Path) -> None:
    """``model.to(tensor_on_cuda)`` puts the weights on cuda:0 in the tensor's float16, and
    they hold the device's memory: 1024 x 1024 + 1024 values of 2 B."""
    script(tmp_path, MODULE)
    found = printed_facts(tmp_path, "--device-capability", "9.0")
    assert found["device"] == "cuda:0"
    assert found["dtype"] == "torch.float16"
    assert found["grown"] == (1024 * 1024 + 1024) * 2


TO_TENSOR = """
import json
import torch

train_x = torch.rand(1000, 6, device="cuda", dtype=torch.double)
before = torch.cuda.memory_allocated()
x = torch.ones(1000, 1000).to(train_x)
moved = torch.cuda.memory_allocated() - before
model = torch.nn.Linear(1000, 1000).to(train_x)
modules = torch.cuda.memory_allocated() - before - moved
state = {k: v.detach().to(device=torch.device("cpu")) for k, v in model.state_dict().items()}
back = model.weight.to(torch.zeros(1))
print(json.dumps({
    "tensor": [str(x.device), str(x.dtype), moved],
    "module": [str(model.weight.device), str(model.weight.dtype), modules],
    "state": {k: [str(v.device), list(v.shape)] for k, v in state.items()},
    "host": [str(back.device), str(back.dtype)],
}))
"""


def test_float64_tensor_and_module_moved_like_one_copy_their_state_to_host(tmp_path: Path) -> None:
    """A CPU tensor and a module moved ``.to`` a CUDA float64 tensor are on ``cuda:0`` in
    float64 and take their bytes there (1000 x 1000 x 8; the module's bias, 8,000 B, in a block
    rounded to 512 B), their state copies to the CPU, and ``.to`` a CPU tensor reads back on the
    CPU in its dtype, where the moved tensors read as ``meta`` and copying them out failed."""
    script(tmp_path, TO_TENSOR)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    assert found["tensor"] == ["cuda:0", "torch.float64", 1000 * 1000 * 8]
    assert found["module"] == ["cuda:0", "torch.float64", 1000 * 1000 * 8 + 8192]
    assert found["state"] == {"weight": ["cpu", [1000, 1000]], "bias": ["cpu", [1000]]}
    assert found["host"] == ["cpu", "torch.float32"]
