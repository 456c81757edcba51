"""Values a planned script reads back from the device, through the real ``memforensics plan``:
those the script's own values decide read as on the GPU, loops that stop on the others run to
their own bounds, and ``torch.profiler`` around the forwards works and sees the planned memory."""

from __future__ import annotations

import cmath
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

SHAPES = """
import numpy as np, torch
data = np.arange(4 * 16).reshape(4, 16)
x = torch.randn(4, 16, device="cuda")
n = torch.tensor(x.shape[1], device="cuda")
batch = data[:, : int(n // 2)]
drawn = torch.randint(3, 7, (64,), device="cuda").tolist()
mask = torch.ones(4, 16, device="cuda")
lengths = mask.sum(-1).long().cpu().numpy()
last = torch.arange(10, device="cuda")[-1].item()
print("shapes", batch.shape, min(drawn), max(drawn), lengths.tolist(), last)
"""


def test_a_device_scalar_the_script_made_reads_as_on_the_gpu(tmp_path: Path) -> None:
    """A size put on the device slices a numpy batch to its real width, randint draws stay
    within their bounds, sums of ones and arange read their values, and the plan says once,
    naming the first line that read one, that it computed them."""
    script(tmp_path, SHAPES)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    shapes = next(line for line in done.stdout.splitlines() if line.startswith("shapes"))
    assert shapes.startswith("shapes (4, 8) ")
    _, _, _, low, high, *rest = shapes.split()
    assert 3 <= int(low) <= int(high) < 7
    assert " ".join(rest) == "[16, 16, 16, 16] 9"
    said = [line for line in done.stderr.splitlines() if line.startswith("memforensics plan:")]
    assert len(said) == 1
    assert "computed on the CPU" in said[0]
    assert f"(first at {tmp_path / 'train.py'}:6)" in said[0]


DECODE = """
import torch
vocab, eos, limit = 5000, 0, 7  # logits too large to keep (80,000 B): their values are unknown
head = torch.nn.Linear(16, vocab).cuda()
tokens = torch.randn(4, 16, device="cuda")
unfinished = torch.ones(4, dtype=torch.long, device="cuda")
steps = 0
while True:
    steps += 1
    chosen = head(tokens).argmax(-1)  # the model's choice: no value the script decides
    done = torch.full((4,), steps >= limit, device="cuda") | (chosen == eos)
    unfinished = unfinished & ~done
    if unfinished.max() == 0:
        break
    if steps > 100:
        raise SystemExit("the decoding loop did not stop")
print("steps", steps)
"""


CONJUGATED = """
import json, torch
spectrum = torch.fft.rfft(torch.arange(6, device="cuda", dtype=torch.float32))
power = (spectrum * spectrum.conj()).real
negated = torch.tensor([1 + 2j, 3 - 4j], device="cuda").conj().imag + 0  # a negative view
print(json.dumps({"power": power.tolist(), "negated": negated.tolist()}), flush=True)
"""


def test_lazy_conjugate_and_negative_views_of_known_values_read_as_on_the_gpu(
    tmp_path: Path,
) -> None:
    """``z.conj()`` (and a negative view) of values the script made reads its storage
    conjugated, as torch reads it: a power spectrum ``z * z.conj()`` is the CPU's, not ``z * z``."""
    script(tmp_path, CONJUGATED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    spectrum = [sum(n * cmath.exp(-2j * cmath.pi * k * n / 6) for n in range(6)) for k in range(4)]
    assert found["power"] == pytest.approx([abs(x) ** 2 for x in spectrum], abs=1e-3)
    assert found["negated"] == [-2.0, 4.0]


MASKS = """
import json, torch
lengths = torch.tensor([3, 5, 2], device="cuda")
mask = torch.arange(6, device="cuda")[None, :] < lengths[:, None]
hidden = torch.randn(3, 6, 4096, device="cuda")
before = torch.cuda.memory_allocated()
packed = hidden[mask]
held = torch.cuda.memory_allocated() - before
t = torch.arange(10, device="cuda")
scores = hidden[..., 0] > 0
print(json.dumps({
    "packed": list(packed.shape), "held": held, "nonzero": list(torch.nonzero(mask).shape),
    "selected": torch.masked_select(t, t % 3 == 0).tolist(), "above": t[t > 4].tolist(),
    "unique": torch.unique(lengths % 2, return_counts=True)[1].tolist(),
    "unknown": list(hidden[scores].shape),
}), flush=True)
"""


def test_a_mask_the_script_made_selects_what_it_holds(tmp_path: Path) -> None:
    """A padding mask made from lengths on the device packs 10 of 18 positions (10 x 4096
    float32 allocated: 160 KiB), and ``nonzero``, ``masked_select``, indexing and ``unique``
    of values the script made give the GPU's shapes and values; a mask computed from a
    model's values still selects every element (the upper bound)."""
    script(tmp_path, MASKS)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    assert facts["packed"] == [10, 4096]
    assert facts["held"] == 10 * 4096 * 4
    assert facts["nonzero"] == [10, 2]
    assert facts["selected"] == [0, 3, 6, 9]
    assert facts["above"] == [5, 6, 7, 8, 9]
    assert facts["unique"] == [1, 2]
    assert facts["unknown"] == [18, 4096]


BINS = """
import json, torch
labels = torch.tensor([0, 3, 3, 7], device="cuda")
weighted = torch.bincount(labels, weights=torch.ones(4, device="cuda"), minlength=10)
n = 21
logits = torch.randn(2, n, 64, 64, device="cuda")
target = torch.zeros(2, 64, 64, dtype=torch.long, device="cuda")
confusion = torch.bincount(n * target.flatten() + logits.argmax(1).flatten(), minlength=n * n)
print(json.dumps({
    "counts": torch.bincount(labels).tolist(), "weighted": [weighted.shape[0], str(weighted.dtype)],
    "confusion": [confusion.shape[0], str(confusion.dtype)],
}), flush=True)
"""


def test_bincount_of_known_values_counts_them_and_of_unknown_ones_has_minlength_bins(
    tmp_path: Path,
) -> None:
    """``bincount`` (it had no ``meta`` kernel, so a segmentation script's confusion matrix
    stopped the plan) counts the script's own labels as the GPU does, sums float32 weights in
    float32, and of a model's predictions has ``minlength`` bins, as CUDA's kernel makes
    where every prediction is below it."""
    script(tmp_path, BINS)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    assert facts["counts"] == [1, 0, 0, 2, 0, 0, 0, 1]
    assert facts["weighted"] == [10, "torch.float32"]
    assert facts["confusion"] == [21 * 21, "torch.int64"]
    assert "bincount" in done.stderr


TOKENS, DIM, EXPERTS, TOP, HIDDEN = 4096, 256, 8, 2, 1024

EXPERT_LOOP = f"""
import json, sys
import torch
import torch.nn.functional as F

router = torch.nn.Linear({DIM}, {EXPERTS}, bias=False).cuda()
up = torch.randn({EXPERTS}, {DIM}, {HIDDEN}, device="cuda")
down = torch.randn({EXPERTS}, {HIDDEN}, {DIM}, device="cuda")
x = torch.randn({TOKENS}, {DIM}, device="cuda")
with torch.no_grad():
    weights, experts = router(x).softmax(-1).topk({TOP}, dim=-1)
    flat = experts.view(-1)
    ones = torch.ones(flat.numel(), dtype=torch.long, device="cuda")
    zeros = torch.zeros({EXPERTS}, dtype=torch.long, device="cuda")
    if sys.argv[1] == "histc":
        counts = torch.histc(flat, bins={EXPERTS}, min=0, max={EXPERTS})
    elif sys.argv[1] == "scatter_add":
        counts = zeros.scatter_add_(0, flat, ones)
    elif sys.argv[1] == "index_add":
        counts = zeros.index_add(0, flat, ones)
    else:
        counts = torch.bincount(flat, minlength={EXPERTS})
    split = counts.tolist()
    routed = x[flat.argsort() // {TOP}]
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    outs = [
        F.silu(chunk @ up[e]) @ down[e]
        for e, chunk in enumerate(routed.split(split)) if len(chunk)
    ]
    rise = torch.cuda.max_memory_allocated() - start
print(json.dumps({{"split": split, "rise": rise}}))
"""


@pytest.mark.parametrize("count", ["bincount", "histc", "scatter_add", "index_add"])
def test_tokens_per_expert_of_unknown_routing_cover_every_token_routed(
    tmp_path: Path, count: str
) -> None:
    """A mixture of experts' loop over its experts (tokens split by the counts of a router's
    top-k choices, a histogram or ones added at them, read with ``tolist``) runs: the counts of
    unknown choices give each expert a balanced routing's share, the tokens routed between
    them, so the largest hidden activation is one expert's share of the rows."""
    script(tmp_path, EXPERT_LOOP)
    done = plan(tmp_path, "train.py", count)
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    assert facts["split"] == [TOKENS * TOP // EXPERTS] * EXPERTS
    share = TOKENS * TOP // EXPERTS * HIDDEN * 4  # one expert's hidden, its share of the rows
    outputs = TOKENS * TOP * DIM * 4  # every expert's output, kept
    assert 2 * share <= facts["rise"] <= 2 * share + outputs  # its hidden and silu, at most


EXPERT_MASK = f"""
import json, sys
import torch
import torch.nn.functional as F

router = torch.nn.Linear({DIM}, {EXPERTS}, bias=False).cuda()
up = torch.nn.Parameter(torch.randn({EXPERTS}, {HIDDEN}, {DIM}, device="cuda"))
down = torch.nn.Parameter(torch.randn({EXPERTS}, {DIM}, {HIDDEN}, device="cuda"))
x = torch.randn({TOKENS}, {DIM}, device="cuda", requires_grad=True)
weights, chosen = router(x).softmax(-1).topk({TOP}, dim=-1)


def expert(e, pos, tok, out):
    hidden = F.silu(F.linear(x[tok], up[e]))
    out.index_add_(0, tok, F.linear(hidden, down[e]) * weights[tok, pos, None])


def saved(loop):
    out = torch.zeros_like(x)
    start = torch.cuda.memory_allocated()
    rows = loop(out)
    kept = torch.cuda.memory_allocated() - start
    out.sum().backward(retain_graph=True)
    return rows, kept


def eager(out):  # Hugging Face's eager experts: the experts hit, then each one's tokens
    with torch.no_grad():
        mask = F.one_hot(chosen, num_classes={EXPERTS} + 1).permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
    rows = []
    for e in (hit if sys.argv[1] == "hit" else range({EXPERTS})):
        e = e[0] if sys.argv[1] == "hit" else e
        if e == {EXPERTS}:
            continue
        pos, tok = torch.where(mask[e])
        expert(e, pos, tok, out)
        rows.append(tok.shape[0])
    return rows


def every(out):  # the same operators on every routed row at once, as one expert
    pos, tok = torch.where(torch.ones({TOP}, {TOKENS}, dtype=torch.bool, device="cuda"))
    expert(0, pos, tok, out)
    return tok.shape[0]


rows, kept = saved(eager)
print(json.dumps({{"rows": rows, "kept": kept, "every": saved(every)[1]}}))
"""


@pytest.mark.parametrize("loop", ["hit", "range"])
def test_an_eager_expert_loop_keeps_each_routed_row_once(tmp_path: Path, loop: str) -> None:
    """A mixture of experts' eager loop (a one-hot of the router's choices, each expert's
    tokens taken with ``torch.where`` over its slice, over the experts hit or all of them)
    hits every expert and gives each a balanced routing's share, every routed row once
    between them, so what it keeps for backward is what the same operators on all the routed
    rows at once keep, where each expert took every row."""
    script(tmp_path, EXPERT_MASK)
    done = plan(tmp_path, "train.py", loop)
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    assert facts["rows"] == [TOKENS * TOP // EXPERTS] * EXPERTS
    assert facts["every"] >= TOKENS * TOP * (DIM + 2 * HIDDEN) * 4  # the rows' activations
    assert abs(facts["kept"] - facts["every"]) <= facts["every"] // 10


ONE_HOT = f"""
import json, torch
import torch.nn.functional as F
logits = torch.nn.Linear(16, {EXPERTS}).cuda()(torch.randn({TOKENS}, 16, device="cuda"))
chosen = logits.topk({TOP}, -1).indices  # too large to copy: unknown
classes = torch.arange({EXPERTS}, device="cuda")
masks = {{
    "one_hot": F.one_hot(chosen, {EXPERTS}),
    "equal": (chosen[..., None] == classes).long(),
    "class_first": (classes[:, None, None] == chosen[None]).long().permute(1, 2, 0),
}}
print(json.dumps({{
    name: {{
        "taken": [torch.where(mask[..., e])[0].shape[0] for e in range({EXPERTS})],
        "ones": mask.sum().item(),
        "every_row_one_class": bool((mask.sum(-1) == 1).all()),
        "weighted": (mask.float() * 2).sum().item(),
    }}
    for name, mask in masks.items()
}}))
"""


def test_a_one_hot_of_unknown_indices_has_one_class_per_row(tmp_path: Path) -> None:
    """A one-hot of a router's unknown choices (``F.one_hot``, or a test against every class,
    laid out class last or first) has one class set in each row, as on a GPU: its slices by
    class take a balanced routing's share each, every row between them, and what is computed
    from it counts each row once."""
    script(tmp_path, ONE_HOT)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    for name, facts in json.loads(line).items():
        assert facts["taken"] == [TOKENS * TOP // EXPERTS] * EXPERTS, name
        assert facts["ones"] == TOKENS * TOP, name
        assert facts["every_row_one_class"], name
        assert facts["weighted"] == 2 * TOKENS * TOP, name


def test_a_decoding_loop_runs_to_its_maximum_length(tmp_path: Path) -> None:
    """generate()'s shape: a loop that stops when every sequence met the maximum length (a
    flag the script sets) or chose end-of-sequence (the model's value) runs exactly to the
    maximum length, and the plan says once that unknown integers and flags read as zeros."""
    script(tmp_path, DECODE)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "steps 7" in done.stdout
    said = [line for line in done.stderr.splitlines() if line.startswith("memforensics plan:")]
    assert sum("are made up in a plan" in line for line in said) == 1
    assert any("integers and flags read 0" in line for line in said)


COMPLETIONS = """
import torch
vocab, length, eos = 5000, 8, [2]  # logits over 64 KiB: its tokens are unknown
head = torch.nn.Linear(16, vocab).cuda()
completion_ids = head(torch.randn(4, length, 16, device="cuda")).argmax(-1)
is_eos = torch.isin(completion_ids, torch.tensor(eos, device="cuda"))
eos_idx = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long, device="cuda")
eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]
positions = torch.arange(is_eos.size(1), device="cuda").expand(is_eos.size(0), -1)
mask = (positions <= eos_idx.unsqueeze(1)).int()
kept = [c[m].tolist() for c, m in zip(completion_ids.cpu(), mask.bool().cpu())]
ends = torch.full((4,), length, device="cuda").masked_fill(is_eos.any(1), completion_ids[0, 0])
print("completions", [len(k) for k in kept], ends.tolist())
"""


def test_an_end_of_sequence_index_written_through_an_empty_mask_keeps_its_length(
    tmp_path: Path,
) -> None:
    """TRL's completion mask (GRPO): an end index that starts at the length and is written only
    where a row holds the end-of-sequence token (``x[mask] = ...``, ``masked_fill``) keeps the
    length for generated tokens, which never are that token, so every completion keeps all its
    tokens (none read back empty)."""
    script(tmp_path, COMPLETIONS)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "completions [8, 8, 8, 8] [8, 8, 8, 8]" in done.stdout


BEAMS = """
import torch
vocab, beams, prompt, limit = 5000, 4, 5, 12  # logits over 64 KiB: their values are unknown
head = torch.nn.Linear(16, vocab).cuda()
eos = torch.tensor([0], device="cuda")
sequences = torch.full((2, beams, limit), -1, device="cuda")
sequences[:, :, :prompt] = torch.randint(1, vocab, (2, 1, prompt), device="cuda")
finished = torch.zeros(2, beams, dtype=torch.bool, device="cuda")
worst = torch.full((2, 1), -1.0e9, device="cuda")
step, improvable = prompt, True
while improvable:
    scores, chosen = head(torch.randn(2 * beams, 16, device="cuda")).view(2, -1).topk(beams)
    order = scores.argsort(-1, descending=True)
    sequences[:, :, step] = chosen.gather(1, order)
    step += 1
    ended = torch.isin(chosen, eos) | torch.full_like(finished, step >= limit)
    finished = finished.gather(1, order) | ended
    worst = torch.where(finished, scores.min(-1, keepdim=True)[0], worst)
    improvable = bool(torch.any(scores[:, :1] > worst) & ~finished.all())
    if step > 100:
        raise SystemExit("the beam loop did not stop")
length = (sequences + 1).bool().sum(-1).max()
print("beams", step, tuple(sequences[:, :, :length].shape))
"""


def test_a_beam_loop_runs_to_its_maximum_length_and_keeps_its_length(tmp_path: Path) -> None:
    """Beam search's shape: a loop that goes on while a beam can still beat the worst finished
    one (-1e9 while none has) and not all have ended (an end-of-sequence token, the model's,
    or the maximum length, the script's), reorders its flags by unknown scores and measures
    its length by counting the positions it filled (all of them, on a GPU run where no beam
    ends early), runs to the maximum length and keeps every position."""
    script(tmp_path, BEAMS)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "beams 12 (2, 4, 12)" in done.stdout


INFERENCE_COPIES = """
import torch
eos = torch.tensor([0, 7])
with torch.inference_mode():
    moved = [eos.to("cuda"), eos.cuda(), eos.to("cuda", torch.float32),
             torch.tensor([0, 7], device="cuda")]
    print("moved", [t.tolist() for t in moved])
    vocab, steps, limit = 5000, 0, 12  # a head too large to copy: its tokens are unknown
    head = torch.nn.Linear(16, vocab).cuda()
    done = torch.zeros(2, dtype=torch.bool, device="cuda")
    while not done.all():
        token = head(torch.randn(2, 16, device="cuda")).argmax(-1)
        steps += 1
        done = done | torch.isin(token, eos.to("cuda")) | torch.full_like(done, steps >= limit)
        if steps > 100:
            raise SystemExit("the decoding loop did not stop")
print("steps", steps)
"""


def test_a_host_tensor_copied_to_the_device_under_inference_mode_keeps_its_values(
    tmp_path: Path,
) -> None:
    """Under ``inference_mode`` a host tensor sent to the device (``.to("cuda")``, ``.cuda()``,
    a cast on the way, ``torch.tensor(..., device="cuda")``) reads back its values, as under
    ``no_grad``, so a decoding loop that tests its tokens against end-of-sequence ids moved
    there runs to its maximum length (the copy read as unknown and ended it at once)."""
    script(tmp_path, INFERENCE_COPIES)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "moved [[0, 7], [0, 7], [0.0, 7.0], [0, 7]]" in done.stdout
    assert "steps 12" in done.stdout


PROFILED = """
import torch
from torch.profiler import ProfilerActivity, profile
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)]).cuda()
x = torch.randn(32, 256, device="cuda")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True,
             record_shapes=True, with_stack=True) as prof:
    for _ in range(2):
        model(x).sum().backward()
print("ops", len(prof.key_averages()))
prof.export_memory_timeline("timeline.json", device="cuda:0")
torch.cuda.memory._dump_snapshot("snapshot.pickle")
"""


def test_a_profiled_run_records_the_cpu_and_exports_the_planned_memory_timeline(
    tmp_path: Path,
) -> None:
    """Under torch.profiler with CUDA activity and profile_memory, no operator tries to record
    a CUDA event (the CPU build has none: each failure built a stack trace and made the run
    hundreds of times slower), the profiler lists the operators, the memory timeline of
    cuda:0 peaks at the plan's peak allocated, and the script goes on to dump its snapshot."""
    script(tmp_path, PROFILED)
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    assert "Failed to record CUDA event" not in done.stderr
    assert int(done.stderr.split("ops ")[1].split()[0]) > 0
    facts = json.loads(done.stdout)
    times, sizes = json.loads((tmp_path / "timeline.json").read_text())
    assert len(times) == len(sizes) > 1
    assert max(sum(row) for row in sizes) == facts["peak_allocated_bytes"]
    assert (tmp_path / "snapshot.pickle").is_file()


DISABLED_PROFILER = """
import torch
model = torch.nn.Linear(64, 64).cuda()
with torch.autograd.profiler.profile(False, use_cuda=True, record_shapes=True) as prof:
    model(torch.randn(8, 64, device="cuda")).sum().backward()
print("profiled", prof)
"""


def test_a_profiler_made_disabled_with_cuda_asked_runs_as_on_a_gpu(tmp_path: Path) -> None:
    """``autograd.profiler.profile(False, use_cuda=True)`` around the training loop (a script's
    profiling flag left off) runs and records nothing, as on a GPU; it failed for an attribute
    the disabled profiler never sets."""
    script(tmp_path, DISABLED_PROFILER)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "profiled None" in done.stdout


PROFILED_OPERATORS = """
import collections, json, sys, torch
from torch.profiler import ProfilerActivity, profile
device = sys.argv[1]
model = torch.nn.Sequential(
    torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64), torch.nn.LayerNorm(64)
).to(device)
x = torch.randn(8, 64, device=device)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
    with torch.no_grad():
        for _ in range(3):
            model(x)
prof.export_stacks("stacks.txt")
operators = [e.name for e in prof.events() if e.name.startswith(("aten::", "prims::"))]
names = collections.Counter(operators)
print(json.dumps(names), file=sys.stderr)
"""


def test_a_profile_holds_the_scripts_operators_not_the_plans_work_under_them(
    tmp_path: Path,
) -> None:
    """A profile taken with stacks under plan records the operators the script's code calls
    (each ``addmm`` once, as on the CPU), none of the plan's own work under them (meta kernels,
    the Python it runs), and ``export_stacks`` still writes its file."""
    script(tmp_path, PROFILED_OPERATORS)
    done = plan(tmp_path, "train.py", "cuda")
    assert done.returncode == 0, done.stderr
    planned = json.loads(next(line for line in done.stderr.splitlines() if line.startswith("{")))
    env = {**os.environ, "PYTHONPATH": ""}
    on_cpu = subprocess.run(
        [sys.executable, "train.py", "cpu"], cwd=tmp_path, env=env, capture_output=True,
        text=True, check=True, timeout=120,
    )  # fmt: skip
    cpu = json.loads(next(line for line in on_cpu.stderr.splitlines() if line.startswith("{")))
    assert set(planned) <= set(cpu), set(planned) - set(cpu)
    assert planned["aten::addmm"] == cpu["aten::addmm"] == 6
    assert (tmp_path / "stacks.txt").is_file()


PATIENCE = """
import math, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 10)).cuda().to(torch.bfloat16)
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(32, 64, device="cuda", dtype=torch.bfloat16)
y = torch.randint(0, 10, (32,), device="cuda")
best, bad, patience, min_delta, epochs, seen = math.inf, 0, 2, 0.01, 0, []
for epoch in range(30):
    epochs += 1
    running = 0.0
    for _ in range(3):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        running += loss.item()
    with torch.no_grad():
        val = sum(torch.nn.functional.cross_entropy(model(x), y).item() for _ in range(4)) / 4
    seen.append(val)
    print(f"epoch {epoch} train {running / 3:.3f} val {val:.4f} perplexity {math.exp(val):.1f}")
    if val < best - min_delta:
        best, bad = val, 0
    else:
        bad += 1
        if bad >= patience:
            break
print("epochs", epochs, "range", min(seen), max(seen))
"""


def test_early_stopping_on_a_validation_loss_runs_to_its_epoch_limit(tmp_path: Path) -> None:
    """A patience loop on a bfloat16 model's validation loss (min_delta 0.01, patience 2, the
    training loss read every step) sees the loss improve at every evaluation and runs all 30
    epochs, with every value read finite and its perplexity printable."""
    script(tmp_path, PATIENCE)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    last = next(line for line in done.stdout.splitlines() if line.startswith("epochs"))
    _, epochs, _, low, high = last.split()
    assert int(epochs) == 30
    assert 0 < float(low) < float(high) <= 10


ON_DEVICE = """
import torch
model = torch.nn.Linear(4096, 4096).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 4096, device="cuda")
best, bad, epochs = torch.tensor(float("inf"), device="cuda"), 0, 0
for epoch in range(30):
    epochs += 1
    torch.nn.functional.mse_loss(model(x), x).backward()
    opt.step()
    opt.zero_grad()
    with torch.no_grad():
        val = torch.nn.functional.mse_loss(model(x), x)
    if val < best - 0.01:  # tensors compared, nothing read but the flag
        best, bad = val, 0
    else:
        bad += 1
        if bad >= 2:
            break
print("epochs", epochs, "best", f"{best:.3f}")
"""


def test_a_patience_loop_comparing_tensors_runs_to_its_epoch_limit(tmp_path: Path) -> None:
    """A validation loss that torch's loss function made, compared with a best kept on the
    device (no ``.item()``), takes its made-up value where the script uses it: each epoch
    improves by more than min_delta, so all 30 epochs run and the best is a made-up loss."""
    script(tmp_path, ON_DEVICE)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    last = next(line for line in done.stdout.splitlines() if line.startswith("epochs"))
    _, epochs, _, best = last.split()
    assert int(epochs) == 30
    assert 0 < float(best) < 10


RUNNING_TOTAL = """
import torch
model = torch.nn.Linear(512, 512).cuda()
total, logged, count = torch.tensor(0.0, device="cuda"), [], 0
for step in range(4):
    loss = model(torch.ones(64, 512, device="cuda")).pow(2).mean()
    loss.backward()
    total += loss.detach()
    count += 1
    if step % 2 == 1:  # log the mean since the last log, then start again from zero
        logged.append(total.item() / count)
        total -= total
        count = 0
differences = model(torch.ones(64, 512, device="cuda")) - model(torch.ones(64, 512, device="cuda"))
same = model(torch.ones(64, 512, device="cuda"))
print("left", total.item(), "logged", len(logged), "same", (same - same).abs().sum().item(),
      "other", differences.abs().sum().item() > 0)
"""


def test_a_running_total_set_back_by_taking_it_from_itself_reads_zero(tmp_path: Path) -> None:
    """A running loss on the device, logged and then set back with ``total -= total`` (as
    Hugging Face's Trainer does), reads 0 afterwards, as any finite value less itself does on
    a GPU, where it read the round's made-up loss; a model's output less itself is zero too,
    and less another output is not decided so."""
    script(tmp_path, RUNNING_TOTAL)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "left 0.0 logged 2 same 0.0 other True" in done.stdout


UNTIL_TARGET = """
import torch
w = torch.randn(1 << 16, device="cuda", requires_grad=True)  # 256 KiB: values not kept
opt = torch.optim.SGD([w], lr=0.1)
steps = 0
loss = (w * w).mean()
while loss.item() > 0.5:  # bounded by nothing but the loss reaching its target
    loss.backward()
    opt.step()
    opt.zero_grad()
    steps += 1
    loss = (w * w).mean()
print("steps", steps)
"""


def test_a_loop_until_a_target_loss_ends(tmp_path: Path) -> None:
    """A training loop bounded only by its loss reaching 0.5 (a loss the plan cannot know)
    ends under plan: the made-up loss falls toward 0 and passes the target in bounded steps."""
    script(tmp_path, UNTIL_TARGET)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    last = next(line for line in done.stdout.splitlines() if line.startswith("steps"))
    assert 0 < int(last.split()[1]) < 10_000


LIGHTNING = """
import sys, torch
model = torch.nn.Sequential(torch.nn.Linear(64, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 10)).cuda()
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(32, 64, device="cuda")
y = torch.randint(0, 10, (32,), device="cuda")

class Logged:  # Lightning's epoch mean of a logged tensor: sum(value * batch_size) / total
    def __init__(self):
        self.value, self.total = torch.tensor(0.0).to("cuda"), torch.tensor(0).to("cuda")
    def update(self, value, batch_size):
        value = value.clone().detach()
        if value.dtype not in (torch.float32, torch.float64):
            value = value.to(torch.float32)
        self.value = self.value + value.mean() * batch_size
        self.total = self.total + batch_size
    def compute(self):
        return self.value / self.total

class EarlyStopping:  # Lightning 2.x's test, made on the device
    def __init__(self, mode, min_delta, patience):
        self.monitor_op = {"min": torch.lt, "max": torch.gt}[mode]
        self.min_delta = min_delta * (1 if self.monitor_op == torch.gt else -1)
        self.patience, self.wait_count = patience, 0
        inf = torch.tensor(torch.inf)
        self.best_score = inf if self.monitor_op == torch.lt else -inf
    def stop(self, current):
        if not torch.isfinite(current):
            return True
        if self.monitor_op(current - self.min_delta, self.best_score.to(current.device)):
            self.best_score, self.wait_count = current, 0
            return False
        self.wait_count += 1
        return self.wait_count >= self.patience

stopping, epochs = EarlyStopping(sys.argv[1], min_delta=0.001, patience=3), 0
for epoch in range(40):
    epochs += 1
    train = Logged()
    for _ in range(3):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        train.update(loss, 32)
    val = Logged()
    with torch.no_grad():
        for _ in range(4):
            val.update(torch.nn.functional.cross_entropy(model(x), y), 32)
    if stopping.stop(val.compute().squeeze()):
        break
print("epochs", epochs, "wait", stopping.wait_count, "best", f"{stopping.best_score:.4f}")
"""


def _lightning(tmp_path: Path, mode: str) -> tuple[int, int, float, list[str]]:
    """The Lightning-shaped loop planned in ``mode``: its epochs, the checks it waited at the
    end, its best as read, and the plan's notes."""
    script(tmp_path, LIGHTNING)
    done = plan(tmp_path, "train.py", mode)
    assert done.returncode == 0, done.stderr
    last = next(line for line in done.stdout.splitlines() if line.startswith("epochs"))
    _, epochs, _, wait, _, best = last.split()
    said = [line for line in done.stderr.splitlines() if line.startswith("memforensics plan:")]
    return int(epochs), int(wait), float(best), said


def test_early_stopping_compared_on_the_device_runs_to_its_epoch_limit(tmp_path: Path) -> None:
    """Lightning's EarlyStopping (min mode) compares the epoch mean of a logged loss with its
    best on the device: the made-up loss improves at every evaluation, so all 40 epochs run
    with no check waited, and the plan says the values were made up (not that the script's
    own values decided them)."""
    epochs, wait, best, said = _lightning(tmp_path, "min")
    assert (epochs, wait) == (40, 0)
    assert 0 < best < 10
    assert [line for line in said if "are made up in a plan" in line] == said[:1]
    assert not any("where the script's own values decide them" in line for line in said)


def test_early_stopping_on_a_rising_metric_on_the_device_ends_after_its_patience(
    tmp_path: Path,
) -> None:
    """In max mode the same made-up loss is a metric that never rises after its first
    evaluation: the loop ends after 1 + patience (3) evaluations, as a Python test would."""
    epochs, wait, _, _ = _lightning(tmp_path, "max")
    assert (epochs, wait) == (4, 3)


ACCURACY = """
import sys, torch
model = torch.nn.Sequential(torch.nn.Linear(32, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 10)).cuda()
opt = torch.optim.Adam(model.parameters())
X = torch.randn(256, 32)
Y = torch.randint(0, 10, (256,))
if sys.argv[1] == "device":  # every label on the device at once (values too large to keep)
    Y = torch.randint(0, 10, (1 << 14,), device="cuda")[:256]
best, bad, epochs, seen = 0.0, 0, 0, []
for epoch in range(12):
    epochs += 1
    for i in range(0, 256, 64):
        loss = torch.nn.functional.cross_entropy(model(X[i:i + 64].cuda()), Y[i:i + 64].cuda())
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss.item()
    correct, mean = 0, 0.0
    with torch.no_grad():
        for i in range(0, 256, 64):
            x, y = X[i:i + 64].cuda(), Y[i:i + 64].cuda()
            _, pred = torch.max(model(x), 1)
            correct += pred.eq(y.view_as(pred)).sum().item()
            mean += (pred == y).float().mean().item() / 4
    seen.append((correct / 256, mean))
    if correct / 256 > best and mean > 0:
        best, bad = correct / 256, 0
    else:
        bad += 1
        if bad >= 2:
            break
print("epochs", epochs, "accuracies", *(f"{a:.4f},{m:.4f}" for a, m in seen))
"""


SCORED_MASKS = """
import torch
model = torch.nn.Linear(16, 7).cuda()
x = torch.randn(1640, 16, device="cuda")
y = torch.randint(0, 7, (1640,), device="cuda")
masks = [torch.zeros(1640, dtype=torch.bool, device="cuda") for _ in range(3)]
masks[0][:140] = True
masks[1][140:640] = True
masks[2][640:] = True
opt = torch.optim.SGD(model.parameters(), lr=0.1)
best_val_acc, matched = 0.0, []
for epoch in range(6):
    loss = torch.nn.functional.cross_entropy(model(x)[masks[0]], y[masks[0]])
    loss.backward()
    opt.step()
    opt.zero_grad()
    pred = model(x).argmax(dim=-1)
    accs = [int((pred[m] == y[m]).sum()) / int(m.sum()) for m in masks]
    matched.append([round(a * int(m.sum())) for a, m in zip(accs, masks)])
    if accs[1] > best_val_acc:
        best_val_acc, test_acc = accs[1], accs[2]
print("test", test_acc, "matched", matched)
"""


def test_masks_compared_at_one_line_share_each_rounds_matches(tmp_path: Path) -> None:
    """A train, a validation and a test mask scored at one line each epoch (PyG's GAT example)
    each match one prediction in the first round, so the validation accuracy is above 0 and the
    script's ``test_acc``, set only then, exists; each round after matches one more in all,
    the larger mask taking more, and no mask's matches ever fall."""
    script(tmp_path, SCORED_MASKS)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()[0]
    matched = json.loads(printed.split("matched", 1)[1])
    assert [sum(row) for row in matched] == [3, 4, 5, 6, 7, 8]
    assert all(row[1] > 0 for row in matched)
    assert all(
        all(a <= b for a, b in zip(row, later, strict=True))
        for row, later in itertools.pairwise(matched)
    )
    assert matched[-1][2] > matched[-1][1] > 0


@pytest.mark.parametrize("labels", ["host", "device"])
def test_a_patience_loop_on_an_accuracy_runs_to_its_epoch_limit(
    tmp_path: Path, labels: str
) -> None:
    """A hand-written patience loop on a validation accuracy (predictions compared with labels
    on the device, counted with ``.item()`` and averaged as floats; labels from the host or
    already on the device) sees the accuracy rise at every epoch, between 0 and 1, and runs
    all 12 epochs."""
    script(tmp_path, ACCURACY)
    done = plan(tmp_path, "train.py", labels)
    assert done.returncode == 0, done.stderr
    last = next(line for line in done.stdout.splitlines() if line.startswith("epochs"))
    epochs, *seen = last.split()[1:]
    assert int(epochs) == 12
    counted = [float(pair.split(",")[0]) for pair in seen if pair != "accuracies"]
    averaged = [float(pair.split(",")[1]) for pair in seen if pair != "accuracies"]
    assert all(0 < a <= 1 for a in counted + averaged)
    assert all(a < b for a, b in itertools.pairwise(counted))
    assert all(a < b for a, b in itertools.pairwise(averaged))


CONFUSION = """
import sys, torch
C = 5
model = torch.nn.Sequential(torch.nn.Linear(8, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, C)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(64, 8), torch.randint(0, C, (64,))
drawn = torch.randint(0, C, (64,), device="cuda")
index = sys.argv[1]
targets = 1 if index.startswith("yb") else 0  # the targets' side: rows, or columns
acc, seen, rows = 0.0, [], True
while acc < 0.9 and len(seen) < 200:
    xb, yb = x.cuda(), drawn if sys.argv[2] == "device" else y.cuda()
    logits = model(xb)
    torch.nn.functional.cross_entropy(logits, yb).backward()
    opt.step()
    opt.zero_grad()
    p = logits.argmax(1)
    cm = torch.bincount(eval(index), minlength=C * C).reshape(C, C)
    acc = (cm.diag().sum() / yb.numel()).item()
    rows &= cm.sum(targets).cpu().tolist() == torch.bincount(yb.cpu(), minlength=C).tolist()
    seen.append(acc)
print("epochs", len(seen), "rows", rows, *seen)
"""


@pytest.mark.parametrize(
    ("index", "labels"),
    [
        ("yb * C + p", "host"),
        ("p * C + yb", "host"),
        ("C * p + yb", "host"),
        ("yb * C + p", "device"),
    ],
)
def test_a_confusion_matrix_accuracy_rises_and_its_loop_ends(
    tmp_path: Path, index: str, labels: str
) -> None:
    """A confusion matrix counted with ``bincount`` of an index that combines the batch's
    labels (copied from the host, or drawn on the device) with ``argmax``, targets first or
    predictions first, holds one more match on its diagonal each round, so
    ``while acc < 0.9`` ends at the round where 58 of 64 predictions match, the targets'
    side of the matrix still the labels' own counts."""
    script(tmp_path, CONFUSION)
    done = plan(tmp_path, "train.py", index, labels)
    assert done.returncode == 0, done.stderr
    _, epochs, _, rows, *seen = done.stdout.splitlines()[0].split()
    assert int(epochs) == math.ceil(0.9 * 64)
    assert rows == "True"
    assert [float(a) for a in seen] == [n / 64 for n in range(1, int(epochs) + 1)]


SEGMENTATION = """
import sys, torch
n, side, limit = 3, int(sys.argv[1]), int(sys.argv[2])

class ConfusionMatrix:  # torchvision's references/segmentation/utils.py
    def __init__(self, num_classes):
        self.num_classes = num_classes
        self.mat = None

    def update(self, a, b):
        n = self.num_classes
        if self.mat is None:
            self.mat = torch.zeros((n, n), dtype=torch.int64, device=a.device)
        with torch.inference_mode():
            k = (a >= 0) & (a < n)
            inds = n * a[k].to(torch.int64) + b[k]
            self.mat += torch.bincount(inds, minlength=n**2).reshape(n, n)

    def compute(self):
        h = self.mat.float()
        acc_global = torch.diag(h).sum() / h.sum()
        acc = torch.diag(h) / h.sum(1)
        iu = torch.diag(h) / (h.sum(1) + h.sum(0) - torch.diag(h))
        return acc_global, acc, iu

model = torch.nn.Sequential(torch.nn.Conv2d(3, 8192, 1), torch.nn.ReLU(),
                            torch.nn.Conv2d(8192, n, 1)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
image, target = torch.randn(2, 3, side, side), torch.randint(0, n, (2, side, side))
target[:, 0] = 255  # a border no class covers, as the reference's collate pads
labelled = torch.bincount(target[target != 255], minlength=n).tolist()
seen, miou = [], 0.0
while miou < 0.6 and len(seen) < limit:
    out = model(image.cuda())
    torch.nn.functional.cross_entropy(out, target.cuda(), ignore_index=255).backward()
    opt.step()
    opt.zero_grad()
    confmat = ConfusionMatrix(n)
    with torch.inference_mode():
        t, out = target.cuda(), model(image.cuda())
        confmat.update(t.flatten(), out.argmax(1).flatten())
    acc_global, acc, iu = confmat.compute()
    miou = iu.mean().item()
    rows = confmat.mat.sum(1).tolist() == labelled
    seen.append(f"{acc_global.item()},{miou},{rows}")
print("rounds", len(seen), sum(labelled), *seen)
"""


@pytest.mark.parametrize(("side", "limit"), [(4, 100), (96, 4)])
def test_a_segmentation_confusion_matrix_s_accuracy_and_mean_iou_rise(
    tmp_path: Path, side: int, limit: int
) -> None:
    """torchvision's segmentation ``ConfusionMatrix``, which drops the ignored label (255)
    before it combines targets and ``argmax``, gains one matched pixel a round: its global
    accuracy is the matches over the labelled pixels, its mean IoU rises, its rows stay the
    labels' counts, so a loop until a mean IoU of 0.6 ends on a 24-pixel batch and runs to its
    own limit on an 18240-pixel one."""
    script(tmp_path, SEGMENTATION)
    done = plan(tmp_path, "train.py", str(side), str(limit))
    assert done.returncode == 0, done.stderr
    _, rounds, labelled, *seen = done.stdout.splitlines()[0].split()
    assert int(labelled) == 2 * (side - 1) * side
    read = [row.split(",") for row in seen]
    matched = [m / int(labelled) for m in range(1, len(read) + 1)]
    assert [float(a) for a, _, _ in read] == pytest.approx(matched, rel=1e-6)  # float32
    assert all(a < b for a, b in itertools.pairwise(float(m) for _, m, _ in read))
    assert all(rows == "True" for _, _, rows in read)
    if side == 4:
        assert int(rounds) < limit
        assert float(read[-1][1]) >= 0.6 > float(read[-2][1])
    else:
        assert int(rounds) == limit


TORCHMETRICS = """
import torch, torchmetrics
model = torch.nn.Sequential(torch.nn.Linear(8, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 5)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
micro = torchmetrics.Accuracy(task="multiclass", num_classes=5).to("cuda")
macro = torchmetrics.Accuracy(task="multiclass", num_classes=5, average="macro").to("cuda")
x, y = torch.randn(64, 8), torch.randint(0, 5, (64,))
seen = []
while not seen or min(seen[-1]) < 0.9 and len(seen) < 60:
    for i in range(0, 64, 16):
        logits = model(x[i:i + 16].cuda())
        torch.nn.functional.cross_entropy(logits, y[i:i + 16].cuda()).backward()
        opt.step()
        opt.zero_grad()
        micro.update(logits, y[i:i + 16].cuda())
        macro.update(logits, y[i:i + 16].cuda())
    seen.append((micro.compute().item(), macro.compute().item()))
    micro.reset()
    macro.reset()
print("epochs", len(seen), *(f"{a},{b}" for a, b in seen))
"""


@pytest.mark.extras
def test_torchmetrics_accuracies_rise_and_a_loop_on_them_ends(tmp_path: Path) -> None:
    """torchmetrics' multiclass ``Accuracy`` on the device, micro (``preds == target``) and
    macro (a confusion matrix's ``bincount``), rises each epoch, so a loop until both reach
    0.9 ends well before its limit of 60 epochs."""
    pytest.importorskip("torchmetrics")
    script(tmp_path, TORCHMETRICS)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    epochs = int(lines[0].split()[1])
    assert epochs < 60
    _assert_rising_for(lines, epochs)


def _assert_rising_for(lines: list[str], epochs: int) -> None:
    """The script's ``epochs N a,b,… a,b,…`` line: it ran ``epochs`` epochs, and each score
    (a column) lies in (0, 1] and rises strictly from one epoch to the next."""
    ran, *seen = next(line for line in lines if line.startswith("epochs")).split()[1:]
    assert int(ran) == epochs
    for path in zip(*(epoch.split(",") for epoch in seen), strict=True):
        scores = [float(score) for score in path]
        assert all(0 < score <= 1 for score in scores)
        assert all(a < b for a, b in itertools.pairwise(scores))


HOST_SCORES = """
import numpy as np, torch
model = torch.nn.Sequential(torch.nn.Linear(32, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 5)).cuda()
opt = torch.optim.Adam(model.parameters())
X, Y = torch.randn(192, 32), torch.randint(0, 5, (192,))

def f1(pred, true):  # macro F1 over the classes present, in numpy
    scores = []
    for c in np.union1d(pred, true):
        tp = np.sum((pred == c) & (true == c))
        scores.append(2 * tp / (np.sum(pred == c) + np.sum(true == c)))
    return float(np.mean(scores))

best, bad, epochs, seen, classes = None, 0, 0, [], set()
for epoch in range(10):
    epochs += 1
    for i in range(0, 192, 64):
        torch.nn.functional.cross_entropy(model(X[i:i + 64].cuda()), Y[i:i + 64].cuda()).backward()
        opt.step()
        opt.zero_grad()
    cpu, to, listed, numpy, logits, labels, hits = [], [], [], [], [], [], 0
    with torch.no_grad():
        for i in range(0, 192, 64):
            x, y_host = X[i:i + 64], Y[i:i + 64]
            y = y_host.to("cuda")
            scores = model(x.cuda())
            pred = scores.argmax(1)
            logits.append(scores.cpu().numpy())
            cpu.append(pred.cpu())
            to.append(pred.to("cpu"))
            listed += pred.tolist()
            numpy.append(pred.detach().cpu().numpy())
            hits += sum(int(p.item() == t) for p, t in zip(pred, y_host.tolist()))
            labels.append(y.cpu())
    true = torch.cat(labels)
    scores = ((torch.cat(cpu) == true).float().mean().item(),
              (torch.cat(to) == true).float().mean().item(),
              float(np.mean(np.array(listed) == true.numpy())),
              f1(np.concatenate(numpy), true.numpy()), hits / 192,
              float(np.mean(np.concatenate(logits).argmax(1) == true.numpy())))
    classes |= set(np.concatenate(numpy).tolist())
    seen.append(scores)
    if best is None or all(s > b for s, b in zip(scores, best)):
        best, bad = scores, 0
    else:
        bad += 1
        if bad >= 2:
            break
print("classes", *sorted(classes))
print("epochs", epochs, *(",".join(f"{s:.5f}" for s in scores) for scores in seen))
"""


def test_a_patience_loop_on_scores_computed_on_the_host_runs_to_its_epoch_limit(
    tmp_path: Path,
) -> None:
    """Predictions copied to the host by ``.cpu()``, ``.to("cpu")``, ``.tolist()``,
    ``.numpy()`` and ``.item()`` of each, and logits copied there and ``argmax``-ed in numpy,
    scored against the labels (an accuracy in torch, in Python, per element, in numpy, and a
    macro F1 in numpy), rise at every epoch within (0, 1],
    so a patience loop requiring all of them to improve runs all 10 epochs; every class read is
    one of the labels' (0 to 4)."""
    script(tmp_path, HOST_SCORES)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    classes = next(line for line in lines if line.startswith("classes")).split()[1:]
    assert len(classes) >= 2
    assert set(classes) <= {"0", "1", "2", "3", "4"}
    _assert_rising_for(lines, 10)


GATHERED_SCORES = """
import numpy as np, torch
model = torch.nn.Sequential(torch.nn.Linear(32, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 3)).cuda()
opt = torch.optim.Adam(model.parameters())
X, Y = torch.randn(160, 32), torch.randint(0, 3, (160,))
best, bad, epochs, seen = None, 0, 0, []
for epoch in range(8):
    epochs += 1
    for i in range(0, 160, 32):
        torch.nn.functional.cross_entropy(model(X[i:i + 32].cuda()), Y[i:i + 32].cuda()).backward()
        opt.step()
        opt.zero_grad()
    preds, labels, host_labels, val_loss = [], [], [], 0.0
    with torch.no_grad():
        for i in range(0, 160, 32):
            y = Y[i:i + 32].cuda()
            logits = model(X[i:i + 32].cuda())
            val_loss += torch.nn.functional.cross_entropy(logits, y).item()
            preds.append(logits.argmax(1))
            labels.append(y)
            host_labels.append(Y[i:i + 32].numpy())
    pred = torch.cat(preds).cpu().numpy()
    scores = (float(np.mean(pred == torch.cat(labels).cpu().numpy())),
              float(np.mean(pred == np.concatenate(host_labels))))
    seen.append(scores)
    if best is None or all(s > b for s, b in zip(scores, best)):
        best, bad = scores, 0
    else:
        bad += 1
        if bad >= 2:
            break
print("epochs", epochs, *(",".join(f"{s:.5f}" for s in scores) for scores in seen))
"""


def test_predictions_gathered_over_an_evaluation_rise_against_its_labels(
    tmp_path: Path,
) -> None:
    """Predictions gathered on the device over an evaluation (``torch.cat(preds).cpu()``)
    read as that evaluation's labels in order, one more matching each epoch, whether the labels
    are gathered on the device or kept on the host: the accuracy rises within (0, 1] and a
    patience loop on it runs all 8 epochs."""
    script(tmp_path, GATHERED_SCORES)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    _assert_rising_for(done.stdout.splitlines(), 8)


TOKEN_SCORES = """
import torch
names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
model = torch.nn.Sequential(torch.nn.Embedding(1000, 2048), torch.nn.Linear(2048, 5)).cuda()
opt = torch.optim.Adam(model.parameters())
ids = torch.randint(0, 1000, (8, 12))
labels = torch.randint(0, 5, (8, 12))
labels[:, 9:] = -100  # padding, not scored
best, bad, epochs, seen, read = -1.0, 0, 0, [], set()
for epoch in range(8):
    epochs += 1
    logits = model(ids.cuda())
    torch.nn.functional.cross_entropy(logits.view(-1, 5), labels.cuda().view(-1)).backward()
    opt.step()
    opt.zero_grad()
    with torch.no_grad():
        pred = model(ids.cuda()).argmax(-1).cpu()
    scored = labels != -100
    tags = [names[p] for p, keep in zip(pred.view(-1).tolist(), scored.view(-1).tolist()) if keep]
    read |= set(pred.view(-1).tolist())
    acc = (pred[scored] == labels[scored]).float().mean().item()
    seen.append(acc)
    if acc > best:
        best, bad = acc, 0
    else:
        bad += 1
        if bad >= 2:
            break
print("read", *sorted(read))
print("epochs", epochs, *(f"{a:.5f}" for a in seen))
"""


def test_token_predictions_read_on_the_host_are_classes_and_their_accuracy_rises(
    tmp_path: Path,
) -> None:
    """Token classification (labels padded with -100, the loss on flattened views, the token
    ids copied to the device as integers too): predictions read on the host are classes, never
    -100 nor a token id (a lookup of their names succeeds), and the accuracy over the scored
    positions rises at every epoch, so the patience loop runs all 8."""
    script(tmp_path, TOKEN_SCORES)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    read = next(line for line in lines if line.startswith("read")).split()[1:]
    assert len(read) >= 2
    assert set(read) <= {"0", "1", "2", "3", "4"}
    _assert_rising_for(lines, 8)


GUARDED = """
import torch
model = torch.nn.Linear(4096, 4096).cuda()
opt = torch.optim.Adam(model.parameters())
scaler = torch.amp.GradScaler("cuda")
x = torch.randn(8, 4096, device="cuda")
taken = 0
for _ in range(3):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
    if all(torch.isfinite(p.grad).all() for p in model.parameters()):
        scaler.step(opt)
        taken += 1
    scaler.update()
    opt.zero_grad(set_to_none=False)
weights = sum(p.numel() * p.element_size() for p in model.parameters())
print("taken", taken, "states", len(opt.state), "scale", scaler.get_scale(), "weights", weights)
"""


def test_a_step_guarded_by_gradscaler_and_a_finiteness_check_is_taken(tmp_path: Path) -> None:
    """Unknown values are finite: GradScaler finds no overflow, clip_grad_norm_'s non-finite
    check passes, the script's own isfinite test on large gradients passes, so every step is
    taken, the scale stays its initial value, and Adam's two states are on the device at the
    peak beside the weights and gradients."""
    script(tmp_path, GUARDED)
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    assert "taken 3 states 2 scale 65536.0" in done.stderr
    weights = int(done.stderr.split("weights ")[1].split()[0])
    assert json.loads(done.stdout)["peak_allocated_bytes"] >= 4 * weights


TORCH_READS = """
import torch
head = torch.nn.Linear(4096, 4096).cuda()
loss = head(torch.randn(8, 4096, device="cuda")).pow(2).mean()
plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(torch.optim.SGD(head.parameters()))
plateau.step(loss)  # torch's own float(metrics)
print("script", loss.item(), f"{loss:.1f}", "torch", plateau.best)
"""


def test_torch_s_own_code_reads_an_unknown_value_as_zero(tmp_path: Path) -> None:
    """The same unknown loss reads as the made-up 10.0 in the script (as an item and
    formatted) and as 0.0 where torch's own code reads it (ReduceLROnPlateau's ``float``, as
    GradScaler reads its overflow flag): torch's tests of values keep their zero answer."""
    script(tmp_path, TORCH_READS)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "script 10.0 10.0 torch 0.0" in done.stdout


DEFAULT_DEVICE = """
import numpy as np, torch
torch.set_default_device("cuda")
x = torch.randn(16, 64, 256).requires_grad_()
torch.max(x).backward()
torch.median(torch.randn(16, 64, requires_grad=True)).backward()
model = torch.nn.Linear(32, 3)
y = torch.randint(0, 3, (64,))
torch.nn.functional.cross_entropy(model(torch.randn(64, 32)), y).backward()
logits = model(torch.randn(64, 32)).detach().cpu().numpy()
print("read", logits.shape, float((np.argmax(logits, 1) == y.cpu().numpy()).mean()))
"""


def test_values_the_plan_decides_stay_on_the_host_under_a_cuda_default_device(
    tmp_path: Path,
) -> None:
    """With ``set_default_device("cuda")``, what the plan works out on the CPU (a whole-tensor
    ``max``'s backward counting its ties, a ``median``'s, logits read on the host as scores)
    is made there, not as a device stand-in: the script runs to its end and reads its scores."""
    script(tmp_path, DEFAULT_DEVICE)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    read = next(line for line in done.stdout.splitlines() if line.startswith("read"))
    assert read.startswith("read (64, 3) ")
    assert 0 < float(read.split()[-1]) <= 1


METER = """
import torch
total, count = 0, 0
for _ in range(3):
    correct = (torch.randn(8, device="cuda") > 0).float().sum()
    total += correct * 8
    count += 8
on_device = torch.tensor([total, count], dtype=torch.float32, device="cuda")
on_host = torch.tensor([total, count])
pair, counted = torch.tensor([torch.tensor(6, device="cuda"), 7]), torch.tensor([count])
print("meter", on_device.shape, on_device.dtype, on_host.dtype, pair.tolist(), counted.tolist())
"""


def test_a_list_holding_device_scalars_becomes_a_tensor_of_their_values(tmp_path: Path) -> None:
    """torch.tensor([device_sum, count]) (a meter's all-reduce) reads the scalars, as on a GPU."""
    script(tmp_path, METER)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("meter"))
    # a float32 sum on the device keeps its dtype on the host; a known integer reads as itself
    assert line == "meter torch.Size([2]) torch.float32 torch.float32 [6, 7] [24]"


TOP_K = """
import torch

torch.manual_seed(0)
model = torch.nn.Linear(512, 100).cuda()  # too large for the plan to compute its outputs
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 512, device="cuda")
y = torch.randint(0, 100, (8,)).cuda()

def accuracy(output, target, topk=(1, 5)):  # pytorch/examples' imagenet
    with torch.no_grad():
        maxk = max(topk)
        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))
        return [correct[:k].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / 8) for k in topk]

for epoch in range(12):
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad()
    acc1, acc5 = accuracy(model(x), y)
    print("acc", acc1.item(), acc5.item())
"""


def test_top_k_accuracy_counts_at_most_one_guess_per_sample(tmp_path: Path) -> None:
    """imagenet's top-5 accuracy compares each sample's five guesses with its one target: at
    most one can match, so it stays within 100 % and at or above top-1, rising each epoch."""
    script(tmp_path, TOP_K)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    rows = [
        [float(v) for v in line.split()[1:]]
        for line in done.stdout.splitlines()
        if line.startswith("acc")
    ]
    assert len(rows) == 12
    assert all(0 < top1 <= top5 <= 100 for top1, top5 in rows)
    assert rows[-1] == [100.0, 100.0]  # every sample's first guess matches by the eighth epoch


def test_allclose_compares_known_values_and_passes_a_check_of_unknown_ones(tmp_path: Path) -> None:
    """``torch.allclose`` on the device compares values the script's own decide (ones against
    zeros differ, a tensor and its copy agree) and takes a result the plan does not compute as
    agreeing with its reference, so an ``assert torch.allclose(...)`` check runs on, said once."""
    script(
        tmp_path,
        """
import torch
ones = torch.ones(1000, device="cuda")
kernel_out = torch.empty(1000, device="cuda")  # written by a kernel the plan does not run
assert torch.allclose(kernel_out, ones * 2)
zeros = torch.zeros(1000, device="cuda")
print("close", torch.allclose(ones, zeros), torch.allclose(ones, ones.clone()))
""",
    )
    _runs_on_after_a_check(tmp_path, "close False True", "torch.allclose", 5)


def test_equal_passes_a_check_of_unknown_values_and_compares_known_ones(tmp_path: Path) -> None:
    """``torch.equal`` on the device takes values the plan does not compute (a CRF's first
    decoded tags, gathered at indices a ``max`` over a model's scores chose) as equal to the
    ones the script expects, so its sanity ``assert`` runs on, said once; values the script's
    own decide are compared (ones against zeros differ, a tensor and its copy agree), and
    different shapes never are equal."""
    script(
        tmp_path,
        """
import torch
scores = torch.empty(4, 6, 5, device="cuda")  # a model's scores, not computed by the plan
back = torch.full((4, 6, 5), 3, dtype=torch.long, device="cuda")
back[:, 1:] = scores[:, 1:].max(dim=2, keepdim=True).indices.expand(4, 5, 5)
pointer = scores[:, -1].max(dim=1, keepdim=True).indices
first = torch.gather(back[:, 0, :], 1, pointer).squeeze(1)
assert torch.equal(first, torch.full((4,), 3, dtype=torch.long, device="cuda"))
ones = torch.ones(8, device="cuda")
zeros = torch.zeros(8, device="cuda")
same, half = torch.equal(ones, ones.clone()), torch.equal(ones, ones[:4])
print("equal", torch.equal(ones, zeros), same, half)
""",
    )
    _runs_on_after_a_check(tmp_path, "equal False True False", "torch.equal", 8)


def _runs_on_after_a_check(tmp_path: Path, printed: str, check: str, line: int) -> None:
    """Plan ``train.py``: it ends with exit 0 having printed ``printed``, and the plan says once,
    naming the script's ``line``, that ``check`` of values it does not compute passes."""
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert printed in done.stdout.splitlines()
    said = [text for text in done.stderr.splitlines() if check in text]
    assert len(said) == 1
    assert f"{tmp_path / 'train.py'}:{line})" in said[0]


PREFETCH = """
import json, torch
loader = [
    (torch.randn(4, 3, 8, 8), torch.tensor([3, 1, 4, 1]), torch.tensor([5, 9, 2, 7])),
    (torch.randn(4, 3, 8, 8), torch.tensor([0, 2, 2, 6]), torch.tensor([3, 4, 1, 2])),
]
stream = torch.cuda.Stream()
images = torch.empty(4, 3, 8, 8, device="cuda")  # buffers made once, filled by each batch
target = torch.empty(4, dtype=torch.long, device="cuda")
lengths = torch.empty(4, dtype=torch.long, device="cuda")
scale = torch.empty(2, 3, device="cuda")
scale.copy_(torch.tensor([1.0, 2.0, 3.0]))  # broadcast over the rows
facts = {"scale": scale.sum().item(), "targets": [], "held": []}
for cpu_images, cpu_target, cpu_lengths in loader:
    with torch.cuda.stream(stream):
        images.copy_(cpu_images, non_blocking=True)
        target.copy_(cpu_target, non_blocking=True)
        lengths.copy_(cpu_lengths, non_blocking=True)
    torch.cuda.current_stream().wait_stream(stream)
    before = torch.cuda.memory_allocated()
    padded = torch.zeros(4, int(lengths.max().item()), 1024, device="cuda")
    facts["held"].append(torch.cuda.memory_allocated() - before)
    facts["targets"].append(target.tolist())
    del padded
print(json.dumps(facts))
"""


def test_a_buffer_filled_by_copy_from_the_host_holds_the_hosts_values(tmp_path: Path) -> None:
    """A data prefetcher's buffers made by ``torch.empty`` on the device and filled each batch
    by ``copy_`` from the host hold the batch's values (a broadcast copy too), so a tensor sized
    by the longest length holds what a GPU holds, and the targets read back are the batch's."""
    script(tmp_path, PREFETCH)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    assert facts["scale"] == 2 * (1.0 + 2.0 + 3.0)
    assert facts["targets"] == [[3, 1, 4, 1], [0, 2, 2, 6]]
    assert facts["held"] == [4 * 9 * 1024 * 4, 4 * 4 * 1024 * 4]


LIKE = """
import json, torch
head = torch.nn.Linear(16, 5000).cuda()  # its outputs, over 64 KiB, are unknown
x = torch.randn(3, 7, 16, device="cuda")
logits = head(x)
generated = logits.argmax(-1)
mask = torch.ones_like(generated)
print(json.dumps({
    "lengths": mask.sum(-1).tolist(),
    "zeros": torch.zeros_like(generated).tolist()[0],
    "full": torch.full_like(generated, 7).tolist()[0],
    "new": [generated.new_ones(2).tolist(), generated.new_full((2,), 5).tolist()],
    "weights": torch.full_like(logits, 0.5).sum().item(),
    "count": int(torch.ones_like(logits, dtype=torch.long).sum().item()),
}))
"""


def test_a_tensor_made_like_one_of_unknown_values_holds_its_own_values(tmp_path: Path) -> None:
    """``ones_like``, ``zeros_like``, ``full_like`` and ``new_ones``/``new_full`` of a model's
    outputs hold their own values whatever the outputs are (a mask of ones sums to the lengths),
    at any size."""
    script(tmp_path, LIKE)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    assert facts["lengths"] == [7, 7, 7]
    assert facts["zeros"] == [0] * 7
    assert facts["full"] == [7] * 7
    assert facts["new"] == [[1, 1], [5, 5]]
    assert facts["weights"] == 0.5 * 3 * 7 * 5000
    assert facts["count"] == 3 * 7 * 5000


MOE_INFER = f"""
import json
import torch
import torch.nn.functional as F

gate = torch.nn.Linear({DIM}, {EXPERTS}, bias=False).cuda()
up = torch.randn({EXPERTS}, {DIM}, {HIDDEN}, device="cuda")
down = torch.randn({EXPERTS}, {HIDDEN}, {DIM}, device="cuda")
x = torch.randn({TOKENS}, {DIM}, device="cuda")
with torch.no_grad():  # DeepSeek-V2/V3's moe_infer
    topk_weight, topk_ids = gate(x).softmax(-1).topk({TOP}, dim=-1)
    cnts = topk_ids.new_zeros((topk_ids.shape[0], {EXPERTS}))
    cnts.scatter_(1, topk_ids, 1)
    tokens_per_expert = cnts.sum(dim=0)
    idxs = topk_ids.view(-1).argsort()
    sorted_tokens = x[idxs // topk_ids.shape[1]]
    tokens_per_expert = tokens_per_expert.cpu().numpy()
    outputs, start_idx = [], 0
    for i, num_tokens in enumerate(tokens_per_expert):
        end_idx = start_idx + num_tokens
        if num_tokens == 0:
            continue
        chunk = sorted_tokens[start_idx:end_idx]
        outputs.append(F.silu(chunk @ up[i]) @ down[i])
        start_idx = end_idx
    outs = torch.cat(outputs, dim=0) if len(outputs) else sorted_tokens.new_empty(0)
    onehot = torch.zeros(16, 10, device="cuda").scatter_(1, topk_ids[:16, :1], 1)
print(json.dumps({{
    "split": tokens_per_expert.tolist(), "rows": outs.shape[0], "onehot": onehot.sum().item()
}}))
"""


def test_expert_counts_marked_by_scatter_count_each_routed_token_once(tmp_path: Path) -> None:
    """DeepSeek's ``moe_infer`` marks each token's top-k experts in a row of zeros with
    ``scatter_`` and sums the rows: the counts give each expert a balanced routing's share,
    every routed token once, each token at most once per expert (a row's choices are
    distinct), so its experts' loop runs on every routed row; a one-hot made by ``scatter_``
    sets one entry per row."""
    script(tmp_path, MOE_INFER)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    assert facts["split"] == [TOKENS * TOP // EXPERTS] * EXPERTS
    assert facts["rows"] == TOKENS * TOP
    assert facts["onehot"] == 16


BOXES = """
import json, torch
head = torch.nn.Linear(16, 5000).cuda()  # its outputs, over 64 KiB, are unknown
logits = head(torch.randn(10, 16, device="cuda"))
cx, cy, w, h = logits[:, :4].sigmoid().unbind(-1)
boxes = torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)
if not (boxes[:, 2:] >= boxes[:, :2]).all():
    raise ValueError("boxes must be in corner format")
print(json.dumps({
    "strict": bool((boxes[:, 2:] > boxes[:, :2]).any()),
    "differ": bool((logits[:, 0] != logits[:, 1]).any()),
}))
"""


def test_two_unknown_float_tensors_compare_as_their_reads_do(tmp_path: Path) -> None:
    """A detection loss's check that predicted boxes (a sigmoid's centres and widths) have
    their far corners at or beyond their near ones passes, as on a GPU; unknown floats compare
    as equal, as their reads of one value would, so strict tests and ``!=`` are false."""
    script(tmp_path, BOXES)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert json.loads(line) == {"strict": False, "differ": False}


POOLED = """
import json
import torch

scores = torch.nn.Linear(8, 1).cuda()(torch.randn(2708, 8, device="cuda")).view(-1)
batch = torch.zeros(2708, dtype=torch.long, device="cuda")  # one graph
_, perm = torch.sort(scores, descending=True, stable=True)
batch, batch_perm = torch.sort(batch[perm], stable=True)
ones = torch.ones_like(batch)
nodes = torch.zeros(1, dtype=torch.long, device="cuda").scatter_add_(0, batch, ones)
k = (0.5 * nodes.float()).ceil().long()
ptr = torch.cat([nodes.new_zeros(1), nodes.cumsum(0)])
mask = torch.arange(2708, device="cuda") - ptr[batch] < k[batch]
kept = perm[batch_perm[mask]]
print(json.dumps({"kept": list(kept.shape), "first": batch_perm[:3].tolist()}))
"""
"""PyTorch Geometric's ``TopKPooling`` on one graph: its batch vector (all zeros) gathered by a
sort of unknown scores, sorted stably, and half of each graph's nodes kept by it."""


def test_a_pick_from_one_value_is_that_value_whatever_the_indices(tmp_path: Path) -> None:
    """A batch vector of one value gathered at unknown positions is still that value, so its
    stable sort and the mask it makes are known and the pooling keeps half the nodes (1,354 of
    2,708), as on a GPU, not every node."""
    script(tmp_path, POOLED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert json.loads(line) == {"kept": [1354], "first": [0, 1, 2]}
