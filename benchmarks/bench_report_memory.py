"""Do ``summary``, ``leaks`` and ``report`` stay within 1.5x the memory ``pickle.load`` needs?

On real-shaped dumps (``_real_shape``: deep stacks, shared frame dicts, the real entry mix) of
``--events`` trace entries, each mode runs in a fresh interpreter that first imports the
analysis package, then records its resident memory, does the work, and reports the growth of
its peak resident memory. ``pickle.load`` of the same file is the reference. The real
snapshots (``_common.shared_data()``) are measured the same way when present.

Every structure the analysis adds is linear in the trace (one small object per allocation, one
pointer per entry) or bounded (timeline buckets, layouts, tables), so the ratio measured here
holds for a 1 GB dump of the same shape; ``--events 4000000`` builds one of about 1 GB when
there is the time and memory to check that directly.

    python benchmarks/bench_report_memory.py [--json PATH] [--quick] [--events N]
"""

from __future__ import annotations

import os

os.environ.setdefault("MEMFORENSICS_LOG_LEVEL", "CRITICAL")

import json
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import figure, parse_args, report, shared_data

HERE = Path(__file__).resolve().parent
REAL = shared_data() / "real-snapshots"
MODES = ("pickle", "summary", "leaks", "report")


def _status(field: str) -> int:
    """``VmRSS`` / ``VmHWM`` (peak) of this process, in bytes."""
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    """Reset VmHWM to the current RSS, so the peak is this work's, not the imports'."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
        handle.write("5")


def child(mode: str, path: Path) -> tuple[int, int]:
    """Peak resident growth of ``mode`` on ``path`` (bytes) and the page size (report only)."""
    from memforensics.analysis import find_leaks, load_dump, summarize
    from memforensics.analysis.report import ReportBuilder
    from memforensics.analysis.schema import to_json

    _reset_peak()
    before = _status("VmRSS")
    if mode == "pickle":
        with path.open("rb") as handle:
            kept: object = pickle.load(handle)
    elif mode == "summary":
        kept = to_json(summarize(load_dump(path)))
    elif mode == "leaks":
        kept = find_leaks(path.parent.parent)
    else:
        builder = ReportBuilder(folder=True)
        builder.add(load_dump(path))
        kept = builder.html()
    peak = _status("VmHWM")
    page = len(kept.encode()) if isinstance(kept, str) else 0
    del kept
    return max(peak - before, 1), page


def run_child(mode: str, path: Path) -> tuple[int, int]:
    """``child`` in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--file", str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    return int(found["peak"]), int(found["page"])


def main() -> int:
    """Build a real-shaped dump, measure each mode against ``pickle.load``."""
    args = parse_args(
        __doc__,
        child={"default": None},
        file={"default": None},
        events={"type": int, "default": 200_000},
    )
    if args.child:
        peak, page = child(args.child, Path(args.file))
        print(json.dumps({"peak": peak, "page": page}))
        return 0
    events = 60_000 if args.quick else args.events
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        from _real_shape import real_shaped

        path = Path(tmp) / "run" / "steps0-3" / "rank0_pid1.pickle"  # a window, for leaks
        path.parent.mkdir(parents=True)
        with path.open("wb") as handle:
            pickle.dump(real_shaped(events), handle, protocol=4)
        size = path.stat().st_size
        rows += _rows(f"real-shaped, {events:,} entries, {size / (1 << 20):.0f} MiB", path, size)
    for real in sorted(REAL.glob("*.pickle")) if REAL.is_dir() and not args.quick else []:
        rows += _rows(real.name, real, real.stat().st_size, modes=("pickle", "summary", "report"))
    return report("memory of the analysis over pickle.load (peak RSS growth)", rows, args.json)


def _rows(label: str, path: Path, size: int, modes: tuple[str, ...] = MODES) -> list[object]:
    """pickle.load against the file, each mode against pickle.load, the page against 10 MB.

    Below 8 MiB the analysis's fixed costs (a 4,096-bucket timeline, the page's script)
    outweigh the dump, so small files get figures but no target.
    """
    measured = {mode: run_child(mode, path) for mode in modes}
    peaks = {mode: value[0] for mode, value in measured.items()}
    base = peaks["pickle"]
    target = "<= 1.5" if size >= 8 << 20 else ""
    found = [
        figure(
            f"{label}: pickle.load",
            "file size",
            float(base),
            float(size),
            "B",
            ratio=base / size,
            unit_of_ratio="x file",
        )
    ]
    for mode in modes[1:]:
        found.append(
            figure(
                f"  {mode}",
                "pickle.load of the same file",
                float(peaks[mode]),
                float(base),
                "B",
                target=target,
            )
        )
    if "report" in measured:
        page = measured["report"][1]
        found.append(
            figure(
                "  report page size",
                "10 MB",
                float(page),
                10e6,
                "B",
                target="<= 1" if target else "",
            )
        )
    return found


if __name__ == "__main__":
    sys.exit(main())
