"""Step 2 of the real-GPU check: verdicts on workloads whose failure is known by construction.

One workload fragments the cache (eight 120 MiB segments, each split in two 60 MiB blocks, every
first half freed: 480 MiB free in reserved memory, no hole of 100 MiB), one exhausts it (64 MiB
tensors kept until none fits). Each runs in a fresh interpreter under a 1 GiB cap, so no earlier
step's cache changes the arithmetic. ``summary`` (and ``replay`` where it exists) must name the
cause, and the fragmenting one, rerun with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``,
must really not run out of memory, since that is what the advice tells the user to do.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from _gpu_cli import judge_replay, summary_json, verdict_name
from _gpu_oom import check_oom_sizes, compare_with_witnesses, oom_files
from _gpu_record import Context, Step, has_command, prefixed, run_python
from _gpu_rig import MiB, Rig

import memforensics

FRAGMENT_REQUEST = 100 * MiB + 1000
"""The request that fails in the fragmentation workload: 480 MiB are free, in 60 MiB holes."""
EXHAUST_REQUEST = 64 * MiB
"""The tensor size the exhaustion workload keeps allocating until nothing is left."""


def run_workload(rig: Rig, name: str, out: Path, cap: int) -> dict[str, Any]:
    """Run one labelled workload (in a worker subprocess); what happened, for the parent."""
    limits = rig.cap(cap)
    settings = rig.allocator_settings()
    mf = memforensics.install(
        device=rig.name, out_dir=str(out), oom_history="all", max_oom_snapshots=1
    )
    kept: list[Any] = []
    result: dict[str, Any] = {"oom": False, "limits": limits, "error": None}
    try:
        if name == "exhaustion":
            for _ in range(4 * cap // EXHAUST_REQUEST):
                kept.append(rig.empty(EXHAUST_REQUEST))
        else:
            big = [rig.empty(120 * MiB) for _ in range(8)]  # 8 cached 120 MiB segments
            del big
            halves = [rig.empty(60 * MiB) for _ in range(16)]  # each segment split in two
            kept = halves[1::2]  # free every first half: 8 holes of 60 MiB, none of 100
            del halves
            kept.append(rig.empty(FRAGMENT_REQUEST))
    except rig.oom_error as exc:
        result.update(oom=True, error=str(exc), mem_get_info=rig.mem_get_info())
        result["device"] = rig.current_device()
    result["live_bytes"] = sum(getattr(t, "nbytes", 0) for t in kept)
    del kept
    mf.close()
    result["expandable_segments"] = settings.get("expandable_segments")
    result["alloc_conf"] = settings.get("PYTORCH_CUDA_ALLOC_CONF")
    result["dumps"] = [str(p) for p in oom_files(out)]
    return result


def workload(ctx: Context, name: str, tag: str, alloc_conf: str) -> dict[str, Any]:
    """Run a workload in a fresh interpreter (with ``alloc_conf`` in its environment)."""
    out = ctx.work / f"2-{tag}"
    env = dict(os.environ)
    env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf  # "" = defaults, whatever the machine sets
    args = {"name": name, "out": str(out), "cap": ctx.settings.workload_cap}
    proc = run_python(
        [
            str(ctx.script),
            "--device",
            ctx.rig.name,
            "--worker",
            "workload",
            "--worker-args",
            json.dumps(args),
        ],
        ctx,
        120.0,
        env,
    )
    result_file = out / "result.json"
    if proc["exit_status"] != 0 or not result_file.exists():
        raise RuntimeError(f"{tag} worker failed ({proc['exit_status']}): {proc['stderr'][-800:]}")
    result: dict[str, Any] = json.loads(result_file.read_text())
    result["worker_seconds"] = proc["seconds"]
    return result


def step_verdicts(step: Step, ctx: Context) -> None:
    """2. Fragmentation and exhaustion, known by construction, judged by summary and replay."""
    replay = has_command("replay")
    for name, expected, request in (
        ("fragmentation", "fragmentation", FRAGMENT_REQUEST),
        ("exhaustion", "exhausted", EXHAUST_REQUEST),
    ):
        result = workload(ctx, name, name, "")
        step.figures[name] = {k: v for k, v in result.items() if k != "error"}
        if not step.check(
            f"{name}: OOM raised", result["oom"], expected=True, actual=result["oom"]
        ):
            continue
        paths = [Path(p) for p in result["dumps"]]
        ctx.add_dumps(step.key, paths)
        if not step.check(f"{name}: one OOM dump", len(paths) == 1, expected=1, actual=len(paths)):
            continue
        sidecar = json.loads(paths[0].with_suffix(".json").read_text())
        with prefixed(step, name):
            check_oom_sizes(step, sidecar, paths[0], request)
            info = (result["mem_get_info"][0], result["mem_get_info"][1])
            figure = f"{name}_free_minus_mem_get_info"
            compare_with_witnesses(
                step, result["device"], sidecar, result["error"], info, result["limits"], figure
            )
            summary, _ = summary_json(ctx, paths[0])
            verdict = verdict_name(summary)
            said = summary.get("verdict") if summary else None
            step.figures[f"{name}_explanation"] = (
                said.get("explanation")
                if isinstance(said, dict)
                else (summary or {}).get("explanation")
            )
            step.check(
                "summary verdict",
                isinstance(verdict, str) and verdict.startswith(expected),
                expected=expected,
                actual=verdict,
            )
            if replay:
                judge_replay(step, ctx, paths[0], name)
            else:
                step.skip("replay verdict", "memforensics replay")
    rerun = workload(ctx, "fragmentation", "fragmentation-expandable", "expandable_segments:True")
    step.figures["fragmentation_expandable"] = {k: v for k, v in rerun.items() if k != "error"}
    if rerun.get("expandable_segments") is not True:
        step.skip(
            "expandable_segments:True avoids the OOM",
            f"expandable_segments on the {ctx.rig.name} device",
        )
        return
    step.check(
        "expandable_segments:True avoids the OOM",
        rerun["oom"] is False,
        expected=False,
        actual=rerun["oom"],
        detail="" if not rerun["oom"] else str(rerun.get("error"))[:100],
    )
