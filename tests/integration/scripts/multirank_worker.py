"""One rank of a ``torchrun`` job on the sim device: ``multirank_worker.py RESULTS_DIR``.

Configuration comes from ``MEMFORENSICS_*`` variables, as a launcher would set them. Two phases:

1. Steps 0..world+2 with a barrier before each, so step order is the same on every rank; rank r
   runs out of memory at step 2 + r and carries on (the OOM is caught, as a skip-batch loop does).
2. Re-installed with ``ranks="all"`` into ``$PHASE2_DIR``: the other ranks wait in a barrier
   while rank 1 alone runs out of memory; its dump must land without any of them taking part.

Each rank writes ``RESULTS_DIR/rank<r>.json`` with what it saw.

With ``MULTIRANK_SCENARIO=leak`` it runs the journal scenario instead (``leak_main``): every
rank steps in lockstep, rank ``world - 3`` keeps 2 MiB a step until the sim device runs out,
and rank 2 fails later on one oversized request; the journals tell the story.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch.distributed as dist

import memforensics
from memforensics.backends.sim import SimOutOfMemoryError, reset_device

MiB = 1 << 20
LONE_RANK = 1
COLLECTIVES = (
    "barrier",
    "monitored_barrier",
    "all_reduce",
    "all_gather",
    "all_gather_object",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "reduce",
    "scatter",
    "send",
    "recv",
)


def _recorder(name: str, original: Callable[..., Any], called: list[str]) -> Callable[..., Any]:
    def record(*args: Any, **kwargs: Any) -> Any:
        called.append(name)
        return original(*args, **kwargs)

    return record


def main(results: Path) -> int:
    """Run both phases and report."""
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = reset_device(total_bytes=64 * MiB)
    mf = memforensics.install()  # everything from MEMFORENSICS_* variables
    report: dict[str, object] = {"rank": rank, "pid": os.getpid(), "capturing": mf.capturing}
    same_error = []
    for step in range(world + 3):
        dist.barrier()
        raised: list[BaseException] = []
        try:
            with mf.step(step):
                device.empty(MiB).free()
                if step == 2 + rank:
                    try:
                        device.empty(1 << 30)
                    except SimOutOfMemoryError as exc:
                        raised.append(exc)
                        raise
        except SimOutOfMemoryError as exc:
            same_error.append(exc is raised[0])
    mf.close()
    report["phase1_ooms"] = same_error
    report["phase1_dumps"] = [str(p) for p in mf.dumps]

    dist.barrier()
    lone = memforensics.install(ranks="all", out_dir=os.environ["PHASE2_DIR"], steps=None)
    if rank == LONE_RANK:
        called: list[str] = []
        originals = {name: getattr(dist, name) for name in COLLECTIVES}
        for name, original in originals.items():  # record any collective the OOM path makes
            setattr(dist, name, _recorder(name, original, called))
        started = time.monotonic()
        try:
            device.empty(1 << 30)
        except SimOutOfMemoryError:
            report["lone_oom_seconds"] = time.monotonic() - started
        finally:
            for name, original in originals.items():
                setattr(dist, name, original)
        report["collectives_in_oom_path"] = called
        report["phase2_dumps"] = [str(p) for p in lone.dumps]
    dist.barrier()  # the others waited here the whole time; the group timeout bounds it
    lone.close()
    dist.destroy_process_group()
    (results / f"rank{rank}.json").write_text(json.dumps(report))
    return 0


LEAK_STEP_BYTES = 2 * MiB
LATE_RANK = 2
LATE_STEP = 36  # the leaking rank has run out of 64 MiB by step 31
STEPS = 40


def leak_main(results: Path) -> int:
    """The journal scenario: one leaking rank fails first, rank 2 fails at ``LATE_STEP``."""
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    leak_rank = world - 3
    device = reset_device(total_bytes=64 * MiB)
    mf = memforensics.install()  # everything from MEMFORENSICS_* variables
    report: dict[str, object] = {"rank": rank, "pid": os.getpid(), "oom_step": None}
    held: list[object] = []
    failed_at: int | None = None
    for step in range(STEPS):
        dist.barrier()
        if failed_at is not None and rank == leak_rank:
            continue  # a real rank would be dead; this one only keeps the barriers company
        try:
            with mf.step(step):
                device.empty(MiB).free()
                if rank == leak_rank:
                    held.append(device.empty(LEAK_STEP_BYTES))
                if rank == LATE_RANK and step == LATE_STEP:
                    device.empty(1 << 30)
        except SimOutOfMemoryError:
            failed_at = step
            report["oom_step"] = step
            report["leaked_bytes"] = len(held) * LEAK_STEP_BYTES
    mf.close()
    dist.barrier()
    dist.destroy_process_group()
    (results / f"rank{rank}.json").write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    if os.environ.get("MULTIRANK_SCENARIO") == "leak":
        sys.exit(leak_main(Path(sys.argv[1])))
    sys.exit(main(Path(sys.argv[1])))
