"""How much more than unpickling does ``memforensics summary`` cost on a 1,000,000-event trace?

Builds a synthetic snapshot file (``memforensics.testing.SnapshotBuilder``: a few hundred
segments, ``--events`` trace entries with 4-frame stacks, an OOM at the end), then times, in
fresh interpreters, plain ``pickle.load`` of the file and ``load_dump`` + ``explain`` of the
same file (what ``summary`` runs; the file lies in no run folder, so nothing beside it is read),
median of ``--repeats``, and their peak memory. Reports time and memory ratios.

    python benchmarks/bench_analysis.py [--json PATH] [--events N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import timed_in_process


def build(path: Path, events: int) -> None:
    """Write the benchmark snapshot (built here, then dropped before measuring)."""
    from memforensics.testing import Block, MiB, SnapshotBuilder, write_dump

    builder = SnapshotBuilder()
    for index in range(400):
        builder.segment(Block(MiB(20), step=index % 8), Block(MiB(2), state="inactive", site=None))
    builder.churn(events, size=4096, step=3)
    builder.oom(requested=MiB(64), device_free=MiB(10))
    write_dump(path, builder.build())


def measure(path: Path, mode: str, repeats: int) -> dict[str, float]:
    """Child process: time ``mode`` ``repeats`` times; report the median and peak RSS growth."""
    from memforensics.analysis import explain, load_dump

    def run() -> object:
        if mode == "pickle":
            with path.open("rb") as handle:
                return pickle.load(handle)
        return explain(load_dump(path))

    return timed_in_process(run, repeats)


def _child(path: Path, mode: str, count: int) -> dict[str, float]:
    """Run one step in a fresh interpreter, so no step inherits another's memory.

    ``count`` is the number of events for ``build`` and of repeats for the measurements.
    """
    command = [sys.executable, __file__, "--measure", mode, "--file", str(path)]
    command += ["--repeats", str(count), "--events", str(count)]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    figures: dict[str, float] = json.loads(out)
    return figures


def main() -> int:
    """Build, measure both ways in fresh interpreters, print a table, write --json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--measure", choices=["build", "pickle", "summary"], help=argparse.SUPPRESS)
    parser.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure == "build":
        build(args.file, args.events)
        print("{}")
        return 0
    if args.measure:
        print(json.dumps(measure(args.file, args.measure, args.repeats)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.pickle"
        _child(path, "build", args.events)
        size = path.stat().st_size
        plain = _child(path, "pickle", args.repeats)
        summary = _child(path, "summary", args.repeats)
    figures = {
        "events": args.events,
        "file_bytes": size,
        "pickle_load_s": plain["seconds"],
        "summary_s": summary["seconds"],
        "time_ratio": summary["seconds"] / plain["seconds"],
        "pickle_peak_over_file": plain["peak_bytes"] / size,
        "summary_peak_over_file": summary["peak_bytes"] / size,
    }
    print(f"{'events':<28}{args.events:>14,}")
    print(f"{'file size':<28}{size / 2**20:>11.1f} MiB")
    print(f"{'pickle.load (median)':<28}{plain['seconds']:>12.3f} s")
    print(f"{'summary (median)':<28}{summary['seconds']:>12.3f} s")
    print(f"{'summary / pickle.load':<28}{figures['time_ratio']:>12.2f} x   (aim <= 1.5)")
    print(f"{'peak memory / file, pickle':<28}{figures['pickle_peak_over_file']:>12.2f} x")
    print(f"{'peak memory / file, summary':<28}{figures['summary_peak_over_file']:>12.2f} x")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
