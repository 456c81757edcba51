"""A predicted OOM's cause, judged with what the planned run knows: the real ``memforensics plan``
console command on small scripts whose memory is known by construction.

Under ``plan`` every tensor is seen as it is made, so the OOM dump knows its parameters,
gradients and optimizer state (the sidecar's ``tensors``, found without ``install(model=...)``),
the memory outside PyTorch is exactly the planned ``--context-memory``, and whether
``expandable_segments`` avoids a fragmented OOM is answered by planning the script again with it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from planned import plan, script

from memforensics.analysis import explain

pytestmark = [pytest.mark.integration, pytest.mark.torch]

MiB = 1 << 20

BIG_BATCH = """
import sys
import torch
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).cuda()
opt = torch.optim.AdamW(model.parameters())
for batch in (256, int(sys.argv[1])):  # a step that fits, then the big batch
    opt.zero_grad(set_to_none=False)
    x = torch.randn(batch, 1024, device="cuda")
    loss = model(x).square().mean()  # FORWARD
    loss.backward()
    opt.step()
"""
PARAMETER_BYTES = 4 * (1024 * 1024 + 1024) * 4  # four Linear(1024, 1024) in float32
"""And as many gradient bytes (kept as zeros, not None), twice as many of AdamW's state."""


def _line(body: str, marker: str) -> int:
    return next(i for i, text in enumerate(body.splitlines()) if marker in text)


def _oom_dump(folder: Path) -> Path:
    [dump] = (folder / "memforensics-plan" / "oom").glob("*.pickle")
    return dump


def _sidecar(dump: Path) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(dump.with_suffix(".json").read_text())
    return found


def test_a_big_batch_runs_out_from_its_activations_with_the_static_memory_known(
    tmp_path: Path,
) -> None:
    """A model with AdamW runs out on its big batch: the cause plan prints (and summary of the
    dump) is the forward's activations at the forward's line; the sidecar lists every
    parameter, gradient and AdamW state to the byte with no install(model=...) in the script;
    nothing is called a parameter that is not one, and the CUDA context is no cause."""
    script(tmp_path, BIG_BATCH)
    done = plan(tmp_path, "--device-memory", "640MiB", "--context-memory", "128MiB",
                "train.py", "32768")  # fmt: skip
    assert done.returncode == 1, done.stderr
    dump = _oom_dump(tmp_path)
    tensors = _sidecar(dump)["tensors"]
    held: dict[str, int] = {}
    for entry in tensors:
        held[entry["kind"]] = held.get(entry["kind"], 0) + entry["bytes"]
    assert held == {
        "parameter": PARAMETER_BYTES,
        "gradient": PARAMETER_BYTES,
        "optimizer_state": 2 * PARAMETER_BYTES,
    }
    assert {e["name"] for e in tensors} >= {"0.weight", "3.bias.grad", "2.weight.exp_avg_sq"}
    summary = explain(dump)
    assert summary.diagnosis is not None
    top = summary.diagnosis.causes[0]
    assert top.name == "activations"
    assert any(site.endswith(f"train.py:{_line(BIG_BATCH, 'FORWARD') + 1} <module>")
               for site in top.sites), top.sites  # fmt: skip
    said = " ".join(done.stdout.split())  # the text wraps at 80 columns: compare the words
    assert f"cause: {' '.join(summary.diagnosis.headline.split())}" in said
    kinds = {k.kind: k for k in summary.kinds}
    for kind, size in held.items():
        assert kinds[kind].bytes == kinds[kind].known_bytes == size  # each known, none guessed
    assert "outside" not in {cause.name for cause in summary.diagnosis.causes}
    assert summary.verdict.name == "exhausted"
    assert "NCCL" not in done.stdout
    assert "is the CUDA context the plan allows (--context-memory)" in said


FRAGMENTED = """
import sys
import torch
MiB = 1 << 20
a = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
del a  # its segment stays cached
b = torch.empty(32 * MiB, dtype=torch.uint8, device="cuda")  # half of it: a 32 MiB hole
c = torch.empty(48 * MiB, dtype=torch.uint8, device="cuda")  # hole + free, but not in one piece
d = torch.empty(int(sys.argv[1]) * MiB, dtype=torch.uint8, device="cuda")
"""
FRAGMENTED_DEVICE = ("--device-memory", "232MiB", "--context-memory", "128MiB")
"""104 MiB for the allocator: 40 MiB free on the device when ``c`` asks for 48 MiB; with
expandable segments ``a``, ``b`` and ``c`` take 80 MiB, and ``d`` then needs what is left."""
SETTING = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


def test_no_expandable_advice_where_the_planned_run_with_it_runs_out_too(tmp_path: Path) -> None:
    """A fragmented OOM whose run with expandable segments runs out later: plan never offers
    the setting, says it would also run out, and summary of the dump gives the same advice."""
    script(tmp_path, FRAGMENTED)
    done = plan(tmp_path, "--json", *FRAGMENTED_DEVICE, "train.py", "200")
    assert done.returncode == 1, done.stderr
    answer = json.loads(done.stdout)
    assert answer["oom_expandable"] is True
    assert answer["verdict"]["label"] == "fragmentation"
    assert answer["verdict"]["advice"].startswith("expandable_segments would also run out")
    assert not any(SETTING in words for words in answer["verdict"].values())
    assert "expandable_segments" not in answer["verdict"]["cause"]
    dump = _oom_dump(tmp_path)
    assert _sidecar(dump)["predicted"]["oom_expandable"] is True
    summary = explain(dump)
    assert summary.verdict.advice == answer["verdict"]["advice"]
    assert summary.diagnosis is not None
    assert "fragmentation" not in {cause.name for cause in summary.diagnosis.causes}


def test_expandable_advice_where_the_planned_run_with_it_fits(tmp_path: Path) -> None:
    """The same fragmented OOM with a small last request: the run with expandable segments
    fits, so the setting is the advice and the cause, said to rest on that run."""
    script(tmp_path, FRAGMENTED)
    done = plan(tmp_path, "--json", *FRAGMENTED_DEVICE, "train.py", "8")
    assert done.returncode == 1, done.stderr
    answer = json.loads(done.stdout)
    assert answer["oom_expandable"] is False
    assert SETTING in answer["verdict"]["advice"]
    assert "the plan's own run with expandable_segments:True fits" in answer["verdict"]["cause"]
    assert (tmp_path / "memforensics-plan" / "expandable").is_dir()


def test_no_expandable_check_plans_the_script_once(tmp_path: Path) -> None:
    """--no-expandable-check: no second run, nothing recorded, and the verdict falls back on
    what the dump alone can tell."""
    script(tmp_path, FRAGMENTED)
    done = plan(tmp_path, "--json", "--no-expandable-check", *FRAGMENTED_DEVICE, "train.py", "200")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["oom_expandable"] is None
    assert not (tmp_path / "memforensics-plan" / "expandable").exists()
    assert "oom_expandable" not in _sidecar(_oom_dump(tmp_path))["predicted"]
