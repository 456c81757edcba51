"""torchvision's ``nms`` on the planned device: detection models (Faster R-CNN, Mask R-CNN,
RetinaNet, SSD) call it for their proposals and their outputs, and its fake kernel asks for a
data-dependent size that ``meta`` tensors cannot give. torchvision is not among the test
dependencies (PyPI's wheel is the CUDA build, which does not load beside the CPU torch), so each
script registers ``torchvision::nms`` as torchvision does: its schema, a CPU kernel, and a fake
kernel that asks for an unbacked size (``torchvision/_meta_registrations.py``). The plan knows
the operator by that name only."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

REGISTERED = """
import json
import torch

SCHEMA = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
torch.library.define("torchvision::nms", SCHEMA)

@torch.library.impl("torchvision::nms", "cpu")
def _nms_cpu(dets, scores, iou_threshold):
    order = scores.argsort(descending=True)
    keep, dropped = [], set()
    for i in order.tolist():
        if i in dropped:
            continue
        keep.append(i)
        a = dets[i]
        for j in order.tolist():
            b = dets[j]
            w = (torch.minimum(a[2], b[2]) - torch.maximum(a[0], b[0])).clamp(min=0)
            h = (torch.minimum(a[3], b[3]) - torch.maximum(a[1], b[1])).clamp(min=0)
            inter = w * h
            union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
            if j != i and inter / union > iou_threshold:
                dropped.add(j)
    return torch.tensor(keep, dtype=torch.long)

@torch.library.register_fake("torchvision::nms")
def _nms_fake(dets, scores, iou_threshold):
    ctx = torch.library.get_ctx()
    return dets.new_empty(ctx.new_dynamic_size(), dtype=torch.long)
"""

UNKNOWN = (
    REGISTERED
    + """
n = 5000
head = torch.nn.Linear(16, 5, device="cuda")
out = head(torch.randn(n, 16, device="cuda"))
boxes, scores = out[:, :4].contiguous(), out[:, 4].contiguous()
before = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
keep = torch.ops.torchvision.nms(boxes, scores, 0.5)
print(json.dumps({"kept": list(keep.shape), "dtype": str(keep.dtype),
                  "during": torch.cuda.max_memory_allocated() - before,
                  "after": torch.cuda.memory_allocated() - before}))
"""
)

KNOWN = (
    REGISTERED
    + """
boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 11., 11.], [50., 50., 60., 60.]]).to("cuda")
scores = torch.tensor([0.9, 0.8, 0.7], device="cuda")
keep = torch.ops.torchvision.nms(boxes, scores, 0.5)
on_cpu = torch.ops.torchvision.nms(boxes.cpu(), scores.cpu(), 0.5)
print(json.dumps({"kept": keep.tolist(), "on_cpu": on_cpu.tolist()}))
"""
)


def _block(nbytes: int) -> int:
    """What the caching allocator hands out for ``nbytes``: a multiple of 512 B."""
    return -(-nbytes // 512) * 512


def test_nms_of_a_models_boxes_keeps_every_box_and_takes_cudas_temporaries(
    tmp_path: Path,
) -> None:
    """``torchvision::nms`` of 5,000 boxes a model computed (values unknown) runs, keeps all
    5,000 (its upper bound), and holds at its peak what torchvision's CUDA kernel holds: the
    order, the sorted boxes, the 5,000 by 79 int64 suppression mask, the keep flags,
    ``nonzero``'s indices and the result; after it only the result."""
    script(tmp_path, UNKNOWN)
    facts = printed_facts(tmp_path, "--device-capability", "8.0")
    n = 5000
    result = _block(n * 8)
    peak = (
        _block(n * 8)  # the order of the scores
        + _block(n * 4 * 4)  # the boxes in that order
        + _block(n * -(-n // 64) * 8)  # one bit per pair of boxes
        + _block(n)  # the keep flags
        + _block(n * 8)  # nonzero(keep)
        + result
    )
    assert facts == {"kept": [n], "dtype": "torch.int64", "during": peak, "after": result}


def test_nms_of_boxes_the_script_made_keeps_what_the_gpu_keeps(tmp_path: Path) -> None:
    """Boxes and scores copied from the host are known: ``nms`` keeps the two boxes that do not
    overlap (the second overlaps the first by 68 %), with their indices, as the CPU kernel."""
    script(tmp_path, KNOWN)
    facts = printed_facts(tmp_path, "--device-capability", "8.0")
    assert facts == {"kept": [0, 2], "on_cpu": [0, 2]}
