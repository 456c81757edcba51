"""Masks a sampler sets by index: torchvision's ``BalancedPositiveNegativeSampler`` (every
R-CNN's proposals and boxes) marks at most ``batch_size_per_image`` entries of a mask of zeros
(``mask[idx] = 1``) and its heads take ``torch.where(pos | neg)``. The values are unknown in a
plan; the count is bounded by the script's own code, and the plan selects that many, as a GPU
does, where it used to select every entry. The heads then take the sampled labels that are
positive (``torch.where(labels > 0)``), bounded by the positives the sampler picked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from planned import printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

SAMPLER = """
import json
import torch

n, per_image, fraction = 2002, 512, 0.25
head = torch.nn.Linear(8, 1, device="cuda")
matched = head(torch.randn(n, 8, device="cuda")).squeeze(1).long()  # values unknown
positive = torch.where(matched >= 1)[0]
negative = torch.where(matched == 0)[0]
num_pos = min(positive.numel(), int(per_image * fraction))
num_neg = min(negative.numel(), per_image - num_pos)
pos_idx = positive[torch.randperm(positive.numel(), device=positive.device)[:num_pos]]
neg_idx = negative[torch.randperm(negative.numel(), device=negative.device)[:num_neg]]
pos = torch.zeros_like(matched, dtype=torch.uint8)
neg = torch.zeros_like(matched, dtype=torch.uint8)
pos[pos_idx] = 1
neg[neg_idx] = 1
filled = torch.zeros(n, device="cuda").index_fill_(0, pos_idx[:7], 1.0)
print(json.dumps({
    "negatives": negative.numel(),
    "sampled": torch.where(pos | neg)[0].numel(),
    "both": torch.where(pos & neg)[0].numel(),
    "picked": matched[pos.bool()].numel(),
    "selected": matched.masked_select(neg.bool()).numel(),
    "filled": torch.where(filled)[0].numel(),
    "unknown": torch.where(matched > 0)[0].numel(),
}))
"""


def test_a_samplers_masks_select_what_it_set_not_every_entry(tmp_path: Path) -> None:
    """``torch.where(pos | neg)`` of a sampler's masks of 2,002 proposals selects 512 (128
    set in one, 384 in the other), ``&`` at most 128, a boolean index and ``masked_select``
    at most what their mask set, an ``index_fill_`` of 7 indices 7; a comparison of unknown
    values still selects every entry, and ``== 0`` of them (assumed false elsewhere) is not
    taken to select none."""
    script(tmp_path, SAMPLER)
    facts = printed_facts(tmp_path, "--device-capability", "8.0")
    assert facts == {
        "negatives": 2002,
        "sampled": 512,
        "both": 128,
        "picked": 128,
        "selected": 384,
        "filled": 7,
        "unknown": 2002,
    }


HEADS = """
import json
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
n, per_image, fraction = 2002, 512, 0.25
gt_labels = torch.tensor([1, 2, 3]).to(device)
head = torch.nn.Linear(8, 3, device=device)
quality = head(torch.randn(n, 8, device=device))  # a model's values: unknown in a plan
best, matched = quality.max(dim=1)
labels = gt_labels[matched]
labels[best < 0.4] = 0  # background
labels[(best >= 0.4) & (best < 0.5)] = -1  # left out by the sampler

positive = torch.where(labels >= 1)[0]
negative = torch.where(labels == 0)[0]
num_pos = min(positive.numel(), int(per_image * fraction))
num_neg = min(negative.numel(), per_image - num_pos)
pos_idx = positive[torch.randperm(positive.numel(), device=device)[:num_pos]]
neg_idx = negative[torch.randperm(negative.numel(), device=device)[:num_neg]]
pos = torch.zeros_like(labels, dtype=torch.uint8)
neg = torch.zeros_like(labels, dtype=torch.uint8)
pos[pos_idx] = 1
neg[neg_idx] = 1
sampled = torch.where(pos | neg)[0]
sampled_labels = labels[sampled]
proposals = torch.randn(n, 4, device=device)[sampled]
rois = proposals[torch.where(sampled_labels > 0)[0]]
facts = {
    "sampled": sampled.numel(),
    "rois": rois.shape[0],
    "background": torch.where(sampled_labels == 0)[0].numel(),
    "left_out": torch.where(sampled_labels < 0)[0].numel(),
    "kept": torch.where(sampled_labels >= 0)[0].numel(),
}
labels[:] = 1  # written: what was picked from the labels no longer says what they hold
facts["rewritten"] = torch.where(labels[sampled] > 0)[0].numel()
print(json.dumps(facts))
"""


def test_a_test_of_sampled_values_selects_at_most_what_the_sampler_picked_for_it(
    tmp_path: Path,
) -> None:
    """Labels gathered at a sampler's picks (positives from ``labels >= 1``, negatives from
    ``labels == 0``) hold at most 128 positives and 384 zeros, as on a GPU: ``labels > 0`` of
    them selects 128 RoIs, not all 512, ``< 0`` none, ``>= 0`` all; after a write into the
    labels a test of them takes every entry again. The same script run on the CPU, with real
    values (enough positives and negatives to fill the sample), gives the same figures."""
    path = script(tmp_path, HEADS)
    planned = printed_facts(tmp_path, "--device-capability", "8.0")
    assert planned == {
        "sampled": 512,
        "rois": 128,
        "background": 384,
        "left_out": 0,
        "kept": 512,
        "rewritten": 512,
    }
    done = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stdout.splitlines()[0]) == planned


CLASSES = """
import json
import torch

device = "cuda"
proposals, classes = 1000, 91
head = torch.nn.Linear(8, classes, device=device)
scores = head(torch.randn(proposals, 8, device=device)).softmax(-1)[:, 1:]  # values unknown
labels = torch.arange(classes, device=device).view(1, -1).expand(proposals, classes)[:, 1:]
scores, labels = scores.reshape(-1), labels.reshape(-1)
inds = torch.where(scores > 0.05)[0]
scores, labels = scores[inds], labels[inds]
keep = torch.where(scores >= 0.0)[0]  # a test of other unknown values: distinct positions
labels = labels[keep]
found = torch.unique(labels)
largest = max(torch.where(labels == c)[0].numel() for c in found)  # batched_nms' loop
print(json.dumps({"boxes": labels.numel(), "classes": found.numel(), "per_class": largest}))
"""


def test_unique_of_decided_labels_at_unknown_picks_has_at_most_their_classes(
    tmp_path: Path,
) -> None:
    """A detector's class labels (``arange(91)`` over 1,000 proposals, background dropped)
    gathered at positions a test of unknown scores picks hold at most 90 distinct values, and
    at most 1,000 equal to one class: ``unique`` makes at most 90 and each class's
    ``torch.where(labels == c)`` at most 1,000, where every one of the 90,000 was distinct and
    selected (torchvision's ``batched_nms`` then looped 90,000 times over them all)."""
    script(tmp_path, CLASSES)
    planned = printed_facts(tmp_path, "--device-capability", "8.0")
    assert planned == {"boxes": 90000, "classes": 90, "per_class": 1000}
