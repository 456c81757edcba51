"""A mixture of experts' loop that takes each expert's rows by a test of the router's unknown
choices against that expert, through the real ``memforensics plan``: the tests select a balanced
routing's shares, every routed row once between the experts, while an end-of-sequence test on a
generated token stays never equal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

TOKENS, DIM, HIDDEN, EXPERTS, TOP = 4096, 16, 64, 8, 2

CLASS_LOOP = f"""
import json, sys
import torch
import torch.nn.functional as F

gate = torch.nn.Linear({DIM}, {EXPERTS}, bias=False).cuda()
up = torch.nn.Parameter(torch.randn({EXPERTS}, {HIDDEN}, {DIM}, device="cuda"))
down = torch.nn.Parameter(torch.randn({EXPERTS}, {DIM}, {HIDDEN}, device="cuda"))
x = torch.randn({TOKENS}, {DIM}, device="cuda", requires_grad=True)


def expert(e, rows):
    return F.linear(F.silu(F.linear(rows, up[e])), down[e])


def routed(every):  # DeepSeek's training path: each row once per choice, then each expert's
    weight, chosen = torch.topk(gate(x).softmax(-1), k={TOP}, dim=-1, sorted=False)
    flat = chosen.view(-1)
    rows = x.repeat_interleave({TOP}, dim=0)
    y = torch.empty_like(rows)
    taken = []
    for i in range(1 if every else {EXPERTS}):
        if every:  # the same operators on every routed row at once, as one expert
            mask = torch.ones(flat.shape, dtype=torch.bool, device="cuda")
        else:
            mask = flat == i
        if sys.argv[1] == "nonzero":
            index = mask.nonzero().squeeze(-1)
            y[index] = expert(i, rows[index])
            taken.append(index.shape[0])
        else:
            y[mask] = expert(i, rows[mask])
            taken.append(rows[mask].shape[0])
    return (y.view(*weight.shape, -1) * weight.unsqueeze(-1)).sum(dim=1), taken


def kept(every):
    start = torch.cuda.memory_allocated()
    out, taken = routed(every)
    held = torch.cuda.memory_allocated() - start
    out.sum().backward()
    return taken, held


torch.ones(1, 1, device="cuda") @ torch.ones(1, 1, device="cuda")  # cuBLAS's workspace
taken, held = kept(False)
drawn = torch.randint(0, {EXPERTS}, ({TOKENS},), device="cuda")
sizes = [(drawn == e).nonzero().shape[0] for e in range({EXPERTS})]
tokens = torch.argmax(torch.randn(4, 50, device="cuda"), dim=-1)
print(json.dumps({{"taken": taken, "held": held, "every": kept(True)[1], "sizes": sizes,
                  "eos": bool((tokens == 2).any()), "pad": (tokens != 0).sum().item()}}))
"""


@pytest.mark.parametrize("take", ["mask", "nonzero"])
def test_an_expert_loop_testing_each_class_takes_each_routed_row_once(
    tmp_path: Path, take: str
) -> None:
    """A loop over the experts taking each one's rows by ``flat == i`` (indexing by the mask, or
    its ``nonzero``) of a router's top-k choices takes a balanced share at each, every routed row
    once, and keeps for backward what the same operators on all the routed rows at once keep;
    known indices are counted as they are, and an end-of-sequence test of an argmax stays
    never equal."""
    script(tmp_path, CLASS_LOOP)
    done = plan(tmp_path, "train.py", take)
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    routed = TOKENS * TOP
    assert facts["taken"] == [routed // EXPERTS] * EXPERTS
    assert facts["every"] >= routed * (DIM + 2 * HIDDEN) * 4  # the rows' activations
    assert abs(facts["held"] - facts["every"]) <= facts["every"] // 10
    assert sum(facts["sizes"]) == TOKENS  # drawn again on the CPU: the drawn values' counts
    assert facts["eos"] is False
    assert facts["pad"] == 4


GUARDED = f"""
import json
import torch
import torch.nn.functional as F

gate = torch.nn.Linear({DIM}, {EXPERTS}, bias=False).cuda()
up = torch.nn.Parameter(torch.randn({EXPERTS}, {HIDDEN}, {DIM}, device="cuda"))
x = torch.randn({TOKENS}, {DIM}, device="cuda", requires_grad=True)
weight, chosen = torch.topk(gate(x).softmax(-1), k={TOP}, dim=-1)
flat = chosen.view(-1)
rows = x.repeat_interleave({TOP}, dim=0)
ran, counted, total = [], [], 0
for i in range({EXPERTS}):
    mask = flat == i
    if not mask.any():  # an expert no token chose is skipped
        continue
    ran.append(i)
    counted.append(int(mask.sum()))
    total = total + F.silu(F.linear(rows[mask], up[i])).sum()
total.backward()
tokens = torch.argmax(torch.randn(4, 50, device="cuda"), dim=-1)  # fewer than the classes
eos = tokens == 2
print(json.dumps({{"ran": ran, "counted": counted, "all": bool((flat == 0).all()),
                  "eos": [bool(eos.any()), bool(eos.all()), int(eos.sum())]}}))
"""


def test_an_expert_guarded_by_any_of_its_test_runs_on_its_share(tmp_path: Path) -> None:
    """A loop that skips an expert whose test of the router's choices selects nothing
    (``if not mask.any(): continue``) runs every expert, each counting (``mask.sum()``) its
    balanced share; a count of an end-of-sequence test of fewer tokens than the vocabulary's
    classes stays never equal."""
    script(tmp_path, GUARDED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    assert facts["ran"] == list(range(EXPERTS))
    assert facts["counted"] == [TOKENS * TOP // EXPERTS] * EXPERTS
    assert facts["all"] is False
    assert facts["eos"] == [False, False, 0]


OFFSETS = f"""
import json
import torch

gate = torch.nn.Linear({DIM}, {EXPERTS}, bias=False).cuda()
x = torch.randn({TOKENS}, {DIM}, device="cuda")
with torch.no_grad():
    weight, chosen = torch.topk(gate(x).softmax(-1), k={TOP}, dim=-1)
    ids, perm = torch.sort(chosen.reshape(-1))  # Hugging Face's grouped_mm experts
    sorted_counts = torch.histc(ids.int(), bins={EXPERTS}, min=0, max={EXPERTS} - 1)
    titan = torch.histc(chosen.view(-1), bins={EXPERTS}, min=0, max={EXPERTS})  # torchtitan
    hit = torch.bincount(chosen.view(-1), minlength={EXPERTS}).gt(0).nonzero()
print(json.dumps({{"sorted": sorted_counts.tolist(), "titan": titan.tolist(),
                  "hit": hit.shape[0]}}))
"""


def test_histograms_of_sorted_or_flat_choices_give_each_expert_its_share(tmp_path: Path) -> None:
    """``histc`` of the router's choices sorted by expert (Hugging Face's ``grouped_mm`` offsets,
    cast to ``int``) or flat over ``[0, E]`` (torchtitan's ``num_tokens_per_expert``) and the
    experts ``bincount`` finds hit give every expert a balanced routing's share."""
    script(tmp_path, OFFSETS)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    assert facts["sorted"] == [TOKENS * TOP // EXPERTS] * EXPERTS
    assert facts["titan"] == [TOKENS * TOP // EXPERTS] * EXPERTS
    assert facts["hit"] == EXPERTS


PREDICTED = f"""
import json
import torch

model = torch.nn.Linear({DIM}, {EXPERTS}).cuda()
with torch.no_grad():
    preds = model(torch.randn({TOKENS}, {DIM}, device="cuda")).softmax(-1).argmax(-1)
    few = preds[:3]
    print(json.dumps({{"distinct": len(torch.unique(preds)), "few": len(torch.unique(few)),
                      "counts": torch.unique(preds, return_counts=True)[1].shape[0]}}))
"""


def test_unique_of_an_argmax_over_classes_holds_at_most_those_classes(tmp_path: Path) -> None:
    """``unique`` of a classifier's ``argmax`` over ``E`` classes (torchmetrics' check of its
    predictions) finds ``E`` distinct values, or as many as it holds where fewer, never one a
    row, which a GPU cannot give."""
    script(tmp_path, PREDICTED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert json.loads(line) == {"distinct": EXPERTS, "few": 3, "counts": EXPERTS}


CAPACITY = 40

WIDENED = f"""
import json
import torch
import torch.nn.functional as F

gate = torch.nn.Linear({DIM}, {EXPERTS}).cuda()
scores = gate(torch.randn(2, 2048, {DIM}, device="cuda")).softmax(-1)  # too large to keep
mask = F.one_hot(scores.argmax(-1), {EXPERTS}) * (scores > 0.2)  # routed where it scores enough
positions = (mask.cumsum(1) * mask).sum(-1).long()  # each token's place in its expert's queue
widest = max(positions.max() + 2, {CAPACITY})  # st-moe's safe_one_hot
hot = F.one_hot(positions, widest)[..., :{CAPACITY}]
print(json.dumps({{"width": hot.shape[-1], "read": int(positions.max()),
                  "read_after": int(positions.max() + 2)}}))
"""


def test_a_one_hot_widened_by_the_largest_unknown_position_keeps_its_capacity(
    tmp_path: Path,
) -> None:
    """The largest of unknown integer positions computes as the zero it reads as, so
    st-moe's one-hot over ``max(positions.max() + 2, capacity)`` classes cut to the capacity
    keeps the capacity, as on any GPU, and its read agrees with what is computed from it."""
    script(tmp_path, WIDENED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    assert facts["width"] == CAPACITY
    assert facts["read_after"] == facts["read"] + 2
