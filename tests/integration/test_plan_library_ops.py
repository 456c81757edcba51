"""Ordinary library code on the planned device: TorchScript modules moved there, ``istft``
(which compares its window with ``torch.equal``) and ``unique_consecutive``. Each runs
through the real ``memforensics plan`` console command."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

SCRIPTED = """
import json
import torch, torch.nn as nn

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(256, 128)
    def forward(self, x):
        return torch.relu(self.proj(x))

scripted = torch.jit.script(Block()).cuda()
moved = torch.cuda.memory_allocated()
traced = torch.jit.trace(Block(), torch.randn(2, 256)).cuda()
both = torch.cuda.memory_allocated()
out = scripted(torch.randn(4, 256, device="cuda")) + traced(torch.randn(4, 256, device="cuda"))
print(json.dumps({"moved": moved, "both": both, "shape": list(out.shape),
                  "weight": str(scripted.proj.weight.shape)}))
"""

SIGNALS = """
import json
import torch

x = torch.randn(4, 4096, device="cuda")
window = torch.hann_window(512, device="cuda")
spec = torch.stft(x, n_fft=512, hop_length=128, window=window, return_complex=True)
back = torch.istft(spec, n_fft=512, hop_length=128, window=window)
runs = torch.unique_consecutive(
    torch.tensor([1, 1, 2, 2, 3, 1], device="cuda"), return_inverse=True, return_counts=True
)
rows = torch.unique_consecutive(torch.randn(5, 3, device="cuda"), dim=0, return_counts=True)
scores = (torch.randn(64, 4096, device="cuda") @ torch.randn(4096, 1, device="cuda")).round()
unknown = torch.unique_consecutive(scores.squeeze(1), return_counts=True)
print(json.dumps({
    "back": list(back.shape),
    "same": torch.equal(window, window.clone()),
    "other_shape": torch.equal(window, window[:10]),
    "runs": [list(t.shape) for t in runs],
    "rows": [list(t.shape) for t in rows],
    "unknown": [list(t.shape) for t in unknown],
}))
"""


def _facts(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    """The JSON line the script printed."""
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return dict(json.loads(line))


def test_a_scripted_or_traced_module_moves_to_the_device_and_runs(tmp_path: Path) -> None:
    """``torch.jit.script(m).cuda()`` and ``torch.jit.trace(m, x).cuda()`` put their parameters
    on the planned device (a 128 KiB weight and a 512 B bias each) and run there."""
    script(tmp_path, SCRIPTED)
    done = plan(tmp_path, "--device-capability", "8.0", "train.py")
    assert done.returncode == 0, done.stderr
    facts = _facts(done)
    params = 256 * 128 * 4 + 512  # the weight, and the bias rounded to the allocator's 512 B
    assert facts["moved"] == params
    assert facts["both"] == 2 * params
    assert facts["shape"] == [4, 128]


def test_istft_and_unique_consecutive_run_on_the_device(tmp_path: Path) -> None:
    """``istft`` (which tests its window with ``torch.equal``) gives the signal's shape back;
    ``torch.equal`` of a stand-in and its copy is true, of different shapes false; and
    ``unique_consecutive`` finds the runs of values the script made (4 runs in
    ``[1, 1, 2, 2, 3, 1]``, 5 distinct random rows) and takes its upper bound on values
    computed from large tensors, every element a run of its own."""
    script(tmp_path, SIGNALS)
    done = plan(tmp_path, "--device-capability", "8.0", "train.py")
    assert done.returncode == 0, done.stderr
    facts = _facts(done)
    assert facts["back"] == [4, 4096]
    assert facts["same"] is True
    assert facts["other_shape"] is False
    assert facts["runs"] == [[4], [6], [4]]
    assert facts["rows"] == [[5, 3], [5]]
    assert facts["unknown"] == [[64], [64]]


LOADED = """
import io, json, os, sys
import torch

torch.jit.save(torch.jit.script(torch.nn.Linear(256, 128)), "linear.pt")
loaded = torch.jit.load("linear.pt", map_location="cuda")
held = torch.cuda.memory_allocated()
out = loaded(torch.randn(4, 256, device="cuda"))
torch.jit.save(loaded, "again.pt")
before = torch.cuda.memory_allocated()
again = torch.jit.load("again.pt")
after_again = torch.cuda.memory_allocated()
buffer = io.BytesIO()
torch.jit.save(loaded, buffer, _extra_files={"note.txt": "kept"})
note = {"note.txt": ""}
copied = torch.jit.load(io.BytesIO(buffer.getvalue()), _extra_files=note)
after_copy = torch.cuda.memory_allocated()
on_host = torch.jit.load(io.BytesIO(buffer.getvalue()), map_location="cpu")
print(json.dumps({
    "held": held, "shape": list(out.shape), "again": after_again - before,
    "copied": after_copy - after_again, "host": torch.cuda.memory_allocated() - after_copy,
    "note": note["note.txt"].decode(),
    "devices": [str(t.device) for t in (loaded.weight, again.weight, copied.bias, on_host.weight)],
    "out": list(copied(torch.randn(4, 256, device="cuda")).shape),
    "saved": os.path.exists("again.pt"),
}), flush=True)
"""


def test_a_torchscript_file_loads_onto_the_device_and_saves_back_as_cuda_saves_it(
    tmp_path: Path,
) -> None:
    """``torch.jit.load(path, map_location="cuda")`` puts the module's parameters on the
    planned device (where the CPU build's loader refuses CUDA); ``torch.jit.save`` of a module
    holding stand-ins writes it (the script's extra files kept), and loading that back with no
    location puts another copy of its 128 KiB weight and 512 B bias on the device each time,
    as CUDA's loader restores each tensor where it was saved from, while ``map_location="cpu"``
    adds none; the module saved keeps its own tensors, and the file it wrote to a path is gone
    when the run ends (it holds zeros for the trained values)."""
    script(tmp_path, LOADED)
    done = plan(tmp_path, "--device-capability", "8.0", "train.py")
    assert done.returncode == 0, done.stderr
    facts = _facts(done)
    params = 256 * 128 * 4 + 512
    assert facts["held"] == params
    assert facts["shape"] == [4, 128]
    assert facts["again"] == params
    assert facts["copied"] == params
    assert facts["host"] == 0
    assert facts["note"] == "kept"
    assert facts["devices"] == ["cuda:0", "cuda:0", "cuda:0", "cpu"]
    assert facts["out"] == [4, 128]
    assert facts["saved"] is True
    assert not (tmp_path / "again.pt").exists()
    assert (tmp_path / "linear.pt").exists()


UNSWAPPABLE = """
import json
import torch

class Packed(torch.nn.Parameter):  # as bitsandbytes' Params4bit: detach() gives a plain tensor
    def __new__(cls, data, requires_grad=False):
        made = torch.Tensor._make_subclass(cls, data, requires_grad)
        made.blocksize = 64
        return made

layer = torch.nn.Linear(64, 64, bias=False)
layer.weight = Packed(torch.randn(64, 64).cuda())
weight = layer.weight
layer.to("cuda")
layer.cuda()
print(json.dumps({"kind": type(layer.weight).__name__, "same": layer.weight is weight,
                  "blocksize": layer.weight.blocksize, "held": torch.cuda.memory_allocated()}))
"""


def test_a_parameter_class_torch_cannot_swap_moves_on_the_device(tmp_path: Path) -> None:
    """A module whose weight is already on the device, of a ``Parameter`` subclass whose
    ``detach()`` leaves the class (bitsandbytes' ``Params4bit``, which ``Trainer`` moves with
    ``model.to(device)``), moves again as on a CUDA build: the parameter is rebound, keeps its
    class and attributes, where the plan's swapping used to fail with "Couldn't swap"."""
    script(tmp_path, UNSWAPPABLE)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[0])
    assert facts == {"kind": "Packed", "same": True, "blocksize": 64, "held": 64 * 64 * 4}


CUSTOM_OP = """
import json
import torch

@torch.library.custom_op("planned_test::doubled", mutates_args=())
def doubled(x: torch.Tensor) -> torch.Tensor:
    wide = x.float()  # the kernel's own temporary: the input in float32
    return (wide * 2).to(x.dtype)

@doubled.register_fake
def _(x):
    return torch.empty_like(x)

@torch.library.custom_op("planned_test::extension", mutates_args=())
def extension(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.planned_test_not_loaded.kernel(x)  # a compiled extension's, GPU only

@extension.register_fake
def _(x):
    return torch.empty_like(x)

@torch.compile(fullgraph=True)
def compiled(x):
    return torch.ops.planned_test.doubled(x) + 1

x = torch.empty(1 << 20, dtype=torch.bfloat16, device="cuda")
figures = {}
calls = (("eager", torch.ops.planned_test.doubled), ("compiled", compiled),
         ("extension", torch.ops.planned_test.extension))
for name, call in calls:
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    y = call(x)
    figures[name] = [torch.cuda.max_memory_allocated() - base, torch.cuda.memory_allocated() - base]
    del y
print(json.dumps(figures))
"""


def test_a_custom_ops_python_kernel_allocates_its_own_tensors(tmp_path: Path) -> None:
    """A ``torch.library.custom_op`` runs its Python implementation, as CUDA does, eagerly and
    inside a compiled graph: the float32 copy and its double (4 MiB each) exist beside the
    2 MiB bfloat16 output, where its fake implementation makes only the output. One whose
    implementation calls what cannot run in a plan (an extension) gets its fake's output."""
    script(tmp_path, CUSTOM_OP)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.splitlines()[0])
    mib = 1 << 20
    assert figures["eager"] == [10 * mib, 2 * mib]
    # then the graph's own + 1 beside the kernel's output, which it frees
    assert figures["compiled"] == [10 * mib, 2 * mib]
    assert figures["extension"] == [2 * mib, 2 * mib]


COMPOSITE_OP = """
import json
import torch

lib = torch.library.Library("planned_test", "DEF")
lib.define("quantized(Tensor x) -> (Tensor, Tensor)")

def quantized(x):
    scale = x.abs().amax(dim=-1, keepdim=True).to(dtype=torch.float32, device=x.device)
    codes = torch.empty(x.shape, dtype=torch.int8, device=x.device)
    return codes, scale

lib.impl("quantized", quantized, "CompositeImplicitAutograd")
x = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
codes, scale = torch.ops.planned_test.quantized(x)
print(json.dumps({"codes": [str(codes.device), str(codes.dtype), list(codes.shape)],
                  "scale": [str(scale.device), str(scale.dtype), list(scale.shape)],
                  "allocated": torch.cuda.memory_allocated()}))
"""


def test_a_python_composite_operator_makes_its_tensors_on_its_inputs_device(
    tmp_path: Path,
) -> None:
    """An operator whose ``CompositeImplicitAutograd`` kernel is Python (torchao's quantization
    primitives) makes tensors with ``device=x.device`` read off a stand-in, ``cuda:0``: they
    are made on the planned device (2 MiB input, 1 MiB of codes, a 4 KiB scale), where the
    plan used to stop on ``empty_strided`` for the CUDA backend."""
    script(tmp_path, COMPOSITE_OP)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[0])
    assert facts == {
        "codes": ["cuda:0", "torch.int8", [1024, 1024]],
        "scale": ["cuda:0", "torch.float32", [1024, 1]],
        "allocated": (2 << 20) + (1 << 20) + 4096,
    }


WRAPPED = """
import json
import torch
from torch.utils._pytree import tree_map


class Quantized(torch.Tensor):
    # int8 codes and a scale per row, made on the codes' device as a library makes it

    @staticmethod
    def __new__(cls, codes, scale):
        return torch.Tensor._make_wrapper_subclass(
            cls, codes.shape, dtype=torch.float32, device=codes.device
        )

    def __init__(self, codes, scale):
        self.codes, self.scale = codes, scale

    def __tensor_flatten__(self):
        return ["codes", "scale"], None

    @staticmethod
    def __tensor_unflatten__(inner, meta, size, stride):
        return Quantized(inner["codes"], inner["scale"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.copy_.default:
            args[0].codes.copy_(args[1].codes)
            args[0].scale.copy_(args[1].scale)
            return args[0]
        if func is torch.ops.aten.detach.default:
            return Quantized(args[0].codes, args[0].scale)
        plain = lambda t: t.codes.float() * t.scale if isinstance(t, Quantized) else t
        return func(*tree_map(plain, args), **tree_map(plain, kwargs or {}))


codes = torch.zeros(1024, 1024, dtype=torch.int8, device="cuda")
weight = torch.nn.Parameter(Quantized(codes, torch.ones(1024, 1, device="cuda")))
held = torch.cuda.memory_allocated()
x = torch.randn(256, 1024, device="cuda", requires_grad=True)
(x @ weight.t()).sum().backward()
with torch.no_grad():
    weight.copy_(Quantized(torch.ones_like(codes), torch.ones(1024, 1, device="cuda")))
print(json.dumps({"device": str(weight.device), "is_cuda": weight.is_cuda, "held": held,
                  "grad": [str(weight.grad.device), list(weight.grad.shape)]}))
"""


def test_a_librarys_wrapper_subclass_on_a_stand_ins_device_trains_and_copies(
    tmp_path: Path,
) -> None:
    """A library's tensor subclass made with ``device=codes.device`` read off a stand-in
    (torchao's int8 weights, its 8-bit optimizer states) is a parameter autograd accumulates
    into and takes ``copy_``, answering ``cuda:0`` to the script: it is made on ``meta``, where
    on the real CUDA device the CPU build cannot guard it and the plan aborted ("PyTorch is
    not linked with support for cuda devices")."""
    script(tmp_path, WRAPPED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[0])
    assert facts == {
        "device": "cuda:0",
        "is_cuda": True,
        "held": (1 << 20) + 4096,
        "grad": ["cuda:0", [1024, 1024]],
    }


INT4_PRODUCT = """
import json
import torch

codes = torch.randint(0, 256, (4096, 1024), dtype=torch.uint8, device="cuda")
packed = torch._convert_weight_to_int4pack(codes, 8)
scales_and_zeros = torch.ones(2048 // 128, 4096, 2, dtype=torch.bfloat16, device="cuda")
x = torch.randn(16, 2048, dtype=torch.bfloat16, device="cuda")
before = torch.cuda.memory_allocated()
y = torch._weight_int4pack_mm(x, packed, 128, scales_and_zeros)
print(json.dumps({"packed": list(packed.shape), "y": [list(y.shape), str(y.dtype)],
                  "made": torch.cuda.memory_allocated() - before}))
"""


def test_a_product_with_int4_weights_packed_for_cuda_makes_its_output(tmp_path: Path) -> None:
    """``torch._weight_int4pack_mm`` on CUDA's four-dimensional int4 tiles (torchao's
    ``Int4WeightOnlyConfig``, gpt-fast) makes its ``(m, n)`` bfloat16 output, as CUDA's kernel
    does, where torch's ``meta`` kernel asked a stand-in for ``fake_device`` and failed."""
    script(tmp_path, INT4_PRODUCT)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[0])
    assert facts == {
        "packed": [512, 16, 32, 4],
        "y": [[16, 4096], "torch.bfloat16"],
        "made": 16 * 4096 * 2,
    }
