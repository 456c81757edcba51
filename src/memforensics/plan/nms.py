"""torchvision's ``nms`` on stand-ins, allocating what its CUDA kernel allocates.

torchvision registers ``torchvision::nms`` (behind ``torchvision.ops.nms``, ``batched_nms``,
and so every detection model's region proposals and post-processing) with a fake kernel that
asks for an unbacked size, which a ``meta`` tensor outside ``FakeTensorMode`` cannot give: a
detection model's first step raised there. Its output's length is the number of boxes kept,
a value. This module answers it on the planned device as ``nms_kernel`` in torchvision's
``torchvision/csrc/ops/cuda/nms_kernel.cu`` runs (0.21 and later keep the flags on the
device), through the storage mode, so each temporary takes and frees a block where CUDA's
does:

- ``scores.sort(0, descending=true)``: the sorted scores and their order (``n`` int64), the
  sorted scores freed at once (only the order is kept);
- ``dets.index_select(0, order).contiguous()``: the boxes in that order, ``(n, 4)``;
- the suppression mask, ``n * ceil(n / 64)`` int64 (one bit per pair of boxes);
- the keep flags, ``n`` bool, zeroed;
- ``order.masked_select(keep)``: the kept boxes' indices (``nonzero``'s ``(k, 1)`` int64,
  then the ``k`` int64 result, ``nonzero``'s freed);
- the locals freed as the kernel returns, the last made first.

How many boxes are kept (``k``) is the GPU's where the script's own values decide the boxes
and scores (computed by torchvision's CPU kernel on the CPU copies); otherwise every box is
kept, the upper bound of a data-dependent shape (:mod:`~memforensics.plan.shapes`), said once.
torchvision ≤ 0.20 made the flags on the host and copied the ``k`` kept indices back to the
device before indexing: the same two ``k``-sized blocks, the same peak.
"""

from __future__ import annotations

from typing import Any

import torch

from memforensics.plan.known import Known
from memforensics.plan.shapes import BOUND
from memforensics.plan.values import Notes

NAME = "torchvision::nms"
"""The operator's qualified name: torchvision registers it, the plan never imports it."""

_THREADS = 64
"""``threadsPerBlock``: boxes compared by one thread block, one bit each of an int64."""


def forward(
    within: Any, known: Known, notes: Notes, dets: torch.Tensor, scores: torch.Tensor, *rest: Any
) -> torch.Tensor:
    """``torchvision::nms(dets, scores, iou_threshold)``: the indices of the boxes kept, in
    decreasing order of score; ``within`` is the mode that gives each temporary its block."""
    iou_threshold = rest[0]
    count = int(dets.shape[0])
    kept = _kept(known, notes, dets, scores, iou_threshold)
    with torch._C.DisableTorchFunction(), within:
        if dets.numel() == 0:
            return torch.empty(0, dtype=torch.long, device=dets.device)
        return _impl(dets, scores, count, kept)


def _kept(
    known: Known, notes: Notes, dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float
) -> int:
    """How many boxes the kernel keeps: from the CPU copies where known, else all of them."""
    boxes, values = known.value(dets), known.value(scores)
    if boxes is not None and values is not None:
        with torch._C.DisableTorchFunction():
            found = torch.ops.torchvision.nms(boxes, values, iou_threshold)
        return int(found.numel())
    notes.once("bound", BOUND)
    return int(dets.shape[0])


def _impl(dets: torch.Tensor, scores: torch.Tensor, count: int, kept: int) -> torch.Tensor:
    """``nms_kernel`` on ``count`` boxes of which ``kept`` survive; its locals freed as it
    returns, the last made first."""
    order = scores.sort(0, descending=True)[1]  # the sorted scores: a temporary, freed here
    dets_sorted = dets.index_select(0, order).contiguous()
    blocks = -(-count // _THREADS)
    mask = torch.empty(count * blocks, dtype=torch.long, device=dets.device)
    keep = torch.zeros(count, dtype=torch.bool, device=dets.device)
    indices = torch.empty((kept, 1), dtype=torch.long, device=dets.device)  # nonzero(keep)
    result = torch.empty(kept, dtype=torch.long, device=dets.device)
    del indices, keep, mask, dets_sorted, order
    return result
