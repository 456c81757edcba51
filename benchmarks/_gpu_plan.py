"""Step 7 of the real-GPU check: ``memforensics plan`` of a one-rank DDP and FSDP2 job against
the same job run for real.

``plan_scripts/distributed_step.py`` measures its own second training step (peak allocated and
reserved, counters reset before it) and writes the figures to a file, whether it runs on the
real device (one rank, NCCL, torchrun's environment set here) or under ``memforensics plan
--nproc-per-node 1`` with the real device's memory and compute capability. The plan agrees when
the peak allocated is within 1 % of the real one and the peak reserved within 5 %. On the sim
device only the plan side runs (it needs only the CPU torch), so the dry run proves the path;
the real side is recorded as skipped.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from pathlib import Path
from typing import Any

from _gpu_record import SKIPPED, Check, Context, Step, has_command, read_json, run_cli, run_python

SCRIPT = Path(__file__).resolve().parent / "plan_scripts" / "distributed_step.py"
STRATEGIES = ("ddp", "fsdp2")
TOLERANCE = {"peak_allocated": 0.01, "peak_reserved": 0.05}
"""Largest relative difference of plan's figure from the real one that still agrees."""
NO_CUDA = "skipped: the real run needs CUDA"
SIM_CAPABILITY = "9.0"
"""The capability planned on the dry run (the sim has none; plan's default)."""


def free_port() -> int:
    """A TCP port nothing listens on now, for the one-rank job's rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def device_figures(ctx: Context) -> tuple[int, str]:
    """Total bytes and ``MAJOR.MINOR`` capability of device 0 (the sim's total, plan's default
    capability on the dry run)."""
    total = int(ctx.rig.describe()["devices"][0]["total_bytes"])
    if ctx.rig.name != "cuda":
        return total, SIM_CAPABILITY
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return total, f"{major}.{minor}"


def run_real(ctx: Context, strategy: str, out: Path) -> dict[str, Any]:
    """The script as one rank of a real NCCL job; its figures, or the run's tail on failure."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFORENSICS_")}
    env.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
    )  # fmt: skip
    proc = run_python([str(SCRIPT), strategy, str(out)], ctx, 90.0, env)
    return _figures(proc, out)


def run_planned(ctx: Context, strategy: str, out: Path, total: int, capability: str) -> Any:
    """``memforensics plan --json --nproc-per-node 1`` of the script on the real device's
    figures: the script's own figures, plan's answer, or the run's tail on failure."""
    args = ["plan", "--json", "--nproc-per-node", "1", "--device-memory", str(total)]
    args += ["--device-capability", capability, "--out-dir", str(out.parent / "plan-out")]
    proc = run_cli([*args, str(SCRIPT), strategy, str(out)], ctx, 90.0)
    figures = _figures(proc, out)
    answer = read_json(proc["stdout"])
    if isinstance(answer, dict):
        figures["plan_peak_allocated_bytes"] = answer.get("peak_allocated_bytes")
        figures["plan_peak_reserved_bytes"] = answer.get("peak_reserved_bytes")
        figures["plan_fits"] = answer.get("fits")
    return figures


def _figures(proc: dict[str, Any], out: Path) -> dict[str, Any]:
    """What the script wrote, with the run's seconds; the exit status and tails if it wrote none."""
    figures: dict[str, Any] = {"seconds": proc["seconds"]}
    written = read_json(out.read_text()) if out.exists() else None
    if isinstance(written, dict):
        figures.update(written)
    else:
        figures["exit_status"] = proc["exit_status"]
        figures["stderr_tail"] = proc["stderr"][-2000:]
    return figures


def relative(planned: Any, real: Any) -> float | None:
    """``(planned - real) / real``, None when either is not a positive count."""
    if not isinstance(planned, int) or not isinstance(real, int) or real <= 0:
        return None
    return (planned - real) / real


def step_plan_distributed(step: Step, ctx: Context) -> None:
    """Plan and run each strategy at world size 1; judge plan's peaks against the real ones."""
    if not has_command("plan"):
        step.skip("plan of a distributed job", "memforensics plan")
        return
    if importlib.util.find_spec("torch") is None:  # the core's own tests run without torch
        step.checks.append(Check("plan of a distributed job", SKIPPED, "skipped: needs torch"))
        return
    total, capability = device_figures(ctx)
    step.figures["device"] = {"total_bytes": total, "capability": capability}
    rows: dict[str, dict[str, Any]] = {}
    for strategy in STRATEGIES:
        folder = ctx.work / "plan_distributed" / strategy
        folder.mkdir(parents=True, exist_ok=True)
        planned = run_planned(ctx, strategy, folder / "planned.json", total, capability)
        row: dict[str, Any] = {"planned": planned}
        rows[strategy] = row
        ran = "peak_allocated" in planned and planned.get("world_size") == 1
        step.check(
            f"{strategy}: plan ran the script at world size 1",
            ran,
            detail=f"peak allocated {planned.get('peak_allocated')}, reserved "
            f"{planned.get('peak_reserved')}, world size {planned.get('world_size')}",
        )
        if ctx.rig.name != "cuda":
            row["real"] = NO_CUDA
            step.checks.append(Check(f"{strategy}: plan against the real run", SKIPPED, NO_CUDA))
            continue
        real = run_real(ctx, strategy, folder / "real.json")
        row["real"] = real
        if not step.check(f"{strategy}: real run wrote its figures", "peak_allocated" in real):
            continue
        for key, tolerance in TOLERANCE.items():
            difference = relative(planned.get(key), real.get(key))
            row[f"{key}_relative_difference"] = difference
            step.check(
                f"{strategy}: {key} within {tolerance:.0%}",
                difference is not None and abs(difference) <= tolerance,
                expected=real.get(key),
                actual=planned.get(key),
                detail=f"real {real.get(key)}, planned {planned.get(key)}, difference "
                + (f"{difference:+.2%}" if difference is not None else "unknown"),
            )
    step.figures["rows"] = rows
