"""How much memory does memforensics hold between dumps?

Two fresh interpreters run the same sim training loop (``--steps`` steps of allocation churn,
history recorded with the same ``max_entries``, a snapshot taken and pickled every ``--every``
steps). The reference does it by hand (``pickle.dump(device.snapshot(), file)``); the subject
lets ``memforensics.install(steps=...)`` do it (forked writer included). Each reports its
resident memory after the last dump landed and a ``gc.collect()``; the difference is what the
library holds. The history ring buffer is the allocator's (on CUDA it lives in the C++
allocator) and is the same on both sides: its size is in bench_sizes.py. Also reported, without
a target: what ``import memforensics`` itself adds to a bare interpreter.

    python benchmarks/bench_memory.py [--json PATH] [--quick]
"""

from __future__ import annotations

import os

os.environ.setdefault("MEMFORENSICS_LOG_LEVEL", "CRITICAL")

import gc
import json
import statistics
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

from _common import figure, parse_args, report

EVENTS = 100_000


def rss() -> int:
    """Resident bytes of this process now (Python objects alone under ``--traced``)."""
    if tracemalloc.is_tracing():
        return tracemalloc.get_traced_memory()[0]
    with open("/proc/self/statm", "rb") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(mode: str, steps: int, every: int) -> int:
    """Run one side of the comparison; return its resident bytes after the last dump."""
    if mode == "bare":
        return rss()
    if mode == "import":
        import memforensics

        return rss()
    import pickle

    import memforensics
    from memforensics.backends import sim

    device = sim.reset_device(1 << 34)
    per_step = EVENTS // every // 2
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as out:
        mf = None
        if mode == "library":
            mf = memforensics.install(
                device="sim", steps=every, max_entries=EVENTS, out_dir=out, oom=False
            )
        else:
            device.record_memory_history("all", max_entries=EVENTS)
        for step in range(steps):
            if mf is not None:
                with mf.step(step):
                    _churn(device, per_step)
            else:  # as the library does: clear when a window opens, dump when it ends
                if step % every == 0:
                    device.record_memory_history("all", max_entries=EVENTS, clear_history=True)
                _churn(device, per_step)
                if (step + 1) % every == 0:
                    with open(os.path.join(out, f"{step}.pickle"), "wb") as handle:
                        pickle.dump(device.snapshot(), handle, protocol=4)
        if mf is not None:
            _ = mf.dumps  # the last window has landed
        gc.collect()
        held = rss()
        if mf is not None:
            mf.close()
    return held


def _churn(device: object, allocations: int) -> None:
    from memforensics.backends.sim import SimDevice

    assert isinstance(device, SimDevice)
    live = []
    for _ in range(allocations):
        live.append(device.empty(4096))
        if len(live) > 32:
            live.pop(0).free()
    for tensor in live:
        tensor.free()


def run_child(mode: str, steps: int, every: int, *, traced: bool = False) -> int:
    """Resident bytes (or traced Python bytes) reported by a fresh interpreter running ``mode``."""
    command = [sys.executable, __file__, "--child", mode, "--steps", str(steps)]
    command += ["--every", str(every)]
    if traced:
        command[1:1] = ["-X", "tracemalloc"]
    out = subprocess.run(
        command,
        check=True,
        capture_output=True,
        text=True,
    )
    return int(json.loads(out.stdout.strip().splitlines()[-1])["rss"])


def main() -> int:
    """Pairs of fresh interpreters, interleaved; the median difference is the figure."""
    args = parse_args(
        __doc__,
        child={"default": None},
        steps={"type": int, "default": 12},
        every={"type": int, "default": 4},
    )
    if args.child:
        print(json.dumps({"rss": child(args.child, args.steps, args.every)}))
        return 0
    repeats = 3 if args.quick else 5
    held, by_hand, bare, imported = [], [], [], []
    for _ in range(repeats):
        by_hand.append(run_child("manual", args.steps, args.every))
        held.append(run_child("library", args.steps, args.every))
        bare.append(run_child("bare", 0, 1))
        imported.append(run_child("import", 0, 1))
    diffs = [a - b for a, b in zip(held, by_hand, strict=True)]
    traced_by_hand = run_child("manual", args.steps, args.every, traced=True)
    traced_held = run_child("library", args.steps, args.every, traced=True)
    rows = [
        figure(
            "memory held between dumps (RSS over the hand-written loop)",
            "RSS of the same loop dumping by hand",
            float(statistics.median(diffs)),
            float(statistics.median(by_hand)),
            "B",
            ratio=statistics.median(diffs) / (1 << 20),
            target="<= 1",
            unit_of_ratio="MiB",
        ),
        figure(
            "  Python objects held (tracemalloc, same comparison)",
            "traced bytes of the same loop dumping by hand",
            float(traced_held - traced_by_hand),
            float(traced_by_hand),
            "B",
            ratio=(traced_held - traced_by_hand) / (1 << 20),
            unit_of_ratio="MiB",
        ),
        figure(
            "  import memforensics (once, not per dump)",
            "bare interpreter RSS",
            float(statistics.median(imported) - statistics.median(bare)),
            float(statistics.median(bare)),
            "B",
            ratio=(statistics.median(imported) - statistics.median(bare)) / (1 << 20),
            unit_of_ratio="MiB",
        ),
    ]
    return report(
        f"memory held between dumps (MiB; {EVENTS:,}-entry history, window of {args.every} "
        f"steps, {args.steps} steps)",
        rows,
        args.json,
        repeats=repeats,
    )


if __name__ == "__main__":
    sys.exit(main())
