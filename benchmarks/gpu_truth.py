"""Everything the fakes cannot prove, checked on one real CUDA device in one run (under 8 minutes).

    python benchmarks/gpu_truth.py [--device auto|cuda|sim] [--out gpu_truth.json]
                                   [--archive benchmarks/gpu] [--budget 480] [--fast]
                                   [--only STEP ...] [--keep-dumps DIR]

Seven steps, each with its own time limit inside one wall-clock budget; a step that fails records
its error and the run goes on:

1. ``oom``: a real OOM through the observer in a small transformer training loop under a memory
   fraction; the sidecar against the error text and ``mem_get_info``; the user's exception is
   the same object.
2. ``verdicts``: a fragmenting and an exhausting workload (known by construction): the summary
   (and replay) verdicts, and whether ``expandable_segments:True`` really avoids the first OOM.
3. ``windows``: step windows on two devices where present: files, metadata, history per window.
4. ``cost``: step time with history off, ``state``, ``all`` (context alloc / all), stacks python.
5. ``forked``: the forked window writer beside a live CUDA context.
6. ``analysis``: ``summary``, ``report`` and ``replay`` on every dump written, through the CLI.
7. ``plan_distributed``: ``memforensics plan --nproc-per-node 1`` of a DDP and an FSDP2 script
   on the real device's memory and capability, against the same script run for real as one
   NCCL rank: the second step's peak allocated within 1 %, peak reserved within 5 % (the dry
   run plans only: the real side needs CUDA).

Every figure goes into one JSON file (``--out``); a table is printed. Checks that need a
memforensics feature the version under test lacks are recorded as skipped. The exit status is 1
only when a check that ran gave a wrong answer. With ``--device sim`` (the default where there is
no CUDA) the same steps run on the simulated device: the dry run in ``nox -s tests``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from _gpu_cli import step_analysis
from _gpu_fork import run_forked, step_forked
from _gpu_oom import step_real_oom
from _gpu_plan import step_plan_distributed
from _gpu_record import FAIL, FAST, FULL, Context, Step, print_table, run_step
from _gpu_rig import CudaRig, Rig, SimRig
from _gpu_run import step_cost, step_windows
from _gpu_verdicts import run_workload, step_verdicts

import memforensics

os.environ.setdefault("MEMFORENSICS_LOG_LEVEL", "WARNING")  # one line per dump would bury the table
StepBody = Callable[[Step, Context], None]
STEPS: tuple[tuple[str, str, float, StepBody], ...] = (
    ("oom", "real OOM through the observer", 60.0, step_real_oom),
    ("verdicts", "verdict truth", 120.0, step_verdicts),
    ("windows", "step windows", 60.0, step_windows),
    ("cost", "recorder cost", 120.0, step_cost),
    ("forked", "forked writer with a live context", 120.0, step_forked),
    ("analysis", "CLI on the dumps written", 180.0, step_analysis),
    (
        "plan_distributed",
        "plan of 1-GPU DDP and FSDP2 against the real run",
        120.0,
        step_plan_distributed,
    ),
)
FAST_LIMIT_SCALE = 4.0
"""The dry run's step limits are this much longer: it proves code paths on a CI machine that
may be shared and slow, where the real run's limits are sized for an idle GPU host."""
RESERVE = 5.0
"""Seconds kept back from the budget for writing the JSON and the table."""


def make_rig(device: str) -> Rig:
    """The rig for ``device`` (``auto``: CUDA when torch sees one, else the sim)."""
    if device == "auto":
        try:
            import torch

            device = "cuda" if torch.cuda.is_available() else "sim"
        except ImportError:
            device = "sim"
    return CudaRig() if device == "cuda" else SimRig()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options (see the module docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--device", choices=("auto", "cuda", "sim"), default="auto")
    parser.add_argument("--out", type=Path, default=Path("gpu_truth.json"))
    parser.add_argument(
        "--archive", type=Path, help="also copy the JSON here as DATE_HHMM_GPU.json"
    )
    parser.add_argument("--budget", type=float, default=480.0, help="wall-clock seconds in all")
    parser.add_argument("--fast", action="store_true", help="small sizes and few repeats")
    parser.add_argument("--only", action="append", choices=[s[0] for s in STEPS])
    parser.add_argument("--keep-dumps", type=Path, help="write dumps here and keep them")
    parser.add_argument("--worker", choices=("workload", "forked"), help=argparse.SUPPRESS)
    parser.add_argument("--worker-args", default="{}", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def worker(args: argparse.Namespace) -> int:
    """A subprocess of steps 2 and 5: run, write ``result.json`` in its output folder."""
    rig = make_rig(args.device)
    options: dict[str, Any] = json.loads(args.worker_args)
    out = Path(options["out"])
    out.mkdir(parents=True, exist_ok=True)
    if args.worker == "workload":
        result = run_workload(rig, options["name"], out, options["cap"])
    else:
        result = run_forked(rig, options)
    (out / "result.json").write_text(json.dumps(result, indent=2, default=str))
    return 0


def archive_name(device: dict[str, Any], when: datetime) -> str:
    """``2026-12-04_1457_NVIDIA-H200.json``: the date, the start's hour and minute (UTC) and the
    GPU name, as benchmarks/gpu/ names runs, so two runs on one day keep both files."""
    gpu = str(device.get("gpu_name") or device.get("device") or "unknown")
    safe = "".join(c if c.isalnum() or c in "-." else "-" for c in gpu).strip("-")
    return f"{when:%Y-%m-%d_%H%M}_{safe}.json"


def main(argv: list[str] | None = None) -> int:
    """Run the selected steps within the budget; write the JSON; 1 if any check was wrong."""
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    began = time.monotonic()
    started = datetime.now(timezone.utc)
    rig = make_rig(args.device)
    settings = FAST if args.fast else FULL
    work = args.keep_dumps or Path(tempfile.mkdtemp(prefix="gpu_truth_"))
    work.mkdir(parents=True, exist_ok=True)
    ctx = Context(rig, settings, work.resolve(), Path(__file__).resolve())
    steps: list[Step] = []
    for key, title, limit, body in STEPS:
        step = Step(key, title)
        steps.append(step)
        if args.only and key not in args.only:
            step.status = "skipped: not selected"
            continue
        left = args.budget - (time.monotonic() - began) - RESERVE
        if left < 5.0:
            step.status, step.error = "skipped", "wall-clock budget spent"
            continue
        scale = FAST_LIMIT_SCALE if args.fast else 1.0
        run_step(step, ctx, min(limit * scale, left), body)
        try:
            rig.cap(None)
            rig.use_device(0)
            rig.empty_cache()
        except Exception as exc:  # noqa: BLE001 - the next step reports what is broken
            step.figures["cleanup_error"] = repr(exc)
    wrong = sum(step.wrong for step in steps)
    report = {
        "tool": "benchmarks/gpu_truth.py",
        "memforensics_version": memforensics.__version__,
        "started_at": started.isoformat(),
        "seconds": round(time.monotonic() - began, 3),
        "budget_seconds": args.budget,
        "settings": "fast" if args.fast else "full",
        "machine": rig.describe(),
        "steps": [step.to_dict() for step in steps],
        "wrong_answers": wrong,
        "dumps_kept_in": str(work) if args.keep_dumps else None,
    }
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print_table(steps)
    print(f"\n{wrong} wrong answer(s); {report['seconds']:.1f} s; wrote {args.out}")
    if args.archive:
        args.archive.mkdir(parents=True, exist_ok=True)
        target = args.archive / archive_name(report["machine"], started)
        shutil.copyfile(args.out, target)
        print(f"archived as {target}")
    if not args.keep_dumps:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if any(c.status == FAIL for s in steps for c in s.checks) else 0


if __name__ == "__main__":
    sys.exit(main())
