"""Masks a sampler sets by index: torchvision's ``BalancedPositiveNegativeSampler`` (every
R-CNN's proposals and boxes) marks at most ``batch_size_per_image`` entries of a mask of zeros
(``mask[idx] = 1``) and its heads take ``torch.where(pos | neg)``. The values are unknown in a
plan; the count is bounded by the script's own code, and the plan selects that many, as a GPU
does, where it used to select every entry."""

from __future__ import annotations

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
