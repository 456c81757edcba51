"""A metric-learning miner (pytorch-metric-learning's ``MultiSimilarityMiner``) writes its
dtype's largest value over a similarity matrix's negative pairs and the smallest over its
positive ones, sorts each row and tests the sorted values against a row's extreme: a model's
similarities are unknown in a plan, but the written extremes are known, a sort puts them at
the rows' ends, and the tests of them are decided, so the pairs selected are bounded by the
labels, as on a GPU, where every entry of the matrix was one."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import printed_facts, printed_on_cpu, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

MINER = """
import json
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
n = 128
labels = (torch.arange(n) * 7 % 20).to(device)
head = torch.nn.Linear(8, 16, device=device)
emb = torch.nn.functional.normalize(head(torch.randn(n, 8, device=device)))
mat = emb @ emb.t()  # a model's similarities: unknown in a plan
matches = labels.unsqueeze(1) == labels.unsqueeze(0)
diffs = ~matches
matches.fill_diagonal_(False)
a1, p = torch.where(matches)
a2, neg = torch.where(diffs)
top, bottom = torch.finfo(mat.dtype).max, torch.finfo(mat.dtype).min
mat_pos = mat.clone()
mat_neg = mat
mat_pos[a2, neg] = top
mat_neg[a1, p] = bottom
mat_pos.fill_diagonal_(top)
mat_neg.fill_diagonal_(bottom)
pos_sorted, pos_idx = torch.sort(mat_pos, dim=1)
neg_sorted, neg_idx = torch.sort(mat_neg, dim=1)
hard_pos = torch.where(pos_sorted - 0.1 < neg_sorted[:, -1].unsqueeze(1))
hard_neg = torch.where(neg_sorted + 0.1 > pos_sorted[:, 0].unsqueeze(1))
anchors, _ = torch.where(hard_pos[0].unsqueeze(1) == hard_neg[0])  # the loss's triplets
print(json.dumps({
    "positives": a1.numel(),
    "negatives": a2.numel(),
    "hard_pos": hard_pos[0].numel(),
    "hard_neg": hard_neg[0].numel(),
    "triplets": anchors.numel(),
    "ends": int((pos_sorted[:, -1] == top).sum()),
    "top": int((mat_pos.topk(3, dim=1).values == top).sum()),
}))
"""


def test_a_sort_of_written_extremes_bounds_a_miner_s_pairs_by_its_labels(tmp_path: Path) -> None:
    """128 labels of 20 classes: the hard pairs a plan selects are at most the positive and
    the negative pairs (the CPU's at most as many), where each was all 16,384 entries, and the
    triplets that pair them by anchor at most each anchor's positives times its negatives,
    c·(c-1)·(128-c) summed over the classes' sizes c; the sorted rows' last values and a
    ``topk``'s three largest read as written, as on the CPU."""
    path = script(tmp_path, MINER)
    planned = printed_facts(tmp_path, "--device-capability", "9.0")
    on_cpu = printed_on_cpu(path)
    sizes = [[(7 * i) % 20 for i in range(128)].count(k) for k in range(20)]
    positives = sum(c * (c - 1) for c in sizes)
    assert on_cpu["positives"] == planned["positives"] == positives
    assert on_cpu["negatives"] == planned["negatives"] == 128 * 128 - sum(c * c for c in sizes)
    assert planned["hard_pos"] == positives
    assert planned["hard_neg"] == planned["negatives"]
    assert on_cpu["hard_pos"] <= planned["hard_pos"]
    assert on_cpu["hard_neg"] <= planned["hard_neg"]
    assert planned["triplets"] == sum(c * (c - 1) * (128 - c) for c in sizes)
    assert on_cpu["triplets"] <= planned["triplets"]
    assert planned["ends"] == on_cpu["ends"] == 128
    assert planned["top"] == on_cpu["top"] == 3 * 128
