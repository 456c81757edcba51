"""Step 1 of the real-GPU check: a real OOM through the observer, against three witnesses.

A small transformer trains under a memory cap, its batch doubling until the allocator gives up.
What the sidecar says is compared with the error text PyTorch printed, with ``mem_get_info``
read right after, and with the allocator's own rounding rules applied to the trace's ``oom``
entry (``check_oom_sizes``, which step 2 reuses on requests whose size it knows).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _gpu_record import Context, Step
from _gpu_rig import MiB, allocation_size, block_size, format_size, parse_oom_text

import memforensics


def oom_files(out: Path) -> list[Path]:
    """OOM snapshots under ``out``, oldest name first."""
    return sorted((out / "oom").glob("*.pickle"))


def trace_oom_size(path: Path, device: int) -> int | None:
    """``size`` of the last ``oom`` entry in the dump's trace of ``device`` (safe loader)."""
    from memforensics.analysis.dump import read_snapshot_file

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
    limits = rig.cap(s.oom_cap)
    trainer = rig.trainer(width=s.width, layers=s.layers, seq=s.seq)
    out = ctx.work / "1-oom"
    # Some kernels catch an OOM and retry with less workspace: keep every dump, judge the last,
    # which is the one the user's exception reports.
    mf = memforensics.install(
        device=rig.name, out_dir=str(out), oom_history="all", max_oom_snapshots=8
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
    step.figures.update(steps_before_oom=number, batch_at_oom=batch, limit_bytes=limits)
    step.figures["error"] = text.splitlines()[0][:300]
    step.check("user's exception is the same object", same, expected=True, actual=same)
    files = oom_files(out)
    ctx.add_dumps(step.key, files)
    step.figures["oom_dumps"] = len(files)
    if not step.check("an OOM dump landed", bool(files), expected=">= 1", actual=len(files)):
        return
    sidecar = json.loads(files[-1].with_suffix(".json").read_text())
    oom = sidecar.get("oom") or {}
    step.figures["sidecar"] = {k: v for k, v in oom.items() if k not in ("stack", "allocator")}
    step.figures.update(schema=sidecar.get("schema"), snapshot_bytes=sidecar.get("snapshot_bytes"))
    step.check(
        "seen by the observer",
        oom.get("source") == "observer",
        expected="observer",
        actual=oom.get("source"),
    )
    compare_with_witnesses(step, rig.current_device(), sidecar, text, info, limits)
    check_oom_sizes(step, sidecar, files[-1], None)


def compare_with_witnesses(
    step: Step,
    current: int,
    sidecar: dict[str, Any],
    text: str,
    info: tuple[int, int],
    limits: list[int] | None,
    figure: str = "free_minus_mem_get_info",
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
        device == current,
        expected=current,
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
    step.figures[figure] = delta
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
        isinstance(total, int) and any(abs(total - limit) <= 1 for limit in limits or ()),
        expected=limits,
        actual=total,
    )
    if facts["allowed"] is not None:
        printed = format_size(total) if isinstance(total, int) else None
        step.check(
            "device_total_bytes = 'allowed' in error text",
            printed == facts["allowed"],
            expected=facts["allowed"],
            actual=printed,
        )
