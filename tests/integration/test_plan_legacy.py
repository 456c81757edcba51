"""Older code and environment checks under the real ``memforensics plan``: the legacy CUDA
tensor types (``torch.cuda.FloatTensor`` called, passed to ``.type()``, tested with
``isinstance``, named by ``.type()``) and the CUDA build's facts (``torch.version.cuda``, cuDNN,
flash attention, NCCL). Each script is of a shape public training code uses; each test checks
that it runs and answers as on a GPU, and what it puts on the device is counted."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import printed_facts, script

torch = pytest.importorskip("torch")  # collected, then deselected, where torch is absent

pytestmark = [pytest.mark.integration, pytest.mark.torch]

LEGACY = (
    "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor", "IntTensor",
    "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor",
)  # fmt: skip


GAN = """
import json
import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Variable

cuda = True if torch.cuda.is_available() else False
img_shape, latent_dim, n_classes = (1, 28, 28), 100, 10


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.label_emb = nn.Embedding(n_classes, n_classes)
        self.model = nn.Sequential(
            nn.Linear(latent_dim + n_classes, 128), nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(128, 784), nn.Tanh(),
        )

    def forward(self, noise, labels):
        out = self.model(torch.cat((self.label_emb(labels), noise), -1))
        return out.view(out.size(0), *img_shape)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(784, 128), nn.LeakyReLU(0.2), nn.Linear(128, 1),
                                   nn.Sigmoid())

    def forward(self, img):
        return self.model(img.view(img.size(0), -1))


adversarial_loss = torch.nn.BCELoss()
generator, discriminator = Generator(), Discriminator()
if cuda:
    generator.cuda()
    discriminator.cuda()
    adversarial_loss.cuda()
optimizer_G = torch.optim.Adam(generator.parameters(), lr=0.0002)
FloatTensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor
LongTensor = torch.cuda.LongTensor if cuda else torch.LongTensor

imgs = torch.randn(64, 1, 28, 28)  # a batch from a CPU DataLoader
before = torch.cuda.memory_allocated()
valid = Variable(FloatTensor(imgs.size(0), 1).fill_(1.0), requires_grad=False)
fake = Variable(FloatTensor(imgs.size(0), 1).fill_(0.0), requires_grad=False)
real_imgs = Variable(imgs.type(FloatTensor))
z = Variable(FloatTensor(np.random.normal(0, 1, (imgs.shape[0], latent_dim))))
gen_labels = Variable(LongTensor(np.random.randint(0, n_classes, imgs.shape[0])))
batch = torch.cuda.memory_allocated() - before

optimizer_G.zero_grad()
g_loss = adversarial_loss(discriminator(generator(z, gen_labels)), valid)
g_loss.backward()
optimizer_G.step()
print(json.dumps({
    "batch": batch, "images": real_imgs.type(), "labels": gen_labels.type(),
    "noise": [str(z.dtype), list(z.shape)], "is_float": isinstance(z, FloatTensor),
    "is_long": isinstance(gen_labels, LongTensor), "stepped": len(optimizer_G.state),
}))
"""


def test_a_pytorch_gan_training_step_with_legacy_cuda_types_runs_and_counts(
    tmp_path: Path,
) -> None:
    """PyTorch-GAN's shape (``FloatTensor = torch.cuda.FloatTensor if cuda``, ``FloatTensor(n, 1)``,
    ``imgs.type(FloatTensor)``, ``FloatTensor(np_array)``, ``LongTensor(np_array)``) trains a step
    under plan, where it raised "type torch.cuda.FloatTensor not available": the batch is on the
    device to the byte, its tensors name their CUDA types and are instances of them."""
    script(tmp_path, GAN)
    facts = printed_facts(tmp_path)
    # valid and fake (64 float32 each, a 512-byte block each), the images, the noise, the labels
    assert facts["batch"] == 2 * 512 + 64 * 784 * 4 + 64 * 100 * 4 + 64 * 8
    assert (facts["images"], facts["labels"]) == ("torch.cuda.FloatTensor", "torch.cuda.LongTensor")
    assert facts["noise"] == ["torch.float32", [64, 100]]
    assert facts["is_float"] is True
    assert facts["is_long"] is True
    assert facts["stepped"] == 5  # Adam's state for each of the generator's parameters


CONSTRUCTORS = """
import json
import numpy as np
import torch

NAMES = %r
made, kept = {}, []
before = torch.cuda.memory_allocated()
for name in NAMES:
    kind = getattr(torch.cuda, name)
    t = kind(2, 3)
    kept.append(t)
    made[name] = [str(t.dtype), list(t.shape), t.type(), isinstance(t, kind),
                  isinstance(t, torch.cuda.FloatTensor) == (name == "FloatTensor")]
sizes = torch.cuda.memory_allocated() - before
standin = torch.cuda.FloatTensor([1.5, 2.5])
held = torch.cuda.memory_allocated()
alias = torch.cuda.FloatTensor(standin)
refused = []
for bad in (torch.zeros(2), torch.cuda.DoubleTensor(2), 3.5):
    try:
        torch.cuda.FloatTensor(bad)
    except TypeError as e:
        refused.append(type(e).__name__)
print(json.dumps({
    "made": made, "sizes": sizes,
    "long": torch.cuda.LongTensor([1, 2, 3]).tolist(),
    "ndarray": torch.cuda.FloatTensor(np.arange(4.0)).tolist(),
    "tuple": torch.cuda.HalfTensor((2, 3)).tolist(),
    "size": list(torch.cuda.FloatTensor(torch.Size([2, 5])).shape),
    "empty": list(torch.cuda.FloatTensor().shape),
    "alias": [alias.data_ptr() == standin.data_ptr(), torch.cuda.memory_allocated() == held],
    "refused": refused,
    "cpu": [isinstance(torch.zeros(2), torch.cuda.FloatTensor), torch.zeros(2).type()],
    "meta": [isinstance(torch.zeros(2, device="meta"), torch.cuda.FloatTensor),
             torch.zeros(2, device="meta").type()],
}))
"""


def test_every_legacy_cuda_type_makes_stand_ins_as_its_constructor_reads_its_arguments(
    tmp_path: Path,
) -> None:
    """Each of the ten ``torch.cuda.*Tensor`` types called with sizes makes an uninitialised
    tensor of its dtype on the device (one 512-byte block each), named by its CUDA type and an
    instance of it alone; data (a list, an ndarray, a tuple) is copied with its values, a
    ``torch.Size`` is sizes, a stand-in of the type is aliased, and any other tensor or a bare
    float is refused with a TypeError, as the legacy constructor does on a GPU. CPU tensors and
    the script's own ``meta`` tensors are not CUDA tensors."""
    script(tmp_path, CONSTRUCTORS % (LEGACY,))
    facts = printed_facts(tmp_path)
    made = facts["made"]
    assert isinstance(made, dict)
    for name in LEGACY:
        dtype = str(getattr(torch, name).dtype)
        assert made[name] == [dtype, [2, 3], f"torch.cuda.{name}", True, True], name
    assert facts["sizes"] == len(LEGACY) * 512
    assert facts["long"] == [1, 2, 3]
    assert facts["ndarray"] == [0.0, 1.0, 2.0, 3.0]
    assert facts["tuple"] == [2.0, 3.0]
    assert (facts["size"], facts["empty"]) == ([2, 5], [0])
    assert facts["alias"] == [True, True]
    assert facts["refused"] == ["TypeError"] * 3
    assert facts["cpu"] == [False, "torch.FloatTensor"]
    assert facts["meta"] == [False, "torch.meta.FloatTensor"]


CASTS = """
import json
import torch

x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
before = torch.cuda.memory_allocated()
half = x.type(torch.cuda.HalfTensor)
named = x.type("torch.cuda.LongTensor")
moved = torch.cuda.memory_allocated() - before
same = half.type(torch.cuda.HalfTensor) is half
back = half.type(torch.FloatTensor)
model = torch.nn.Linear(64, 32)
before = torch.cuda.memory_allocated()
model.type(torch.cuda.DoubleTensor)
weights = torch.cuda.memory_allocated() - before
torch.set_default_tensor_type("torch.cuda.FloatTensor")
default = torch.zeros(3)
print(json.dumps({
    "half": [str(half.dtype), half.type(), half.tolist()],
    "named": [str(named.dtype), named.type(), named.tolist()],
    "moved": moved, "same": same,
    "back": [back.device.type, str(back.dtype), back.tolist()],
    "model": [model.weight.type(), weights],
    "default": [default.type(), isinstance(default, torch.cuda.FloatTensor)],
}))
"""


def test_type_casts_to_the_device_and_names_cuda_types(tmp_path: Path) -> None:
    """``x.type(torch.cuda.HalfTensor)`` and ``x.type("torch.cuda.LongTensor")`` move a CPU tensor
    to the device in that dtype with its values (where they raised "Cannot initialize CUDA
    without ATen_cuda library"), a tensor already of the type is returned as it is, a CPU type
    brings it back to the host, ``model.type(torch.cuda.DoubleTensor)`` puts the model's
    weights on the device in float64, and ``set_default_tensor_type("torch.cuda.FloatTensor")``
    makes CUDA tensors."""
    script(tmp_path, CASTS)
    facts = printed_facts(tmp_path)
    values = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert facts["half"] == ["torch.float16", "torch.cuda.HalfTensor", values]
    assert facts["named"] == ["torch.int64", "torch.cuda.LongTensor", [[0, 1, 2], [3, 4, 5]]]
    assert facts["moved"] == 512 + 512  # 12 and 48 bytes, a block each
    assert facts["same"] is True
    assert facts["back"] == ["cpu", "torch.float32", values]
    assert facts["model"] == ["torch.cuda.DoubleTensor", 64 * 32 * 8 + 512]
    assert facts["default"] == ["torch.cuda.FloatTensor", True]


BUILD = """
import json
import torch
import torch.nn as nn
import torch.nn.functional as F

facts = {
    "cuda": torch.version.cuda, "built": torch.backends.cuda.is_built(),
    "cudnn": torch.backends.cudnn.is_available(), "cudnn_version": torch.backends.cudnn.version(),
    "flash": torch.backends.cuda.is_flash_attention_available(),
    "nccl": list(torch.cuda.nccl.version()),
}
if torch.backends.cudnn.is_available():
    torch.backends.cudnn.benchmark = True
device = "cuda" if torch.version.cuda else "cpu"
lstm = nn.LSTM(64, 128, num_layers=2, batch_first=True).to(device)
gru = nn.GRU(64, 128, batch_first=True).to(device)
x = torch.randn(8, 16, 64, device=device)
lstm(x)[0].sum().backward()
gru(x)[0].sum().backward()
conv = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU()).to(device)
conv(torch.randn(4, 3, 32, 32, device=device)).mean().backward()
log_probs = torch.randn(50, 4, 20, device=device).log_softmax(2)
targets = torch.randint(1, 20, (4, 30), device=device)
F.ctc_loss(log_probs, targets, [50] * 4, [20, 25, 30, 10])
q = torch.randn(2, 4, 128, 64, device=device, dtype=torch.float16, requires_grad=True)
F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
model = nn.Linear(256, 256).to(device)
optimizer = torch.optim.AdamW(model.parameters())
scaler = torch.amp.GradScaler("cuda")
for _ in range(3):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(torch.randn(32, 256, device=device)).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
facts.update(lstm=lstm.weight_ih_l0.get_device(),
             stepped=len(optimizer.state), scale=scaler.get_scale())
print(json.dumps(facts))
"""


def _build_facts() -> dict[str, object]:
    """What a GPU run of the installed torch reports of its build: a CUDA build's own
    libraries' versions, or torch 2.13.0's CUDA wheel's published pins (CUDA 13.0, cuDNN
    9.20.0, NCCL 2.29.7) for the CPU build."""
    if torch.version.cuda is None:
        return {"cuda": "13.0", "cudnn_version": 92000, "nccl": [2, 29, 7], "flash": True}
    return {
        "cuda": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version(),
        "nccl": list(torch.cuda.nccl.version()),
        "flash": torch.backends.cuda.is_flash_attention_available(),
    }


def test_the_cuda_builds_facts_are_the_wheels_and_cuda_paths_still_run(tmp_path: Path) -> None:
    """``torch.version.cuda``, cuDNN's availability and version, ``is_built``, flash attention's
    availability and NCCL's version answer as a GPU run of the installed torch reports them (a
    CUDA build's own, the 2.13.0 CUDA wheel's where the CPU build said None, False or raised);
    a script that picks its device from them plans on the device, and LSTM, GRU, convolution
    with batch norm, CTC loss, attention and a GradScaler loop still run there (GradScaler
    stepping every time at its initial scale)."""
    script(tmp_path, BUILD)
    facts = printed_facts(tmp_path)
    expected = _build_facts()
    assert {key: facts[key] for key in expected} == expected
    assert (facts["built"], facts["cudnn"]) == (True, True)
    assert facts["lstm"] == 0  # on the planned device
    assert facts["stepped"] == 2
    assert facts["scale"] == 65536.0


BF16_CHECK = """
import json
import torch
import torch.distributed as dist

bf16 = (  # torchtune's verify_bf16_support
    torch.cuda.is_available()
    and torch.cuda.is_bf16_supported()
    and dist.is_nccl_available()
    and torch.cuda.nccl.version() >= (2, 10)
)
weight = torch.empty(1024, 1024, device="cuda", dtype=torch.bfloat16 if bf16 else torch.float32)
print(json.dumps({"nccl": dist.is_nccl_available(), "allocated": torch.cuda.memory_allocated()}))
"""


def test_nccl_is_available_as_in_the_cuda_build(tmp_path: Path) -> None:
    """``torch.distributed.is_nccl_available()`` is True, as the CUDA build answers it beside
    NCCL's version, so a check of bf16 support that asks it (torchtune's refused bf16 on the CPU
    build) takes bf16, half the bytes."""
    script(tmp_path, BF16_CHECK)
    assert printed_facts(tmp_path) == {"nccl": True, "allocated": 1024 * 1024 * 2}


OLD_DEVICE = """
import json
import torch
try:
    found = torch.backends.cudnn.version()
except RuntimeError as e:
    found = str(e)
print(json.dumps({"cudnn": found, "cuda": torch.version.cuda}))
"""


def test_cudnn_refuses_a_device_older_than_it_supports_as_torch_does(tmp_path: Path) -> None:
    """On a planned capability 7.0 device ``torch.backends.cudnn.version()`` raises torch's own
    error (cuDNN from 9.11 needs capability 7.5), as the CUDA wheel does on such a GPU; on 7.5
    it answers the version."""
    script(tmp_path, OLD_DEVICE)
    old = printed_facts(tmp_path, "--device-capability", "7.0")
    assert isinstance(old["cudnn"], str)
    assert "not compatible with devices with SM < 7.5" in old["cudnn"]
    assert old["cuda"] == _build_facts()["cuda"]
    assert (
        printed_facts(tmp_path, "--device-capability", "7.5")["cudnn"]
        == _build_facts()["cudnn_version"]
    )
