"""How big and how slow are dumps as ``max_entries`` and stack depth grow; what does gzip buy?

No targets: these figures are for choosing ``max_entries`` and for archiving. For each size a
sim snapshot holding that many trace entries is built (the 1,000,000-entry one takes a while:
the sim records every event in Python), then written with memforensics' atomic writer;
``gzip`` (level 6, what ``gzip`` on the command line uses) is timed on the written bytes.
``zstd`` is not measured: it is not in the standard library before Python 3.14, and
memforensics does not add a dependency for archiving.

    python benchmarks/bench_sizes.py [--json PATH] [--quick]
"""

from __future__ import annotations

import gzip
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import Figure, figure, parse_args, report
from _snapshots import sim_snapshot

from memforensics.capture import atomic


def row(events: int, depth: int, out: Path) -> list[Figure]:
    """Size and write time for one snapshot, and gzip's size and time ratios on it."""
    start = time.perf_counter()
    snapshot = sim_snapshot(events, depth)
    taken = time.perf_counter() - start
    paths = atomic.window_paths(out, f"e{events}-d{depth}", 0, os.getpid())
    start = time.perf_counter()
    size = atomic.write_dump(paths, snapshot, lambda n: {"bytes": n})
    written = time.perf_counter() - start
    del snapshot
    data = paths.snapshot.read_bytes()
    start = time.perf_counter()
    packed = gzip.compress(data, compresslevel=6)
    zipped = time.perf_counter() - start
    label = f"{events:,} entries, stack +{depth}"
    return [
        figure(
            f"dump size, {label}",
            "bytes per trace entry",
            float(size),
            float(events),
            "B",
            ratio=size / events,
            build_seconds=taken,
        ),
        figure(f"  dump time, {label}", "per trace entry (µs)", written, events / 1e6, "s"),
        figure(f"  gzip -6 size, {label}", "dump size", float(len(packed)), float(size), "B"),
        figure(f"  gzip -6 time, {label}", "dump time", zipped, written, "s"),
    ]


def main() -> int:
    """Every size, then every depth at 100,000 entries."""
    args = parse_args(__doc__)
    sizes = (10_000, 100_000) if args.quick else (10_000, 100_000, 1_000_000)
    rows: list[Figure] = []
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        for events in sizes:
            rows.extend(row(events, 0, Path(tmp)))
        for depth in (16, 64):
            rows.extend(row(100_000, depth, Path(tmp)))
    return report("snapshot size and dump time on the sim device (no targets)", rows, args.json)


if __name__ == "__main__":
    sys.exit(main())
