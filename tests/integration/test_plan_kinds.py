"""The kinds ``summary`` gives a planned dump: the real ``memforensics plan`` console command on
small training scripts whose memory is known by construction, then the dump it writes explained.

A planned dump has what a real one recorded with Python frames has: the stacks of the script's
own code, and none on autograd's device thread; and under cuBLAS's and cuBLASLt's workspaces, the
native frames a GPU's trace shows there with C++ frames, which the plan knows.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import plan, script, summary_kinds

from memforensics.analysis import explain

pytestmark = [pytest.mark.integration, pytest.mark.torch]

MiB = 1 << 20
HOPPER_WORKSPACE = 32 * MiB
"""cuBLAS's workspace per handle and stream on capability 9.0."""

ROPE_TRAINING = """
import torch
from torch import nn


class RoPE(nn.Module):
    def __init__(self, dim, end):
        super().__init__()
        freqs = torch.outer(torch.arange(end).float(), torch.ones(dim // 2))
        self.register_buffer("cache", torch.polar(torch.ones_like(freqs), freqs))

    def _reshape_cache(self, q, positions):
        return self.cache[positions].view(1, q.shape[1], 1, q.shape[-1] // 2)

    def forward(self, q, positions):
        c = self._reshape_cache(q, positions)
        q_ = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
        return torch.view_as_real(q_ * c).flatten(3).type_as(q)


class Block(nn.Module):
    def __init__(self, rope):
        super().__init__()
        self.rope, self.qkv = rope, nn.Linear(512, 1536, bias=False)
        self.out = nn.Linear(512, 512, bias=False)

    def forward(self, x, positions):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 8, 64).unbind(2)
        q, k = self.rope(q, positions), self.rope(k, positions)
        y = nn.functional.scaled_dot_product_attention(q, k, v)
        return x + self.out(y.reshape(b, s, d))


rope = RoPE(64, 2048).cuda()
blocks = nn.ModuleList([Block(rope) for _ in range(2)]).cuda()
opt = torch.optim.AdamW(blocks.parameters())
positions = torch.arange(1024, device="cuda")
for step in range(2):
    opt.zero_grad(set_to_none=True)
    h = torch.randn(4, 1024, 512, device="cuda")
    for block in blocks:
        h = block(h, positions)
    h.square().mean().backward()
    opt.step()
"""
WEIGHT_BYTES = 2 * (512 * 1536 + 512 * 512) * 4
"""The two blocks' float32 weights, and as many gradient bytes asked for after the last
backward (the allocator may serve one from a larger block it does not split)."""


def test_rope_s_gather_is_no_kv_cache_and_backward_s_workspace_no_gradient(
    tmp_path: Path,
) -> None:
    """Training with RoPE read through ``_reshape_cache`` in each attention: its gathers are
    activations, never a KV cache, and the workspace of autograd's thread is a workspace, so
    the gradients held at the end are the weights' bytes exactly."""
    script(tmp_path, ROPE_TRAINING)
    done = plan(tmp_path, "--device-capability", "9.0", "--out-dir", "out", "train.py")
    assert done.returncode == 0, done.stderr
    summary = explain(tmp_path / "out" / "planned.pickle")
    kinds = {k.kind: k.requested_bytes for k in summary.kinds}
    assert kinds["workspace"] == 2 * HOPPER_WORKSPACE
    assert kinds["gradient"] == WEIGHT_BYTES
    assert summary.peak is not None
    assert "kv_cache" not in {k.kind for k in summary.peak.kinds}


BUFFERS = """
import torch
from torch import nn


class RoPE(nn.Module):
    def __init__(self, dim, end):
        super().__init__()
        freqs = torch.outer(torch.arange(end).float(), torch.ones(dim // 2))
        self.register_buffer("table", torch.cat([freqs.cos(), freqs.sin()], -1))

    def forward(self, x):
        return x * self.table[: x.shape[1]].sum(-1, keepdim=True)


model = nn.Sequential(nn.Linear(512, 512), nn.BatchNorm1d(256), RoPE(64, 256), nn.Linear(512, 512))
torch.cuda.memory._record_memory_history()
model.cuda()
model(torch.randn(8, 256, 512, device="cuda")).mean().backward()
torch.cuda.memory._dump_snapshot("snapshot.pickle")
"""
PARAMETER_BYTES = 2 * (512 * 512 + 512) * 4 + 2 * 256 * 4
"""Two linear layers' weights and biases, and the batch norm's weight and bias (float32)."""
BUFFER_BYTES = 2 * 256 * 4 + 8 + 256 * 64 * 4
"""The batch norm's running mean and variance and its int64 step count, and the RoPE table."""


def test_buffers_moved_with_cuda_are_buffers_not_parameters(tmp_path: Path) -> None:
    """A batch norm's running statistics and a RoPE table that ``.cuda()`` moves are buffers."""
    script(tmp_path, BUFFERS)
    done = plan(tmp_path, "--device-capability", "9.0", "--out-dir", "out", "train.py")
    assert done.returncode == 0, done.stderr
    kinds = summary_kinds(tmp_path / "snapshot.pickle")
    assert kinds["buffer"] == BUFFER_BYTES
    assert kinds["parameter"] == PARAMETER_BYTES


GRAD_SCALER = """
import torch
from torch import nn

model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512)).cuda()
opt = torch.optim.AdamW(model.parameters())
scaler = torch.amp.GradScaler("cuda")
torch.cuda.memory._record_memory_history()
for step in range(2):
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(torch.randn(64, 512, device="cuda")).float().square().mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    del loss
torch.cuda.memory._dump_snapshot("snapshot.pickle")
"""
LINEAR_BYTES = 2 * (512 * 512 + 512) * 4
SCALER_BYTES = 2 * 4
"""GradScaler's float32 scale and int32 growth tracker, one element each."""


def test_grad_scaler_s_scale_and_growth_tracker_are_optimizer_state(tmp_path: Path) -> None:
    """GradScaler's scale and growth tracker, made in the first step and held, are state."""
    script(tmp_path, GRAD_SCALER)
    done = plan(tmp_path, "--device-capability", "9.0", "--out-dir", "out", "train.py")
    assert done.returncode == 0, done.stderr
    kinds = summary_kinds(tmp_path / "snapshot.pickle")
    assert kinds["optimizer_state"] == 2 * LINEAR_BYTES + SCALER_BYTES
    assert "activation" not in kinds
    assert "unknown" not in kinds


ADDMM_FORWARD = """
import torch
from torch import nn


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.weight.size(-1),)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


model = nn.Sequential(Conv1D(512, 512), nn.GELU(), Conv1D(512, 512)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.cuda.memory._record_memory_history()


def train(steps):
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        model(torch.randn(8, 128, 512, device="cuda")).square().mean().backward()
        opt.step()


for round in range(ROUNDS):
    if round:
        torch._C._cuda_clearCublasWorkspaces()
        torch.cuda.empty_cache()
    train(2)
torch.cuda.memory._dump_snapshot("snapshot.pickle")
"""
CONV1D_BYTES = 2 * (512 * 512 + 512) * 4
"""Two 512 x 512 layers' float32 weights and biases."""


def test_a_forward_s_own_addmm_takes_a_workspace(tmp_path: Path) -> None:
    """A module's forward calling ``torch.addmm`` itself (GPT-2's Conv1D) takes a workspace."""
    script(tmp_path, ADDMM_FORWARD.replace("ROUNDS", "1"))
    done = plan(tmp_path, "--device-capability", "9.0", "--out-dir", "out", "train.py")
    assert done.returncode == 0, done.stderr
    kinds = summary_kinds(tmp_path / "snapshot.pickle")
    assert kinds["workspace"] == 2 * HOPPER_WORKSPACE
    assert kinds["gradient"] == CONV1D_BYTES
    assert "unknown" not in kinds


def test_workspaces_taken_again_after_a_clear_are_workspaces(tmp_path: Path) -> None:
    """After ``_cuda_clearCublasWorkspaces`` (Lightning's teardown) the next are workspaces."""
    linear = ADDMM_FORWARD.replace("Conv1D(512, 512)", "nn.Linear(512, 512)")
    script(tmp_path, linear.replace("ROUNDS", "2"))
    done = plan(tmp_path, "--device-capability", "9.0", "--out-dir", "out", "train.py")
    assert done.returncode == 0, done.stderr
    kinds = summary_kinds(tmp_path / "snapshot.pickle")
    assert kinds == {
        "parameter": CONV1D_BYTES,
        "gradient": CONV1D_BYTES,
        "workspace": 2 * HOPPER_WORKSPACE,
    }
    assert summary_kinds(tmp_path / "snapshot.pickle", "peak")["workspace"] == 2 * HOPPER_WORKSPACE


COMPILED = """
import torch
from torch import nn

model = nn.Sequential(nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 512)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
compiled = torch.compile(model)
torch.cuda.memory._record_memory_history()
for _ in range(2):
    opt.zero_grad(set_to_none=True)
    compiled(torch.randn(8, 128, 512, device="cuda")).square().mean().backward()
    opt.step()
torch.cuda.memory._dump_snapshot("snapshot.pickle")
"""


def test_a_compiled_graph_s_workspaces_are_workspaces(tmp_path: Path) -> None:
    """A compiled graph's products, on an fx interpreter's stack, take two workspaces."""
    script(tmp_path, COMPILED)
    done = plan(tmp_path, "--device-capability", "9.0", "--out-dir", "out", "train.py")
    assert done.returncode == 0, done.stderr
    kinds = summary_kinds(tmp_path / "snapshot.pickle")
    assert kinds == {
        "parameter": CONV1D_BYTES,
        "gradient": CONV1D_BYTES,
        "workspace": 2 * HOPPER_WORKSPACE,
    }


LIGHTNING = """
import torch
import lightning

torch.cuda.memory._record_memory_history()


class Model(lightning.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(256, 256)

    def training_step(self, batch, index):
        return self.layer(batch[0]).square().mean()

    def on_train_batch_end(self, outputs, batch, index):
        if index == 2:
            torch.cuda.memory._dump_snapshot("snapshot.pickle")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(48, 256)), 16)
trainer = lightning.Trainer(
    accelerator="gpu", devices=1, max_steps=3, logger=False, enable_checkpointing=False,
    enable_progress_bar=False, enable_model_summary=False,
)
trainer.fit(Model(), data)
"""
LIGHTNING_BYTES = (256 * 256 + 256) * 4
"""The one linear layer's float32 weight and bias."""


@pytest.mark.extras
def test_lightning_s_cloned_loss_is_no_parameter(tmp_path: Path) -> None:
    """Lightning's automatic optimization clones each loss in a constructor inside the
    optimizer's closure: that scalar is the step's, and the parameters are the layer's bytes."""
    pytest.importorskip("lightning")
    script(tmp_path, LIGHTNING)
    done = plan(tmp_path, "--device-capability", "9.0", "--out-dir", "out", "train.py")
    assert done.returncode == 0, done.stderr
    kinds = summary_kinds(tmp_path / "snapshot.pickle")
    assert kinds["parameter"] == LIGHTNING_BYTES
    assert kinds["gradient"] == LIGHTNING_BYTES


BUILT_ON_CUDA = """
import torch
from torch import nn


class Rotary(nn.Module):
    def __init__(self, dim, end):
        super().__init__()
        self.proj = nn.Linear(dim, dim, device="cuda")
        self.register_buffer("mask", torch.ones(end, end, device="cuda").tril())
        positions = torch.arange(end, device="cuda").float()
        freqs = torch.outer(positions, torch.ones(dim // 2, device="cuda"))
        self.cos, self.sin = freqs.cos(), freqs.sin()

    def forward(self, x):
        y = self.proj(x)
        half = y.shape[-1] // 2
        y = torch.cat([y[..., :half] * self.cos - y[..., half:] * self.sin, y[..., half:]], -1)
        return self.mask @ y


model = Rotary(256, 128)
torch.cuda.memory._record_memory_history()
model(torch.randn(4, 128, 256, device="cuda")).square().mean().backward()
DUMP
"""
ROTARY_PARAMETER_BYTES = (256 * 256 + 256) * 4
"""The projection's float32 weight and bias."""
ROTARY_BUFFER_BYTES = 128 * 128 * 4 + 2 * 128 * 128 * 4
"""The registered mask and the cosine and sine tables kept as attributes (float32)."""


@pytest.mark.parametrize(
    "dump", ['torch.cuda.memory._dump_snapshot("snapshot.pickle")', ""], ids=["dumped", "final"]
)
def test_buffers_made_on_cuda_in_a_constructor_are_buffers(tmp_path: Path, dump: str) -> None:
    """A buffer registered and rotary tables kept as attributes, made on ``"cuda"`` in a
    module's ``__init__``, are buffers in the script's own snapshot and in the plan's final
    one, as when ``.cuda()`` moves them; the parameters are the projection's bytes."""
    script(tmp_path, BUILT_ON_CUDA.replace("DUMP", dump))
    done = plan(tmp_path, "--device-capability", "9.0", "--out-dir", "out", "train.py")
    assert done.returncode == 0, done.stderr
    kinds = summary_kinds(tmp_path / ("snapshot.pickle" if dump else "out/planned.pickle"))
    assert kinds["buffer"] == ROTARY_BUFFER_BYTES
    assert kinds["parameter"] == ROTARY_PARAMETER_BYTES
    assert kinds["gradient"] == ROTARY_PARAMETER_BYTES


CHECKPOINTED = """
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(512, 2048), nn.Linear(2048, 512)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


torch.cuda.memory._record_memory_history()
blocks = nn.ModuleList([Block() for _ in range(3)]).cuda()
opt = torch.optim.SGD(blocks.parameters(), lr=0.1)
for step in range(2):
    opt.zero_grad(set_to_none=True)
    h = torch.randn(32, 128, 512, device="cuda")
    for block in blocks:
        h = checkpoint(block, h, use_reentrant=False)
    h.square().mean().backward()
    del h
    opt.step()
torch.cuda.memory._dump_snapshot("snapshot.pickle")
"""
CHECKPOINTED_BYTES = 3 * (2 * 512 * 2048 + 2048 + 512) * 4
"""Three blocks' float32 weights and biases; each up-projection's output (32 x 128 x 2048
float32) is 32 MiB, a Hopper cuBLAS workspace's size."""


def test_workspaces_beside_outputs_of_their_size_are_workspaces(tmp_path: Path) -> None:
    """Checkpointed layers whose products' outputs have the workspace's size (32 MiB), made by
    the same stacks in forward and again in backward: the two held workspaces are workspaces,
    and the gradients held are the weights' bytes."""
    script(tmp_path, CHECKPOINTED)
    done = plan(tmp_path, "--device-capability", "9.0", "--out-dir", "out", "train.py")
    assert done.returncode == 0, done.stderr
    kinds = summary_kinds(tmp_path / "snapshot.pickle")
    assert kinds == {
        "parameter": CHECKPOINTED_BYTES,
        "gradient": CHECKPOINTED_BYTES,
        "workspace": 2 * HOPPER_WORKSPACE,
    }


CLIPPED = """
import torch
from torch import nn

model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512)).cuda()
opt = torch.optim.AdamW(model.parameters())
scaler = torch.amp.GradScaler("cuda")
torch.cuda.memory._record_memory_history()
for step in range(3):
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(torch.randn(64, 512, device="cuda")).float().square().mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
torch.cuda.memory._dump_snapshot("snapshot.pickle")
"""
CLIPPED_BYTES = (512 * 1024 + 1024 + 1024 * 512 + 512) * 4
"""The two layers' float32 weights and biases."""


def test_gradient_clipping_is_the_optimizer_s_step(tmp_path: Path) -> None:
    """``clip_grad_norm_`` between unscaling and the step is the optimizer's phase: the
    scaler's found-inf flag, made before it and freed at ``update()``, is no optimizer state,
    and the loss held at the end, its backward the trace's last, is an activation."""
    script(tmp_path, CLIPPED)
    done = plan(tmp_path, "--device-capability", "9.0", "--out-dir", "out", "train.py")
    assert done.returncode == 0, done.stderr
    snapshot = tmp_path / "snapshot.pickle"
    assert summary_kinds(snapshot) == {
        "parameter": CLIPPED_BYTES,
        "gradient": CLIPPED_BYTES,
        "optimizer_state": 2 * CLIPPED_BYTES + SCALER_BYTES,
        "workspace": 2 * HOPPER_WORKSPACE,
        "activation": 4,
    }
    assert summary_kinds(snapshot, "peak")["optimizer_state"] == 2 * CLIPPED_BYTES + SCALER_BYTES


VISION_TRAINING = """
import torch
from torch import nn

model = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    nn.Linear(16, 10),
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
images = torch.randn(32, 3, 512, 512).pin_memory()
labels = torch.randint(0, 10, (32,))
torch.cuda.memory._record_memory_history()
for step in range(3):
    x = images.to("cuda", non_blocking=True)
    y = labels.cuda()
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
torch.cuda.memory._dump_snapshot("snapshot.pickle")
"""
IMAGES_BYTES = 32 * 3 * 512 * 512 * 4
LABELS_BYTES = 32 * 8
"""A batch of 32 float32 images of 3 x 512 x 512 copied from pinned memory, and its int64
labels: each step's input."""
CONV_BYTES = (16 * 3 * 3 * 3 + 16 + 16 * 10 + 10) * 4
"""The convolution's and the linear layer's float32 weights and biases."""


def test_a_vision_batch_copied_each_step_is_input(tmp_path: Path) -> None:
    """Each step's image batch, copied with ``non_blocking=True``, and its labels are
    ``input`` at the snapshot and at the peak; every other kind holds what it held before."""
    script(tmp_path, VISION_TRAINING)
    done = plan(tmp_path, "--device-capability", "9.0", "--out-dir", "out", "train.py")
    assert done.returncode == 0, done.stderr
    snapshot = tmp_path / "snapshot.pickle"
    assert summary_kinds(snapshot) == {
        "parameter": CONV_BYTES,
        "gradient": CONV_BYTES,
        "workspace": 2 * HOPPER_WORKSPACE,
        "activation": 4,  # the loss, its backward the trace's last
        "input": IMAGES_BYTES + LABELS_BYTES,
    }
    peak = summary_kinds(snapshot, "peak")
    assert peak["input"] == IMAGES_BYTES + LABELS_BYTES
    assert peak["activation"] == IMAGES_BYTES // 3 * 16 + 4  # ReLU's saved output, the loss


PRODUCT_IN_A_CONSTRUCTOR = """
import torch
from torch import nn


class Adapter(nn.Module):
    def __init__(self, base):
        super().__init__()
        q, r = torch.linalg.qr(base.weight.detach())
        self.a = nn.Parameter(r[:8].clone())
        self.b = nn.Parameter(q[:, :8].clone())
        base.weight.data = base.weight.data - self.b @ self.a
        self.base = base

    def forward(self, x):
        return self.base(x) + (x @ self.a.T) @ self.b.T


torch.cuda.memory._record_memory_history(stacks="STACKS")
model = nn.Sequential(Adapter(nn.Linear(256, 256).cuda()), nn.ReLU(), nn.Linear(256, 256).cuda())
opt = torch.optim.AdamW(model.parameters())
for _ in range(2):
    model(torch.randn(64, 256, device="cuda")).sum().backward()
    opt.step()
    opt.zero_grad()
torch.cuda.memory._dump_snapshot("snapshot.pickle")
"""


def test_a_workspace_a_constructor_s_product_took_is_a_workspace(tmp_path: Path) -> None:
    """A product in a module's constructor (OLoRA's initialisation) takes the main thread's
    cuBLAS workspace: with C++ frames recorded (``stacks="all"``) the planned dump shows the
    native frames a GPU's does under it, and the block reads ``workspace``, not ``parameter``."""
    script(tmp_path, PRODUCT_IN_A_CONSTRUCTOR.replace("STACKS", "all"))
    done = plan(tmp_path, "--device-capability", "9.0", "--out-dir", "out", "train.py")
    assert done.returncode == 0, done.stderr
    kinds = summary_kinds(tmp_path / "snapshot.pickle")
    assert kinds["workspace"] == 2 * HOPPER_WORKSPACE
    assert kinds["parameter"] < HOPPER_WORKSPACE


TORCHSCRIPT_RECURRENCE = """
import torch


class Mixer(torch.jit.ScriptModule):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(512, 512))

    @torch.jit.script_method
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ self.w)


torch.cuda.memory._record_memory_history(stacks="python", max_entries=16)
model = Mixer().cuda()
state = [torch.zeros(64, 512, device="cuda") for _ in range(2)]
with torch.no_grad():
    for _ in range(8):
        state[0] = model(state[0] + state[1])
torch.cuda.memory._dump_snapshot("snapshot.pickle")
"""


def test_a_workspace_torchscript_took_before_the_window_is_a_workspace(tmp_path: Path) -> None:
    """A TorchScript module's product (no Python frame names it) takes cuBLAS's workspace
    before a short history window starts: the planned dump, recorded with Python frames only,
    still names it by the native frames the plan knows, and it reads ``workspace``."""
    script(tmp_path, TORCHSCRIPT_RECURRENCE)
    done = plan(tmp_path, "--device-capability", "9.0", "--out-dir", "out", "train.py")
    assert done.returncode == 0, done.stderr
    kinds = summary_kinds(tmp_path / "snapshot.pickle")
    assert kinds["workspace"] == HOPPER_WORKSPACE


INFERENCE = """
import torch
from torch import nn

model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512)).cuda()
with torch.no_grad():
    for _ in range(3):
        out = model(torch.randn(64, 512, device="cuda"))
"""


def test_what_an_inference_script_keeps_is_live_in_the_plan_s_own_snapshot(
    tmp_path: Path,
) -> None:
    """The snapshot plan writes for a script that dumps none shows what the script kept to its
    end, as a dump on its last line would: an inference script's weights are live parameters
    there, not temporaries freed with the script's globals."""
    script(tmp_path, INFERENCE)
    done = plan(tmp_path, "--device-capability", "9.0", "--out-dir", "out", "train.py")
    assert done.returncode == 0, done.stderr
    kinds = summary_kinds(tmp_path / "out" / "planned.pickle")
    assert kinds["parameter"] == LINEAR_BYTES
    peak = summary_kinds(tmp_path / "out" / "planned.pickle", at="peak")
    assert peak["parameter"] == LINEAR_BYTES
