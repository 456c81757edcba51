"""Steps 3 and 4 of the real-GPU check: step windows on each device, and what recording costs.

Both drive the same training loop as step 1 (``Rig.trainer``) without a memory cap. Windows are
checked for what a user reads off disk: the files, the step numbers, the device, and that each
window's history starts when the window opens. The recorder cost is the median step time under
each history setting, divided by the step time with history off, from interleaved repeats.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from _gpu_record import Context, Step, has_field

import memforensics

FIRST_STEP = 10
"""Windows start at step 10, so a step number taken for an index would show."""


def window_events(path: Path, device: int) -> list[dict[str, Any]]:
    """The trace of ``device`` in a window dump (safe loader)."""
    from memforensics.analysis.dump import read_snapshot_file

    snapshot: Any = read_snapshot_file(path)
    traces = snapshot.get("device_traces") or []
    return list(traces[device]) if 0 <= device < len(traces) else []


def step_windows(step: Step, ctx: Context) -> None:
    """3. Two 2-step windows per device (two devices where present): files, metadata, history."""
    rig, s = ctx.rig, ctx.settings
    devices = list(range(min(2, rig.device_count())))
    step.figures["devices"] = devices
    for device in devices:
        rig.use_device(0)
        rig.cap(None)
        out = ctx.work / f"3-windows-device{device}"
        mf = memforensics.install(device=rig.name, out_dir=str(out), steps=2, keep_last=None)
        rig.use_device(device)  # after install(), as scripts do: dumps must name this device
        trainer = rig.trainer(width=s.width, layers=s.layers, seq=s.seq)
        marks: dict[int, int] = {}
        for number in range(FIRST_STEP, FIRST_STEP + 4):
            marks[number] = time.time_ns() // 1000
            with mf.step(number):
                trainer.step(s.cost_batch)
            rig.synchronize()
        mf.close()
        trainer.close()
        rig.empty_cache()
        rig.use_device(0)
        paths = sorted(out.glob("steps*/*.pickle"))
        ctx.add_dumps(step.key, paths)
        names = [p.parent.name for p in paths]
        expected = [
            f"steps{FIRST_STEP}-{FIRST_STEP + 1}",
            f"steps{FIRST_STEP + 2}-{FIRST_STEP + 3}",
        ]
        if not step.check(
            f"device {device}: window folders", names == expected, expected=expected, actual=names
        ):
            continue
        for index, path in enumerate(paths):
            first = FIRST_STEP + 2 * index
            check_window(step, path, device, first, marks[first - 1] if index else None)


def check_window(step: Step, path: Path, device: int, first: int, before: int | None) -> None:
    """One window's sidecar and trace; ``before`` is when the previous window's last step began."""
    label = f"device {device} steps{first}-{first + 1}"
    sidecar = json.loads(path.with_suffix(".json").read_text())
    facts = {k: sidecar.get(k) for k in ("kind", "steps", "step", "partial")}
    want = {"kind": "window", "steps": [first, first + 1], "step": first + 1, "partial": False}
    step.check(f"{label}: sidecar", facts == want, expected=want, actual=facts)
    if (sidecar.get("schema") or 1) >= 2:
        index = sidecar.get("device_index")
        step.check(f"{label}: device_index", index == device, expected=device, actual=index)
        pid = sidecar.get("pid")
        step.check(f"{label}: pid", pid == os.getpid(), expected=os.getpid(), actual=pid)
    else:
        step.skip(f"{label}: device_index at dump time", "sidecar schema 2")
    events = window_events(path, device)
    step.figures[f"{label} events"] = len(events)
    if not step.check(f"{label}: history recorded", bool(events), actual=len(events)):
        return
    tags = {e.get("user_metadata") for e in events} - {None, ""}
    if tags:
        own = {f"step={first}", f"step={first + 1}"}
        step.check(
            f"{label}: only this window's step tags",
            tags <= own,
            expected=sorted(own),
            actual=sorted(tags),
        )
    if before is not None:
        stale = sum(1 for e in events if e.get("time_us", before) < before)
        step.check(
            f"{label}: history cleared when the window opened", stale == 0, expected=0, actual=stale
        )


COST_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("not installed", {}),
    ("history off", {"oom_history": "off"}),
    ("state", {"oom_history": "state"}),
    ("all, context=alloc", {"oom_history": "all", "context": "alloc"}),
    ("all, context=all", {"oom_history": "all", "context": "all"}),
)


def timed_steps(ctx: Context, trainer: Any, config: dict[str, Any] | None, out: Path) -> float:
    """Mean seconds per training step with forensics installed as ``config`` (None: not at all)."""
    s, rig = ctx.settings, ctx.rig
    mf = None
    if config is not None:
        mf = memforensics.install(device=rig.name, out_dir=str(out), stacks="python", **config)
    try:
        for number in range(s.cost_steps + 1):
            if number == 1:  # the first step after install warms up; not timed
                rig.synchronize()
                start = time.perf_counter()
            if mf is None:
                trainer.step(s.cost_batch)
            else:
                with mf.step(number):
                    trainer.step(s.cost_batch)
        rig.synchronize()
        return (time.perf_counter() - start) / s.cost_steps
    finally:
        memforensics.uninstall()


def step_cost(step: Step, ctx: Context) -> None:
    """4. Step time under each history setting; ratios to history off; interleaved medians."""
    rig, s = ctx.rig, ctx.settings
    rows = []
    for label, config in COST_ROWS:
        if "context" in config and not has_field("context"):
            step.skip(f"cost of {label}", "config field 'context'")
        else:
            rows.append((label, config))
    rig.cap(None)
    trainer = rig.trainer(width=s.width, layers=s.layers, seq=s.seq)
    for _ in range(3):
        trainer.step(s.cost_batch)
    times: dict[str, list[float]] = {label: [] for label, _ in rows}
    out = ctx.work / "4-cost"
    for repeat in range(s.cost_repeats):
        shift = repeat % len(rows)  # rotate the order so no row always runs first
        for label, config in rows[shift:] + rows[:shift]:
            setting = None if label == "not installed" else config
            times[label].append(timed_steps(ctx, trainer, setting, out))
    trainer.close()
    rig.empty_cache()
    reference = times["history off"]
    table = {}
    for label, values in times.items():
        ratios = [v / r for v, r in zip(values, reference, strict=True) if r > 0]
        table[label] = {
            "step_ms": round(statistics.median(values) * 1e3, 3),
            "ratio_to_history_off": round(statistics.median(ratios), 3),
            "repeats": len(values),
        }
    step.figures["rows"] = table
    step.figures["batch"] = s.cost_batch
    step.figures["steps_per_repeat"] = s.cost_steps
    step.check(
        "every row measured",
        all(len(v) == s.cost_repeats for v in times.values()),
        expected=s.cost_repeats,
        actual={k: len(v) for k, v in times.items()},
    )
