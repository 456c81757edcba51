"""Masks made by broadcasting two known ones against each other: a metric-learning miner
(pytorch-metric-learning's ``get_all_triplets_indices``) takes every (anchor, positive,
negative) of a batch as ``torch.where(matches.unsqueeze(2) * diffs.unsqueeze(1))``, the batch's
size cubed. Its values are not kept (a broadcast result describes its inputs), but how many
are non-zero follows from them, and the plan selects that many, as a GPU does, where it used to
select every entry. A side whose values are unknown but bounded counts as often as it is
repeated. The batch's labels, taken apart by ``torch.unique(labels, dim=0)``, stay known."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import printed_facts, printed_on_cpu, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

TRIPLETS = """
import json
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
n = 96
labels = (torch.arange(n) * 7 % 10).to(device)
matches = (labels.unsqueeze(1) == labels.unsqueeze(0)).byte()
diffs = matches ^ 1
matches.fill_diagonal_(0)
anchor, positive, negative = torch.where(matches.unsqueeze(2) * diffs.unsqueeze(1))
flags = matches.bool().unsqueeze(2) & diffs.bool().unsqueeze(1)
head = torch.nn.Linear(4, 1, device=device)
scores = head(torch.randn(n, 4, device=device)).squeeze(1)  # a model's values: unknown in a plan
picked = torch.zeros(n, device=device)
picked[scores.topk(5).indices] = 1.0  # five entries set, which ones unknown
row = torch.ones(8, device=device)
classes = torch.unique(labels[:, None], dim=0)
print(json.dumps({
    "triplets": anchor.numel(),
    "anded": torch.where(flags)[0].numel(),
    "spread": torch.where(picked.unsqueeze(1) * row.unsqueeze(0))[0].numel(),
    "classes": classes.flatten().tolist(),
    "per_class": (classes[:, None] == labels[:, None]).all(2).sum(1).tolist(),
}))
"""


def test_a_broadcast_product_of_known_masks_selects_what_a_gpu_does(tmp_path: Path) -> None:
    """96 labels of 10 classes: ``torch.where`` of the triplets' broadcast product selects
    the CPU's count, c·(c-1)·(96-c) summed over the classes' sizes c, not 96³; ``&`` of the
    same flags alike; a mask of five unknown entries times a row of eight ones at most 40;
    ``unique(dim=0)`` of the labels gives the CPU's classes, and the counts per class read
    from them are the CPU's."""
    path = script(tmp_path, TRIPLETS)
    planned = printed_facts(tmp_path, "--device-capability", "9.0")
    on_cpu = printed_on_cpu(path)
    counts = [(7 * i) % 10 for i in range(96)]
    analytic = sum(c * (c - 1) * (96 - c) for c in (counts.count(k) for k in range(10)))
    assert on_cpu["triplets"] == analytic
    assert planned == on_cpu
