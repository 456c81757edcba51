"""What does a dump cost: the training thread during a window dump, disk throughput, OOM latency?

All on a sim snapshot of ``--events`` (200,000) trace entries:

* training-thread cost of a window dump: a fixed CPU-bound Python loop runs right after the step
  that completes a window; its extra wall time over the same loop alone (GIL contention
  included, and ``mf.dumps`` at the end, which waits for a background write and applies
  retention) against writing the same snapshot with plain ``pickle.dump``. Measured for the
  inline writer, a writer thread (for comparison; memforensics does not use one) and the
  forked writer. The snapshot comes from a backend that returns a prepared dict: taking it has
  to happen on the training thread for every writer, so it is measured apart (last rows).
* throughput of the atomic write (temporary name, fsync, rename, sidecar) against
  ``pickle.dump`` to a file in the same folder;
* OOM latency from the observer call to a complete file, with the prepared snapshot and on the
  sim device (where the sim builds the snapshot inside the callback).

    python benchmarks/bench_dump.py [--json PATH] [--quick] [--events N]
"""

from __future__ import annotations

import os

os.environ.setdefault("MEMFORENSICS_LOG_LEVEL", "CRITICAL")  # the OOM path logs an ERROR per dump

import contextlib
import pickle
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import Figure, figure, parse_args, ratio_of, report
from _snapshots import PrebuiltBackend, churn, sim_snapshot

import memforensics
from memforensics import MemoryForensics
from memforensics.backends import sim
from memforensics.capture import atomic
from memforensics.capture.config import build_config


def cpu_loop(n: int) -> int:
    """Pure-Python, CPU-bound, allocation-free: what a training thread's Python side looks like."""
    total = 0
    for i in range(n):
        total += i * i
    return total


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of ``fn`` takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def pickle_dump(snapshot: dict[str, Any], path: Path) -> Callable[[], float]:
    """The reference: plain ``pickle.dump`` (protocol 4) to ``path``, timed."""

    def run() -> float:
        path.unlink(missing_ok=True)  # a fresh file each time, as a dump is
        start = time.perf_counter()
        with path.open("wb") as handle:
            pickle.dump(snapshot, handle, protocol=atomic.PICKLE_PROTOCOL)
        return time.perf_counter() - start

    return run


def window_facade(snapshot: dict[str, Any], out: Path, writer: str) -> MemoryForensics:
    """A facade whose every step is a one-step window, dumping ``snapshot``."""
    config = build_config({"device": "sim", "steps": 1, "keep_last": 1, "oom": False})
    config = config.model_copy(update={"out_dir": str(out)})
    mf = MemoryForensics(config, backend=PrebuiltBackend(snapshot))
    mf._dumper.writer = "inline" if writer == "sync" else writer  # type: ignore[assignment]
    return mf


def training_thread_rows(
    snapshot: dict[str, Any], out: Path, repeats: int
) -> tuple[list[Figure], dict[str, Any]]:
    """Extra wall time of the CPU loop across a window dump, per writer, against pickle.dump."""
    reference = pickle_dump(snapshot, out / "reference.pickle")
    ref_time = min(reference() for _ in range(3))
    n = 200_000
    while timed(lambda: cpu_loop(n)) < max(0.3, 4 * ref_time):  # noqa: B023 - called at once
        n *= 2
    facades = {mode: window_facade(snapshot, out / mode, mode) for mode in ("sync", "fork")}

    def with_facade(mode: str, *, fresh: bool = False) -> Callable[[], float]:
        mf = facades[mode]

        def run() -> float:
            backend = mf.backend
            if fresh and isinstance(backend, PrebuiltBackend):
                backend.prepare(1)  # a private copy that the dump drops, built before the clock
            start = time.perf_counter()
            with mf.step():
                pass
            cpu_loop(n)
            _ = mf.dumps  # waits for a background write and applies retention
            return time.perf_counter() - start

        return run

    thread_paths = atomic.window_paths(out / "thread", "step0", 0, os.getpid())

    def with_thread() -> float:
        start = time.perf_counter()
        writer = threading.Thread(
            target=atomic.write_dump, args=(thread_paths, snapshot, lambda size: {"bytes": size})
        )
        writer.start()
        cpu_loop(n)
        writer.join()
        return time.perf_counter() - start

    subjects = {
        "sync": with_facade("sync"),
        "thread": with_thread,
        "fork": with_facade("fork"),
        "fork_fresh": with_facade("fork", fresh=True),
        "sync_fresh": with_facade("sync", fresh=True),
    }
    extras: dict[str, list[float]] = {mode: [] for mode in subjects}
    refs: list[float] = []
    ratios: dict[str, list[float]] = {mode: [] for mode in subjects}
    alone = timed(lambda: cpu_loop(n))
    for _ in range(repeats):
        ref = reference()
        refs.append(ref)
        for mode, run in subjects.items():
            # The loop alone just before and just after: their mean absorbs slow drift.
            before = timed(lambda: cpu_loop(n))
            subject = run()
            alone = (before + timed(lambda: cpu_loop(n))) / 2
            extras[mode].append(subject - alone)
            ratios[mode].append((subject - alone) / ref)
    for mf in facades.values():
        mf.close()

    ref_median = statistics.median(refs)
    rows = []
    for mode, label, target in (
        ("fork", "window dump, forked writer (default above its threshold)", "<= 0.25"),
        ("sync", "window dump, inline writer", ""),
        ("thread", "window dump, writer thread (not used)", ""),
        ("fork_fresh", "  forked writer, then freeing the snapshot (as in real use)", ""),
        ("sync_fresh", "  inline writer, then freeing the snapshot (as in real use)", ""),
    ):
        rows.append(
            figure(
                label,
                "pickle.dump of the same snapshot",
                statistics.median(extras[mode]),
                ref_median,
                "s",
                ratio=statistics.median(ratios[mode]),
                target=target,
                loop_seconds=alone,
            )
        )
    return rows, {"loop_iterations": n}


def throughput_row(snapshot: dict[str, Any], out: Path, repeats: int) -> Figure:
    """Throughput of write_dump (atomic, fsync, sidecar) relative to pickle.dump."""
    reference = pickle_dump(snapshot, out / "plain.pickle")
    paths = atomic.window_paths(out, "atomic", 0, os.getpid())

    def atomic_write() -> float:
        return timed(lambda: atomic.write_dump(paths, snapshot, lambda size: {"bytes": size}))

    value, ref, ratio = ratio_of(atomic_write, reference, repeats)
    size = paths.snapshot.stat().st_size
    return figure(
        "dump throughput, atomic write with fsync",
        "pickle.dump to the same disk",
        size / value / 1e6,
        size / ref / 1e6,
        "MB/s",
        ratio=1 / ratio,
        target=">= 0.8",
        snapshot_bytes=size,
    )


def oom_rows(snapshot: dict[str, Any], events: int, out: Path, repeats: int) -> list[Figure]:
    """Observer call to complete file: prepared snapshot, then the sim building its own."""
    config = build_config({"device": "sim", "oom": True, "max_oom_snapshots": 10**6})
    backend = PrebuiltBackend(snapshot)
    mf = MemoryForensics(config.model_copy(update={"out_dir": str(out / "a")}), backend=backend)
    observer = backend.observers[0]
    reference = pickle_dump(snapshot, out / "oom-reference.pickle")
    value, ref, ratio = ratio_of(
        lambda: timed(lambda: observer(0, 2 << 30, 16 << 30, 1 << 30)), reference, repeats
    )
    rows = [
        figure(
            "OOM latency to complete file (prepared snapshot)",
            "pickle.dump of the same snapshot",
            value,
            ref,
            "s",
            ratio=ratio,
            target="<= 1.2",
        )
    ]
    mf.close()

    device = sim.reset_device(1 << 30)  # before install: the observer attaches to this device
    memforensics.install(
        device="sim",
        out_dir=str(out / "b"),
        oom_history="all",
        max_entries=events,
        max_oom_snapshots=10**6,
    )
    churn(device, events + 200)  # after install: installing clears the history

    def oom() -> float:
        start = time.perf_counter()
        with contextlib.suppress(device.OutOfMemoryError):
            device.empty(1 << 42)
        return time.perf_counter() - start

    sim_ref_path = out / "sim-reference.pickle"

    def snapshot_and_pickle() -> float:
        start = time.perf_counter()
        taken = device.snapshot()
        with sim_ref_path.open("wb") as handle:
            pickle.dump(taken, handle, protocol=atomic.PICKLE_PROTOCOL)
        return time.perf_counter() - start

    value, ref, ratio = ratio_of(oom, snapshot_and_pickle, repeats)
    taken = device.snapshot()
    snap_time = min(timed(device.snapshot) for _ in range(3))
    dump_time = min(pickle_dump(taken, sim_ref_path)() for _ in range(3))
    memforensics.uninstall()
    rows.append(
        figure(
            "OOM latency to complete file (sim builds its snapshot)",
            "sim snapshot() + pickle.dump",
            value,
            ref,
            "s",
            ratio=ratio,
            target="<= 1.2",
        )
    )
    rows.append(
        figure(
            "  same, against pickle.dump alone",
            "pickle.dump of the same snapshot",
            value,
            dump_time,
            "s",
        )
    )
    rows.append(
        figure(
            "  sim snapshot() alone (on the training thread)",
            "pickle.dump of the same snapshot",
            snap_time,
            dump_time,
            "s",
        )
    )
    return rows


def main() -> int:
    """Build the snapshot, measure every row, print the table."""
    args = parse_args(__doc__, events={"type": int, "default": 200_000})
    repeats = 3 if args.quick else 9
    snapshot = sim_snapshot(args.events)
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        out = Path(tmp)
        rows, meta = training_thread_rows(snapshot, out, repeats)
        rows.append(throughput_row(snapshot, out, repeats))
        rows.extend(oom_rows(snapshot, args.events, out, repeats))
    return report(
        f"dump costs, sim snapshot of {args.events:,} trace entries (medians of {repeats})",
        rows,
        args.json,
        events=args.events,
        repeats=repeats,
        **meta,
    )


if __name__ == "__main__":
    sys.exit(main())
