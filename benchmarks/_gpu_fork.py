"""Step 5 of the real-GPU check: window dumps written by a forked child beside a live CUDA context.

Runs in a worker subprocess, so that its whole stderr (the child inherits it) can be searched for
CUDA errors. The worker counts the forks the library makes and the exit status of each child by
wrapping ``os.fork`` and ``os.waitpid`` (the library calls both through the ``os`` module); it
times every training step, so the step that ends a window (snapshot and fork) and the steps that
run while the child writes can be compared with ordinary ones, for the forked and the inline
writer. Where ``writer="auto"`` declines to fork, the forked path is still measured through the
version's private switch when it has one, and the JSON says so.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

from _gpu_record import Context, Step, has_field, run_python
from _gpu_rig import Rig

import memforensics

_CUDA_ERROR = re.compile(r"CUDA error|CUDA_ERROR|cudaError|initialization error", re.I)


class ForkWatch:
    """Wraps ``os.fork``/``os.waitpid`` to see the writer's children: when born, how they ended."""

    def __init__(self) -> None:
        self.forks: list[tuple[int, float]] = []
        self.exits: dict[int, tuple[int, float]] = {}
        real_fork, real_waitpid = os.fork, os.waitpid

        def fork() -> int:
            pid = real_fork()
            if pid:
                self.forks.append((pid, time.monotonic()))
            return pid

        def waitpid(pid: int, options: int) -> tuple[int, int]:
            got, status = real_waitpid(pid, options)
            if got:
                self.exits[got] = (status, time.monotonic())
            return got, status

        os.fork = fork
        os.waitpid = waitpid


def run_pass(
    rig: Rig, trainer: Any, out: Path, args: dict[str, Any], writer: str, watch: ForkWatch
) -> dict[str, Any] | None:
    """Train ``window * windows`` steps with windows dumped by ``writer``; None if unavailable."""
    window, windows, batch = args["window"], args["windows"], args["batch"]
    config: dict[str, Any] = {"steps": window, "keep_last": None, "oom_history": "off"}
    config["max_entries"] = args["max_entries"]
    how = "public"
    public = "inline" if writer == "inline" else "auto"
    if has_field("writer"):
        config["writer"] = public
    elif writer != "auto":
        how = "private"
    mf = memforensics.install(device=rig.name, out_dir=str(out / writer), **config)
    dumper = getattr(mf, "_dumper", None)
    if writer == "fork" or (writer == "inline" and how == "private"):
        private = {"fork": "fork", "inline": "sync"}[writer]
        if dumper is None or getattr(dumper, "writer", None) is None:
            mf.close()
            return None
        dumper.writer = private
        how = "private"
    forks_before = len(watch.forks)
    ends: list[float] = []
    seconds: list[float] = []
    for number in range(window * windows):
        start = time.perf_counter()
        with mf.step(number):
            trainer.step(batch)
        rig.synchronize()
        seconds.append(time.perf_counter() - start)
        ends.append(time.monotonic())
    landed = [str(p) for p in mf.dumps]  # waits for the last child
    mf.close()
    children = [pid for pid, _ in watch.forks[forks_before:]]
    during = 0
    for pid, born in watch.forks[forks_before:]:
        died = watch.exits.get(pid, (0, float("inf")))[1]
        during += sum(1 for end in ends if born < end < died)
    dump_steps = [seconds[i] for i in range(window - 1, len(seconds), window)]
    other = [t for i, t in enumerate(seconds) if (i + 1) % window]
    return {
        "writer": writer,
        "set_through": how,
        "forks": len(children),
        "child_exit_status": [
            os.WEXITSTATUS(watch.exits[p][0])
            if p in watch.exits and os.WIFEXITED(watch.exits[p][0])
            else None
            for p in children
        ],
        "steps_while_child_wrote": during,
        "dump_step_ms": round(statistics.median(dump_steps) * 1e3, 3),
        "other_step_ms": round(statistics.median(other) * 1e3, 3),
        "trace_entries": [_sidecar(Path(p)).get("trace_entries") for p in landed],
        "rss_bytes": _rss(),
        "dumps": landed,
    }


def _sidecar(path: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(path.with_suffix(".json").read_text())
    return result


def _rss() -> int | None:
    """Resident bytes of this process (what fork() copies page tables for)."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def run_forked(rig: Rig, args: dict[str, Any]) -> dict[str, Any]:
    """The worker: forked writer, then (if auto did not fork) forced fork, then inline."""
    watch = ForkWatch()
    out = Path(args["out"])
    rig.cap(None)
    trainer = rig.trainer(width=args["width"], layers=args["layers"], seq=args["seq"])
    for _ in range(2):
        trainer.step(args["batch"])
    passes = [run_pass(rig, trainer, out, args, "auto", watch)]
    if passes[0] is not None and passes[0]["forks"] == 0:
        passes.append(run_pass(rig, trainer, out, args, "fork", watch))
    passes.append(run_pass(rig, trainer, out, args, "inline", watch))
    after = "ok"
    try:  # the parent must still compute after its children wrote
        trainer.step(args["batch"])
        rig.synchronize()
    except Exception as exc:  # noqa: BLE001 - reported, judged by the parent
        after = f"{type(exc).__name__}: {exc}"
    trainer.close()
    return {
        "passes": [p for p in passes if p is not None],
        "parent_after": after,
        "pid": os.getpid(),
    }


def step_forked(step: Step, ctx: Context) -> None:
    """5. The forked writer with a live device context, in a worker subprocess."""
    s = ctx.settings
    out = ctx.work / "5-forked"
    args = {
        "out": str(out),
        "width": s.width,
        "layers": s.layers,
        "seq": s.seq,
        "batch": s.fork_batch,
        "window": s.fork_window,
        "windows": s.fork_windows,
        "max_entries": s.fork_max_entries,
    }
    proc = run_python(
        [
            str(ctx.script),
            "--device",
            ctx.rig.name,
            "--worker",
            "forked",
            "--worker-args",
            json.dumps(args),
        ],
        ctx,
        400.0,
    )
    errors = _CUDA_ERROR.findall(proc["stderr"])
    step.check("no CUDA error in parent or child", not errors, expected=[], actual=errors[:5])
    result_file = out / "result.json"
    if not step.check(
        "worker exit status",
        proc["exit_status"] == 0 and result_file.exists(),
        expected=0,
        actual=proc["exit_status"],
        detail=proc["stderr"].strip()[-100:],
    ):
        return
    result = json.loads(result_file.read_text())
    step.figures["passes"] = [
        {k: v for k, v in p.items() if k != "dumps"} for p in result["passes"]
    ]
    step.check(
        "parent computes after the dumps",
        result["parent_after"] == "ok",
        expected="ok",
        actual=result["parent_after"],
    )
    forked = [p for p in result["passes"] if p["forks"] > 0]
    if not forked:
        step.unjudged("the writer forked", "no pass forked (no private switch in this version)")
    for p in result["passes"]:
        label = f"{p['writer']} writer"
        step.check(
            f"{label}: every window landed",
            len(p["dumps"]) == s.fork_windows,
            expected=s.fork_windows,
            actual=len(p["dumps"]),
        )
        if p["forks"]:
            statuses = p["child_exit_status"]
            step.check(
                f"{label}: children exited 0",
                all(c == 0 for c in statuses),
                expected=0,
                actual=statuses,
            )
        for path in p["dumps"][:1]:
            check_sidecar_pid(step, label, Path(path), result["pid"])
        ctx.add_dumps(step.key, [Path(d) for d in p["dumps"][:1]])


def check_sidecar_pid(step: Step, label: str, path: Path, pid: int) -> None:
    """The sidecar names the training process, also when a child wrote it (schema 2)."""
    sidecar = _sidecar(path)
    if (sidecar.get("schema") or 1) < 2:
        step.skip(f"{label}: sidecar pid is the training process", "sidecar schema 2")
        return
    step.check(
        f"{label}: sidecar pid is the training process",
        sidecar.get("pid") == pid,
        expected=pid,
        actual=sidecar.get("pid"),
    )
