"""CTC loss under ``memforensics plan`` runs forward and backward, lengths given as tensors or
lists, and allocates what CUDA's kernels allocate. The sizes each test looks for are worked out
here from the shapes and ``aten/src/ATen/native/cuda/LossCTC.cu``: the forward copies the target
lengths, input lengths and batch offsets to the device (``batch`` int64 each), then makes
``log_alpha`` ``(batch, T, 2 * max_target_length + 1)`` and the loss ``(batch,)``; the backward
makes the same three copies, ``log_beta`` (as ``log_alpha``) and the gradient (as the input).
"""

from __future__ import annotations

import json
import pickle
import subprocess
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

FLOAT = 4
LONG = 8

SPEECH = """
import json
import torch
import torch.nn as nn
import torch.nn.functional as F

T, N, C, L = 50, 4, 20, 30
torch.cuda.memory._record_memory_history(max_entries=100000)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, C)).cuda()
optimizer = torch.optim.AdamW(model.parameters())
features = torch.randn(T, N, 16, device="cuda")
targets = torch.randint(1, C, (N, L), device="cuda")
input_lengths = torch.full((N,), T, device="cuda", dtype=torch.long)
target_lengths = torch.tensor([20, 25, 12, 10], device="cuda")
for step in range(4):
    log_probs = model(features).log_softmax(2)
    if step % 2:  # lengths as lists, the other overload
        loss = F.ctc_loss(log_probs, targets, [T] * N, [20, 25, 12, 10])
    else:
        loss = F.ctc_loss(log_probs, targets, input_lengths, target_lengths)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
torch.cuda.memory._dump_snapshot("ctc.pickle")
print(json.dumps({"stepped": len(optimizer.state)}))
"""


def _facts(done: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """The JSON line the script printed."""
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return dict(json.loads(line))


def _allocations(folder: Path) -> list[int]:
    """The sizes of the planned trace's allocations, in order."""
    snapshot = pickle.loads((folder / "ctc.pickle").read_bytes())
    return [e["size"] for e in snapshot["device_traces"][0] if e["action"] == "alloc"]


def _count(sizes: list[int], run: list[int]) -> int:
    """How many times ``run`` occurs in ``sizes`` as consecutive allocations."""
    return sum(sizes[i : i + len(run)] == run for i in range(len(sizes) - len(run) + 1))


def test_a_speech_loop_with_tensor_lengths_plans_ctc_forward_and_backward(
    tmp_path: Path,
) -> None:
    """A training loop whose CTC loss takes its lengths as device tensors (and as lists on
    alternate steps) runs to its optimizer steps, and each step's forward and backward
    allocate CUDA's copies, log_alpha sized by the longest known target length (25, not the
    targets' 30 columns), log_beta and the gradient."""
    script(tmp_path, SPEECH)
    done = plan(tmp_path, "--device-capability", "8.0", "train.py")
    assert done.returncode == 0, done.stderr
    assert _facts(done)["stepped"] == 4  # both Linear layers' weights and biases
    time, batch, labels, longest = 50, 4, 20, 25
    log_alpha = batch * time * (2 * longest + 1) * FLOAT
    copies = [batch * LONG] * 3
    forward = [*copies, log_alpha, batch * FLOAT]
    backward = [*copies, log_alpha, time * batch * labels * FLOAT]
    sizes = _allocations(tmp_path)
    assert _count(sizes, forward) == 4
    assert _count(sizes, backward) == 4


UNKNOWN = """
import json
import torch
import torch.nn.functional as F

T, N, C, L = 300, 8, 32, 40
torch.cuda.memory._record_memory_history(max_entries=100000)
log_probs = torch.randn(T, N, C, device="cuda", requires_grad=True)
labels = torch.randint(1, C, (N, L), device="cuda")
counts = torch.randint(0, 3, (N, 5000), device="cuda")  # too large for its values to be kept
target_lengths = counts.sum(-1).clamp(1, L)  # values the plan cannot know
input_lengths = torch.full((N,), T, device="cuda", dtype=torch.long)
loss = F.ctc_loss(log_probs.log_softmax(2), labels.reshape(-1), input_lengths, target_lengths,
                  reduction="sum", zero_infinity=True)
loss.backward()
torch.cuda.memory._dump_snapshot("ctc.pickle")
print(json.dumps({"grad": list(log_probs.grad.shape)}))
"""


def test_unknown_lengths_take_their_bound_and_a_large_backward_runs(tmp_path: Path) -> None:
    """Target lengths the plan cannot know, with concatenated targets, are the targets split
    evenly (said once); a backward large enough for CUDA's tensor-operator path makes that
    path's sum of log_alpha and log_beta at the blanks, then its logsumexp's maxima, mask,
    shifted copy and result after the gradient."""
    script(tmp_path, UNKNOWN)
    done = plan(tmp_path, "--device-capability", "8.0", "train.py")
    assert done.returncode == 0, done.stderr
    assert _facts(done)["grad"] == [300, 8, 32]
    assert "CTC loss's lengths held on the device are unknown" in done.stderr
    time, batch, labels, split = 300, 8, 32, 40  # 320 targets over 8 sequences
    log_alpha = batch * time * (2 * split + 1) * FLOAT
    copies = [batch * LONG] * 3
    blank_sum = batch * time * (split + 1) * FLOAT
    maxes = batch * time * FLOAT  # logsumexp over the blanks: CUDA's logsumexp_out_impl
    blanks = [blank_sum, maxes, maxes, batch * time, blank_sum, batch * time * FLOAT]
    backward = [*copies, log_alpha, time * batch * labels * FLOAT, *blanks]
    sizes = _allocations(tmp_path)
    assert _count(sizes, [*copies, log_alpha, batch * FLOAT]) == 1
    assert _count(sizes, backward) == 1


CUDNN = """
import json
import torch
import torch.nn.functional as F

T, N, C, L = 50, 4, 20, 10
torch.cuda.memory._record_memory_history(max_entries=100000)
log_probs = torch.randn(T, N, C, device="cuda", requires_grad=True)
targets = torch.randint(1, C, (N * L,), dtype=torch.int32)  # on the CPU: cuDNN's condition
input_lengths = torch.full((N,), T, dtype=torch.int32)
target_lengths = torch.full((N,), L, dtype=torch.int32)
with torch.backends.cudnn.flags(enabled={enabled}):
    loss = F.ctc_loss(log_probs.log_softmax(2), targets, input_lengths, target_lengths)
loss.backward()
torch.cuda.memory._dump_snapshot("ctc.pickle")
print(json.dumps({{"grad": list(log_probs.grad.shape)}}))
"""


@pytest.mark.parametrize("enabled", [True, False])
def test_cudnns_ctc_loss_makes_its_gradient_in_the_forward(tmp_path: Path, enabled: bool) -> None:
    """With int32 targets on the CPU, blank 0 and full-length inputs, CUDA takes cuDNN's CTC
    loss: its forward makes the gradient (as the input) before the loss, and no log_alpha; with
    cuDNN disabled the native kernel's copies and log_alpha come instead."""
    script(tmp_path, CUDNN.format(enabled=enabled))
    done = plan(tmp_path, "--device-capability", "8.0", "train.py")
    assert done.returncode == 0, done.stderr
    assert _facts(done)["grad"] == [50, 4, 20]
    time, batch, labels, length = 50, 4, 20, 10
    gradient = time * batch * labels * FLOAT
    log_alpha = batch * time * (2 * length + 1) * FLOAT
    native = [*[batch * LONG] * 3, log_alpha, batch * FLOAT]
    sizes = _allocations(tmp_path)
    assert _count(sizes, [gradient, batch * FLOAT]) == (1 if enabled else 0)
    assert _count(sizes, native) == (0 if enabled else 1)
    assert (log_alpha in sizes) is not enabled
