"""CTC loss on stand-ins, allocating what CUDA's kernels allocate.

torch has no ``meta`` kernel for CTC loss's backward (``_ctc_loss_backward``) nor for its
forward with the lengths given as tensors (``_ctc_loss.Tensor``), and its forward's ``meta``
kernel makes the two outputs only. This module follows the CUDA build instead, beside
``aten/src/ATen/native/LossCTC.cpp`` and ``aten/src/ATen/native/cuda/LossCTC.cu``:

- ``ctc_loss`` with lengths given as tensors reads them on the host first
  (``input_lengths.to(kCPU)``; a copy to the host takes no device memory) and takes the path
  for lengths given as lists (:func:`loss`).
- ``ctc_loss_gpu_template`` (the forward) copies the target lengths, the input lengths and the
  targets' batch offsets to the device, ``batch`` int64 each, then makes ``log_alpha``
  ``(batch, T, 2 * max_target_length + 1)`` and the loss ``(batch,)``; the three copies are
  freed as it returns (:func:`forward`).
- ``ctc_loss_backward_gpu_template`` makes the same three copies, ``log_beta`` (as
  ``log_alpha``) and the gradient (as ``log_probs``); on a "large" problem (its own heuristic)
  it computes the blanks' part with tensor operators, whose intermediates it allocates too
  (:func:`backward`).

The lengths are values. Where the script's own values decide them (a list, a CPU tensor, a
stand-in whose values are known, :mod:`~memforensics.plan.known`) they are used; otherwise
each takes its bound, said once: an input length is the input's length ``T``, a target length
the targets' row length (2-D targets), or concatenated 1-D targets split evenly between the
batch (their lengths must add up to the targets' length; with the even split,
``masked_select``'s upper bound over padded label rows gives back the rows' length).

Where CUDA takes cuDNN's CTC loss instead (``_use_cudnn_ctc_loss`` in
``aten/src/ATen/native/cudnn/LossCTC.cpp``: cuDNN enabled, blank 0, float32 inputs, int32 1-D
contiguous targets held on the CPU, every input length ``T`` and every target length under 256
and at most its input length), the plan makes what ``_cudnn_ctc_loss`` makes: the gradient (as
``log_probs``) in the forward, then the loss ``(batch,)``, both kept for the backward, which
scales the gradient by the loss's (``_cudnn_ctc_loss_backward``: one more tensor as
``log_probs``). cuDNN's workspace, whose size only cuDNN can say, is not counted
(:class:`Cudnn`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch.nn import _reduction

from memforensics.plan.known import Known
from memforensics.plan.values import Notes

NAME = "ctc_loss"
"""The name ``torch.ctc_loss`` and ``torch.nn.functional.ctc_loss`` share."""

BOUND = (
    "CTC loss's lengths held on the device are unknown in a plan: each takes its bound (an "
    "input length the input's length, a target length the targets' row length, or 1-D "
    "targets split evenly)"
)

_NEG_INF = -math.inf


def _values(known: Known, tensor: torch.Tensor) -> list[int] | None:
    """A lengths tensor's values, where the script's values decide them."""
    if not tensor.is_meta:
        return [int(v) for v in tensor.reshape(-1).tolist()]
    found = known.decided(tensor)
    if found is None:
        return None
    return [int(v) for v in found.reshape(-1).tolist()]


def _even(total: int, batch: int) -> list[int]:
    """``total`` split between ``batch`` as evenly as integers allow."""
    share, rest = divmod(total, max(batch, 1))
    return [share + (1 if i < rest else 0) for i in range(batch)]


def lengths(
    known: Known, notes: Notes, log_probs: torch.Tensor, targets: torch.Tensor,
    input_lengths: Any, target_lengths: Any,
) -> tuple[list[int], list[int]]:  # fmt: skip
    """Both lengths as the host holds them once ``ctc_loss`` has read them: known values, else
    their bounds (said once)."""
    batch = log_probs.size(1) if log_probs.dim() == 3 else 1
    found_in = _values(known, input_lengths) if isinstance(input_lengths, torch.Tensor) else None
    found_tg = _values(known, target_lengths) if isinstance(target_lengths, torch.Tensor) else None
    if isinstance(input_lengths, torch.Tensor) and found_in is None:
        notes.once("ctc", BOUND)
        found_in = [log_probs.size(0)] * batch
    if isinstance(target_lengths, torch.Tensor) and found_tg is None:
        notes.once("ctc", BOUND)
        if targets.dim() == 1:
            found_tg = _even(targets.size(0), batch)
        else:
            found_tg = [targets.size(-1)] * batch
    return (
        found_in if found_in is not None else [int(v) for v in input_lengths],
        found_tg if found_tg is not None else [int(v) for v in target_lengths],
    )


def loss(
    known: Known, notes: Notes, log_probs: torch.Tensor, targets: torch.Tensor,
    input_lengths: Any, target_lengths: Any, blank: int = 0, reduction: Any = "mean",
    zero_infinity: bool = False,
) -> torch.Tensor:  # fmt: skip
    """``torch.ctc_loss`` (or ``F.ctc_loss``) on a stand-in: the lengths read on the host, as
    ``ctc_loss``'s tensor overload on CUDA reads them, then the overload for lists, whose
    reduction by the target lengths makes its divisor on the device as CUDA's does."""
    il, tl = lengths(known, notes, log_probs, targets, input_lengths, target_lengths)
    if isinstance(reduction, str):
        reduction = _reduction.get_enum(reduction)
    if not cudnn(log_probs, targets, il, tl, blank):
        return torch.ctc_loss(log_probs, targets, il, tl, blank, reduction, zero_infinity)
    batched = log_probs.dim() == 3
    source = log_probs if batched else log_probs.unsqueeze(1)
    res: torch.Tensor = Cudnn.apply(source, zero_infinity)  # type: ignore[no-untyped-call, unused-ignore]
    if reduction == _reduction.get_enum("mean"):
        divisor = torch.tensor(tl, dtype=res.dtype, device=res.device).clamp_min(1)
        return (res / divisor).mean()
    if reduction == _reduction.get_enum("sum"):
        return res.sum()
    return res if batched else res.squeeze(0)


def cudnn(
    log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: list[int],
    target_lengths: list[int], blank: int,
) -> bool:  # fmt: skip
    """``_use_cudnn_ctc_loss`` for lengths given as lists, on a CUDA ``log_probs`` (after
    ``ctc_loss`` has made an unbatched input a batch of one)."""
    time = log_probs.size(0)
    return bool(
        torch.backends.cudnn.enabled
        and blank == 0
        and targets.dim() == 1
        and log_probs.dtype == torch.float32
        and targets.dtype == torch.int32
        and not targets.is_meta
        and targets.device.type == "cpu"
        and targets.is_contiguous()
        and log_probs.dim() in (2, 3)
        and all(length == time for length in input_lengths)
        and all(
            target < 256 and target <= given
            for target, given in zip(target_lengths, input_lengths, strict=False)
        )
    )


class Cudnn(torch.autograd.Function):  # type: ignore[misc, unused-ignore]  # Any without torch
    """``_cudnn_ctc_loss`` and its derivative, by what they allocate."""

    @staticmethod
    def forward(ctx: Any, log_probs: torch.Tensor, zero_infinity: bool) -> torch.Tensor:
        """The gradient (``empty_like(log_probs)``), then the costs ``(batch,)``; cuDNN's
        workspace between them is not counted."""
        raw_grad = torch.empty_like(log_probs, memory_format=torch.contiguous_format)
        costs = log_probs.new_empty((log_probs.size(1),))
        ctx.save_for_backward(costs, raw_grad)
        ctx.zero_infinity = zero_infinity
        return costs

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:
        """``_cudnn_ctc_loss_backward``: the saved gradient scaled by the loss's gradient
        (where the loss is zero, zero, under ``zero_infinity``)."""
        costs, raw_grad = ctx.saved_tensors
        scaled = raw_grad * grad_out.unsqueeze(0).unsqueeze(2)
        if ctx.zero_infinity:
            zero = torch.zeros((), dtype=raw_grad.dtype, device=raw_grad.device)
            scaled = torch.where(costs.unsqueeze(0).unsqueeze(2) == 0, zero, scaled)
        return scaled, None


def _copies(like: torch.Tensor, batch: int) -> list[torch.Tensor]:
    """The target lengths, input lengths and batch offsets copied to the device
    (``at::tensor(target_lengths, ...)``, ``at::tensor(input_lengths, ...)``,
    ``tg_batch_offsets.cuda()``), in that order."""
    return [torch.empty((batch,), dtype=torch.long, device=like.device) for _ in range(3)]


def _release(copies: list[torch.Tensor]) -> None:
    """The copies freed as the CUDA function returns, its locals in reverse order of
    construction: the input lengths, the target lengths, then the batch offsets (made first,
    on the host, and moved to the device last)."""
    del copies[1]  # the input lengths
    del copies[0]  # the target lengths
    copies.clear()  # the batch offsets


def forward(
    within: AbstractContextManager[Any], known: Known, notes: Notes, log_probs: torch.Tensor,
    targets: torch.Tensor, input_lengths: Any, target_lengths: Any, blank: int = 0,
    zero_infinity: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``_ctc_loss`` (both overloads): ``ctc_loss_gpu_template``'s allocations, made within
    ``within`` (the mode that gives them blocks)."""
    _, tl = lengths(known, notes, log_probs, targets, input_lengths, target_lengths)
    batch = log_probs.size(1)
    max_target = max(tl, default=0)
    with torch._C.DisableTorchFunction(), within:
        copies = _copies(log_probs, batch)
        log_alpha = log_probs.new_empty((batch, log_probs.size(0), 2 * max_target + 1))
        neg_log_likelihood = log_probs.new_empty((batch,))
        _release(copies)
    return neg_log_likelihood, log_alpha


def large(log_probs: torch.Tensor) -> bool:
    """``ctc_loss_backward_gpu_template``'s "large problem" heuristic: the blanks' part
    computed with tensor operators rather than its naive kernel."""
    time, batch, labels = (int(size) for size in log_probs.shape)
    return 2 * time + (24 * batch) // 10 + (2 * labels) // 10 > 450


def backward(
    within: AbstractContextManager[Any], known: Known, notes: Notes, grad_out: torch.Tensor,
    log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: Any, target_lengths: Any,
    neg_log_likelihood: torch.Tensor, log_alpha: torch.Tensor, blank: int,
    zero_infinity: bool = False,
) -> torch.Tensor:  # fmt: skip
    """``_ctc_loss_backward`` (both overloads): ``ctc_loss_backward_gpu_template``'s
    allocations, made within ``within``."""
    _, tl = lengths(known, notes, log_probs, targets, input_lengths, target_lengths)
    batch = log_probs.size(1)
    max_target = max(tl, default=0) if targets.dim() == 1 else log_alpha.size(2) // 2
    with torch._C.DisableTorchFunction(), within:
        copies = _copies(log_probs, batch)
        log_beta = torch.empty_like(log_alpha, memory_format=torch.contiguous_format)
        log_beta.fill_(_NEG_INF)
        grad = torch.full_like(log_probs, _NEG_INF, memory_format=torch.contiguous_format)
        if large(log_probs):
            grad = _blanks(grad, grad_out, log_probs, neg_log_likelihood, log_alpha, log_beta,
                           blank, max_target, zero_infinity)  # fmt: skip
        del log_beta
        _release(copies)
    return grad


def _strided(tensor: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    """Every other target position of ``log_alpha`` or ``log_beta``: the blanks'."""
    stride = tensor.stride()
    return tensor.as_strided(size, (stride[0], stride[1], stride[2] * 2))


def _blanks(
    grad: torch.Tensor, grad_out: torch.Tensor, log_probs: torch.Tensor,
    neg_log_likelihood: torch.Tensor, log_alpha: torch.Tensor, log_beta: torch.Tensor,
    blank: int, max_target: int, zero_infinity: bool,
) -> torch.Tensor:  # fmt: skip
    """The large problem's operators, as ``ctc_loss_backward_gpu_template`` calls them."""
    batch = log_probs.size(1)
    size = (batch, log_alpha.size(1), max_target + 1)
    torch.exp(log_probs, out=grad)
    grad_blank = grad.narrow(2, blank, 1)
    grad_blank -= (
        torch.logsumexp(_strided(log_alpha, size) + _strided(log_beta, size), 2, True)
        .permute(1, 0, 2)
        .add_(neg_log_likelihood.view(1, batch, 1))
        .sub_(log_probs.narrow(2, blank, 1))
        .exp_()
    )
    grad *= grad_out.view(1, batch, 1)
    if zero_infinity:
        infinite = neg_log_likelihood.view(1, batch, 1) == math.inf
        grad = torch.where(infinite, torch.zeros((), dtype=grad.dtype, device=grad.device), grad)
    return grad
