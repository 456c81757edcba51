"""Steps 1 and 2 of the real-GPU check: a real OOM through the observer, and verdict truth.

Step 1 trains a small transformer under a memory cap, doubling the batch until the allocator
gives up, and compares what the sidecar says with three independent witnesses: the error text
PyTorch printed, ``mem_get_info`` right after, and the allocator's own rounding rules applied to
the trace's ``oom`` entry. Step 2 runs two workloads whose failure is known by construction (one
fragments the cache, one exhausts it) in fresh subprocesses, asks ``summary`` (and ``replay``
where it exists) for the verdict, and reruns the fragmenting one with
``expandable_segments:True`` to see whether the advice really avoids the OOM.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from _gpu_cli import judge_replay, summary_verdict
from _gpu_record import Context, Step, has_command, run_python
from _gpu_rig import MiB, Rig, allocation_size, block_size, format_size, parse_oom_text

import memforensics

FRAGMENT_REQUEST = 100 * MiB + 1000
"""The request that fails in the fragmentation workload: 480 MiB are free, in 60 MiB holes."""
EXHAUST_REQUEST = 64 * MiB
"""The tensor size the exhaustion workload keeps allocating until nothing is left."""


def oom_files(out: Path) -> list[Path]:
    """OOM snapshots under ``out``, oldest name first."""
    return sorted((out / "oom").glob("*.pickle"))


def trace_oom_size(path: Path, device: int) -> int | None:
    """``size`` of the last ``oom`` entry in the dump's trace of ``device`` (safe loader)."""
    from memforensics.analysis import read_snapshot_file

    snapshot: Any = read_snapshot_file(path)
    traces = snapshot.get("device_traces") or []
    trace = traces[device] if 0 <= device < len(traces) else []
    sizes = [entry.get("size") for entry in trace if entry.get("action") == "oom"]
    return sizes[-1] if sizes else None


def check_oom_sizes(step: Step, sidecar: dict[str, Any], path: Path, request: int | None) -> None:
    """Sidecar sizes against the trace and the allocator's rounding (and the known request)."""
    oom = sidecar.get("oom") or {}
    device = sidecar.get("device_index")
    requested = oom.get("requested_bytes")
    if "allocation_bytes" not in oom:
        step.skip(
            "requested_bytes is the user's request", "sidecar schema 2 (oom.allocation_bytes)"
        )
        if request is not None:
            step.check(
                "requested_bytes is the allocator's request (schema 1)",
                requested == allocation_size(block_size(request)),
                expected=allocation_size(block_size(request)),
                actual=requested,
            )
        return
    allocation = oom["allocation_bytes"]
    traced = trace_oom_size(path, device if isinstance(device, int) else 0)
    step.check(
        "requested_bytes = trace's oom entry",
        requested == traced,
        expected=traced,
        actual=requested,
    )
    if isinstance(requested, int):
        step.check(
            "allocation_bytes = allocator rounding of requested_bytes",
            allocation == allocation_size(requested),
            expected=allocation_size(requested),
            actual=allocation,
        )
    if request is not None:
        step.check(
            "requested_bytes = the request, rounded to 512",
            requested == block_size(request),
            expected=block_size(request),
            actual=requested,
        )


def step_real_oom(step: Step, ctx: Context) -> None:
    """1. A transformer training loop run into OOM under a memory cap, observed for real."""
    rig, s = ctx.rig, ctx.settings
    rig.empty_cache()
    limit = rig.cap(s.oom_cap)
    trainer = rig.trainer(width=s.width, layers=s.layers, seq=s.seq)
    out = ctx.work / "1-oom"
    mf = memforensics.install(
        device=rig.name, out_dir=str(out), oom_history="all", max_oom_snapshots=1
    )
    step.check("observer attached", mf.oom_attached, expected=True, actual=mf.oom_attached)
    inner: BaseException | None = None
    outer: BaseException | None = None
    info: tuple[int, int] | None = None
    batch = s.oom_batch
    number = 0
    try:
        for number in range(s.oom_max_steps):
            with mf.step(number):
                try:
                    trainer.step(batch)
                except BaseException as exc:
                    inner = exc
                    raise
            batch *= 2
    except rig.oom_error as exc:
        info = rig.mem_get_info()  # before anything is released
        outer = exc
    finally:
        mf.close()
    text = str(outer) if outer is not None else ""
    same = outer is not None and outer is inner
    del inner, outer
    trainer.close()
    rig.cap(None)
    rig.empty_cache()
    if info is None:
        raise RuntimeError(f"no OOM after {s.oom_max_steps} steps (last batch {batch})")
    step.figures.update(steps_before_oom=number, batch_at_oom=batch, limit_bytes=limit)
    step.figures["error"] = text.splitlines()[0][:300]
    step.check("user's exception is the same object", same, expected=True, actual=same)
    files = oom_files(out)
    ctx.add_dumps(step.key, files)
    if not step.check("one OOM dump landed", len(files) == 1, expected=1, actual=len(files)):
        return
    sidecar = json.loads(files[0].with_suffix(".json").read_text())
    oom = sidecar.get("oom") or {}
    step.figures["sidecar"] = {k: v for k, v in oom.items() if k not in ("stack", "allocator")}
    step.figures.update(schema=sidecar.get("schema"), snapshot_bytes=sidecar.get("snapshot_bytes"))
    step.check(
        "seen by the observer",
        oom.get("source") == "observer",
        expected="observer",
        actual=oom.get("source"),
    )
    compare_with_witnesses(step, rig, sidecar, text, info, limit)
    check_oom_sizes(step, sidecar, files[0], None)


def compare_with_witnesses(
    step: Step,
    rig: Rig,
    sidecar: dict[str, Any],
    text: str,
    info: tuple[int, int],
    limit: int | None,
) -> None:
    """Device, sizes, limit and free memory against the error text and ``mem_get_info``."""
    oom = sidecar.get("oom") or {}
    facts = parse_oom_text(text)
    if facts is None:
        step.unjudged("error text", "the OOM message has an unknown wording", actual=text[:300])
        return
    device = sidecar.get("device_index")
    step.check(
        "device_index = device in error text",
        device == facts["device"],
        expected=facts["device"],
        actual=device,
    )
    step.check(
        "device_index = current device",
        device == rig.current_device(),
        expected=rig.current_device(),
        actual=device,
    )
    size = oom.get("allocation_bytes", oom.get("requested_bytes"))
    key = "allocation_bytes" if "allocation_bytes" in oom else "requested_bytes (schema 1)"
    printed = format_size(size) if isinstance(size, int) else None
    step.check(
        f"{key} = 'Tried to allocate'",
        printed == facts["allocation"],
        expected=facts["allocation"],
        actual=printed,
    )
    free = oom.get("device_free_bytes")
    printed = format_size(free) if isinstance(free, int) else None
    step.check(
        "device_free_bytes = free in error text",
        printed == facts["free"],
        expected=facts["free"],
        actual=printed,
    )
    delta = free - info[0] if isinstance(free, int) else None
    step.figures["free_minus_mem_get_info"] = delta
    step.check(
        "device_free_bytes = mem_get_info free (within 2 MiB)",
        delta is not None and abs(delta) <= 2 * MiB,
        expected=info[0],
        actual=free,
    )
    step.check(
        "total in error text = mem_get_info total",
        facts["total"] == format_size(info[1]),
        expected=format_size(info[1]),
        actual=facts["total"],
    )
    total = oom.get("device_total_bytes")
    step.check(
        "device_total_bytes = the per-process limit",
        isinstance(total, int) and limit is not None and abs(total - limit) <= 1,
        expected=limit,
        actual=total,
    )


# -- step 2: workloads whose failure is known -------------------------------------------------
def run_workload(rig: Rig, name: str, out: Path, cap: int) -> dict[str, Any]:
    """Run one labelled workload (in a worker subprocess); what happened, for the parent."""
    limit = rig.cap(cap)
    settings = rig.allocator_settings()
    mf = memforensics.install(
        device=rig.name, out_dir=str(out), oom_history="all", max_oom_snapshots=1
    )
    kept: list[Any] = []
    result: dict[str, Any] = {"oom": False, "limit": limit, "error": None}
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
        result.update(oom=True, error=str(exc))
    result["live_bytes"] = sum(getattr(t, "nbytes", 0) for t in kept)
    del kept
    mf.close()
    result["expandable_segments"] = settings.get("expandable_segments")
    result["alloc_conf"] = settings.get("PYTORCH_CUDA_ALLOC_CONF")
    result["dumps"] = [str(p) for p in oom_files(out)]
    return result


def workload(ctx: Context, name: str, tag: str, alloc_conf: str | None) -> dict[str, Any]:
    """Run a workload in a fresh interpreter (with ``alloc_conf`` in its environment)."""
    out = ctx.work / f"2-{tag}"
    env = dict(os.environ)
    if alloc_conf is not None:
        env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
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
        result = workload(ctx, name, name, None)
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
        sub = Step(step.key, step.title)
        check_oom_sizes(sub, sidecar, paths[0], request)
        for item in sub.checks:
            item.name = f"{name}: {item.name}"
        step.checks.extend(sub.checks)
        verdict = summary_verdict(ctx, paths[0])
        step.check(
            f"{name}: summary verdict",
            isinstance(verdict, str) and verdict.startswith(expected),
            expected=expected,
            actual=verdict,
        )
        if replay:
            judge_replay(step, ctx, paths[0], name)
        else:
            step.skip(f"{name}: replay verdict", "memforensics replay")
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
