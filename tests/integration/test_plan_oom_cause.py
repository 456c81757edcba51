"""A predicted OOM's cause, judged with what the planned run knows: the real ``memforensics plan``
console command on small scripts whose memory is known by construction.

Under ``plan`` every tensor is seen as it is made, so the OOM dump knows its parameters,
gradients and optimizer state (the sidecar's ``tensors``, found without ``install(model=...)``),
the memory outside PyTorch is exactly the planned ``--context-memory``, and whether
``expandable_segments`` avoids a fragmented OOM is answered by planning the script again with it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from planned import SRC, plan, script

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
    gets past it, so the setting is the advice and the cause, said to rest on that run."""
    script(tmp_path, FRAGMENTED)
    done = plan(tmp_path, "--json", *FRAGMENTED_DEVICE, "train.py", "8")
    assert done.returncode == 1, done.stderr
    answer = json.loads(done.stdout)
    assert answer["oom_expandable"] is False
    assert SETTING in answer["verdict"]["advice"]
    cause = answer["verdict"]["cause"]
    assert "the plan's own run with expandable_segments:True gets past it" in cause
    assert (tmp_path / "memforensics-plan" / "expandable").is_dir()


ENDLESS = """
import sys
import torch
MiB = 1 << 20
a = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
del a
b = torch.empty(32 * MiB, dtype=torch.uint8, device="cuda")
c = torch.empty(48 * MiB, dtype=torch.uint8, device="cuda")  # fragmented: fails without
steps = 0
while True:  # a training loop longer than anyone waits for: it ends only when stopped
    step = torch.empty(MiB, dtype=torch.uint8, device="cuda")
    steps += 1
"""


def test_the_check_with_expandable_segments_stops_past_the_failed_request(
    tmp_path: Path,
) -> None:
    """A fragmented OOM in a script whose loop never ends: the run with expandable segments
    gets past the failed request, and stops after as many allocations again (it would
    otherwise run for ever), so the setting is the advice."""
    script(tmp_path, ENDLESS)
    done = plan(tmp_path, "--json", *FRAGMENTED_DEVICE, "train.py")
    assert done.returncode == 1, done.stderr
    answer = json.loads(done.stdout)
    assert answer["oom_expandable"] is False
    assert SETTING in answer["verdict"]["advice"]


def test_no_expandable_check_plans_the_script_once(tmp_path: Path) -> None:
    """--no-expandable-check: no second run, nothing recorded, and the verdict falls back on
    what the dump alone can tell."""
    script(tmp_path, FRAGMENTED)
    done = plan(tmp_path, "--json", "--no-expandable-check", *FRAGMENTED_DEVICE, "train.py", "200")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["oom_expandable"] is None
    assert not (tmp_path / "memforensics-plan" / "expandable").exists()
    assert "oom_expandable" not in _sidecar(_oom_dump(tmp_path))["predicted"]


TOO_BIG = """
import torch
w = torch.randn(1024, 1024, device="cuda")
x = torch.randn(16, 1024, 1024, device="cuda")
scores = x @ x.transpose(1, 2)
big = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda")  # BIG
"""
"""84 MiB live, then one 2 GiB request on a 1 GiB device: it would not fit with nothing else
live, so holding less cannot help; only a smaller request can."""


def _cli(folder: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """The real ``memforensics`` console command in ``folder``, with this checkout's package."""
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run(
        [sys.executable, "-m", "memforensics", *map(str, args)],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _report_cause(folder: Path, dump: Path) -> str:
    """The cause in the headline box of the report ``memforensics report`` writes."""
    out = folder / "report.html"
    done = _cli(folder, "report", dump, "-o", out)
    assert done.returncode == 0, done.stderr
    found = re.search(r'id="mf-data">(.*?)</script>', out.read_text(), re.S)
    assert found is not None
    sections = json.loads(found.group(1))["dumps"][0]["devices"][0]["sections"]
    [cause] = [s["data"]["cause"] for s in sections if "cause" in s.get("data", {})]
    return str(cause)


def test_a_request_larger_than_the_device_is_the_cause_in_every_command(tmp_path: Path) -> None:
    """One 2 GiB request on a planned 1 GiB device (128 MiB of it the context): plan, summary,
    summary --json and report all say the request alone exceeds the 896 MiB PyTorch could get,
    made at its own line, fixed by a smaller request; none says live memory fills the device
    or tells the user to hold less."""
    script(tmp_path, TOO_BIG)
    done = plan(tmp_path, "--device-memory", "1GiB", "--context-memory", "128MiB", "train.py")
    assert done.returncode == 1, done.stderr
    dump = _oom_dump(tmp_path)
    summary = explain(dump)
    assert summary.diagnosis is not None
    headline = summary.diagnosis.headline
    line = _line(TOO_BIG, "BIG") + 1
    assert headline.startswith(
        f"the request alone: 2.00 GiB asked at train.py:{line} <module> exceeds the 896.00 MiB"
        " PyTorch could get with nothing else live (the 1.00 GiB limit less 128.00 MiB outside"
        " PyTorch)"
    ), headline
    assert "→ make that one allocation smaller" in headline
    top = summary.diagnosis.causes[0]
    assert top.sites[0].endswith(f"train.py:{line} <module>")
    assert not any(cause.sufficient for cause in summary.diagnosis.causes[1:])
    assert summary.verdict.label == "exhausted (request over the limit)"
    said = " ".join(done.stdout.split())
    assert f"cause: {' '.join(headline.split())}" in said
    shown = _cli(tmp_path, "summary", "--no-cache", dump)
    assert shown.returncode == 0, shown.stderr
    assert f"cause {' '.join(headline.split())}" in " ".join(shown.stdout.split())
    answer = json.loads(_cli(tmp_path, "summary", "--no-cache", "--json", dump).stdout)
    assert answer["diagnosis"]["headline"] == headline
    assert answer["verdict"]["reason"] == "request over the limit"
    assert _report_cause(tmp_path, dump) == headline
    for words in (done.stdout, shown.stdout, answer["verdict"]["explanation"]):
        assert "fills the device" not in words
        assert "Hold less at the peak" not in words


FRACTION = """
import torch
torch.cuda.set_per_process_memory_fraction(0.25)
w = torch.randn(1024, 1024, device="cuda")
big = torch.empty(512 * 1024**2, dtype=torch.uint8, device="cuda")
"""


def test_a_request_over_a_memory_fraction_is_fixed_by_raising_it(tmp_path: Path) -> None:
    """512 MiB asked under a 0.25 memory fraction of a 1 GiB device (256 MiB allowed): plan
    --json names the per-process limit, and raising it or a smaller request, as the cause."""
    script(tmp_path, FRACTION)
    done = plan(tmp_path, "--json", "--device-memory", "1GiB", "--context-memory", "128MiB",
                "train.py")  # fmt: skip
    assert done.returncode == 1, done.stderr
    verdict = json.loads(done.stdout)["verdict"]
    assert verdict["label"] == "exhausted (request over the limit)"
    assert "exceeds the 256.00 MiB per-process limit" in verdict["cause"]
    assert "make that one allocation smaller" in verdict["cause"]
    assert "; or raise set_per_process_memory_fraction" in verdict["cause"]
    assert "raise set_per_process_memory_fraction" in verdict["advice"]
    assert "fills the device" not in verdict["explanation"]


SEARCH = """
import sys
import torch
kept = []
for batch in (2048, 1024, 256):  # the largest batch that fits, found by catching the OOM
    try:
        kept.append(torch.empty(batch * 1024**2, dtype=torch.uint8, device="cuda"))
        break
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
for _ in range(int(sys.argv[1])):  # then hold 64 MiB more at a time
    kept.append(torch.empty(64 * 1024**2, dtype=torch.uint8, device="cuda"))
"""


def test_ooms_the_script_catches_are_named_and_the_run_still_snapshotted(tmp_path: Path) -> None:
    """A script that catches the OOMs of its batch search fits: the plan names each caught
    request, in order, and still writes the run's final snapshot beside their dumps."""
    script(tmp_path, SEARCH)
    args = ("--device-memory", "1GiB", "--context-memory", "128MiB")
    done = plan(tmp_path, *args, "--json", "train.py", "1")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["fits"]
    assert answer["oom_message"] is None
    asked = [re.search(r"Tried to allocate ([^.]+\.\d+ \w+)", m) for m in answer["caught_ooms"]]
    # PyTorch writes sizes up to 1 GiB itself in MiB
    assert [found.group(1) if found else None for found in asked] == ["2.00 GiB", "1024.00 MiB"]
    names = [Path(path).parent.name for path in answer["snapshots"]]
    assert names == ["oom", "oom", "memforensics-plan"]
    said = " ".join(plan(tmp_path, *args, "train.py", "1").stdout.split())
    assert "caught 2 predicted OOMs and went on (tried to allocate 2.00 GiB, then" in said


def test_a_long_batch_search_names_its_first_and_last_caught_requests(tmp_path: Path) -> None:
    """A search that shrinks its batch through six OOMs before one fits is told in one short
    line: its first two requests, how many more, and the last, each figure PyTorch's own."""
    script(
        tmp_path, SEARCH.replace("(2048, 1024, 256)", "(32768, 16384, 8192, 4096, 2048, 1024, 256)")
    )
    done = plan(tmp_path, "--device-memory", "1GiB", "--context-memory", "128MiB", "train.py", "0")
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert (
        "caught 6 predicted OOMs and went on (tried to allocate 32.00 GiB, then tried to "
        "allocate 16.00 GiB, then 3 more, the last tried to allocate 1024.00 MiB)." in said
    )
    assert "8.00 GiB" not in said


def test_the_verdict_is_on_the_oom_that_ended_the_run_not_one_caught_before(
    tmp_path: Path,
) -> None:
    """After caught OOMs of requests over the device, the run ends holding too much: its verdict
    (from the last dump) says live memory ran out, not that one request was too large."""
    script(tmp_path, SEARCH)
    args = ("--device-memory", "1GiB", "--context-memory", "128MiB")
    done = plan(tmp_path, *args, "--json", "train.py", "20")
    assert done.returncode == 1, done.stderr
    answer = json.loads(done.stdout)
    assert "Tried to allocate 64.00 MiB" in answer["oom_message"]
    assert len(answer["caught_ooms"]) == 2
    assert "request over the limit" not in answer["verdict"]["label"]
