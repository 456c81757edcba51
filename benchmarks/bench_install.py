"""What does ``install()`` cost when ``out_dir`` already holds 100,000 files?

On a shared filesystem every rank of a 2,000-rank job calls ``install()`` against the same
``out_dir``. It must not look at other ranks' files: a rank finds its own stale temporary files
in its in-flight folder alone. The subject is ``install()`` + ``uninstall()`` (sim device) with
100,000 dump files from 1,000 ranks in 50 window folders already there; the reference is the
same call into an empty ``out_dir``. Target: no slower than 1.5x the empty case. For scale,
the last row times one walk of that tree (what a rank would pay if install() listed out_dir).

    python benchmarks/bench_install.py [--json PATH] [--quick]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from _common import Figure, figure, parse_args, ratio_of, report

import memforensics

RANKS = 1_000
WINDOWS = 50  # RANKS * WINDOWS * 2 files (pickle + sidecar) = 100,000


def populate(out: Path, windows: int, ranks: int) -> int:
    """Empty dump files as 1,000 ranks would leave them; the number of files written."""
    count = 0
    for window in range(windows):
        folder = out / f"steps{window * 4}-{window * 4 + 3}"
        folder.mkdir(parents=True)
        for rank in range(ranks):
            for suffix in (".pickle", ".json"):
                (folder / f"rank{rank}_pid{10_000 + rank}{suffix}").touch()
                count += 1
    return count


def timed_install(out: Path) -> float:
    """Seconds for install() + uninstall() of rank 7 into ``out`` (no steps: OOM capture)."""
    start = time.perf_counter()
    memforensics.install(device="sim", out_dir=str(out), rank=7)
    memforensics.uninstall()
    return time.perf_counter() - start


def walk(out: Path) -> float:
    """Seconds for one recursive listing of ``out`` looking for temp names (the old way)."""
    start = time.perf_counter()
    sum(1 for _ in out.rglob(".*.tmp-*"))
    return time.perf_counter() - start


def main() -> int:
    """Populate once, then interleave installs into the full and the empty folder."""
    args = parse_args(__doc__)
    repeats = 5 if args.quick else 21
    os.environ.pop("MEMFORENSICS_OUT_DIR", None)
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        full, empty = Path(tmp) / "full", Path(tmp) / "empty"
        start = time.perf_counter()
        files = populate(full, WINDOWS, RANKS)
        built = time.perf_counter() - start
        empty.mkdir()
        subject, reference, ratio = ratio_of(
            lambda: timed_install(full), lambda: timed_install(empty), repeats
        )
        walked = min(walk(full) for _ in range(3))
        rows: list[Figure] = [
            figure(
                f"install(), {files:,} files in out_dir",
                "install(), empty out_dir",
                subject,
                reference,
                "s",
                ratio=ratio,
                target="<= 1.5",
                files=files,
                populate_seconds=built,
            ),
            figure(
                "  one walk of that out_dir",
                "install(), empty out_dir",
                walked,
                reference,
                "s",
            ),
        ]
    return report("install() against a crowded out_dir (sim device)", rows, args.json)


if __name__ == "__main__":
    sys.exit(main())
