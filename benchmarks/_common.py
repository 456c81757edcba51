"""What every bench script shares: timing by median, the result table and ``--json`` output.

Absolute times depend on the machine (and on a shared machine, on the neighbours), so every
figure is a ratio against a reference measured in the same run, reference and subject
interleaved repeat by repeat, and the median of those per-repeat ratios is what is judged.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SHARED_DATA_ENV = "MEMFORENSICS_SHARED_DATA"


def shared_data() -> Path:
    """The folder of the shared real data (real snapshots, real workloads), found as the tests
    find it (``tests/shared_data.py``): ``$MEMFORENSICS_SHARED_DATA`` (relative to the checkout),
    else ``../shared/data`` beside the checkout. It may be absent."""
    checkout = Path(__file__).resolve().parents[1]
    named = os.environ.get(SHARED_DATA_ENV)
    return checkout / named if named else checkout.parent / "shared" / "data"


@dataclass
class Figure:
    """One row of a bench table: a figure against its reference, with an optional target."""

    name: str
    reference: str
    value: float
    reference_value: float
    unit: str
    ratio: float
    target: str = ""
    passed: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def peak_rss() -> int:
    """Peak resident bytes of this process (VmHWM: unlike ru_maxrss it is not inherited on exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def timed_in_process(run: Callable[[], object], repeats: int) -> dict[str, float]:
    """Run ``run`` ``repeats`` times here: the median seconds and how far the peak resident
    bytes grew (what one result costs; each is dropped before the next run)."""
    base = peak_rss()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
        del result
    return {"seconds": statistics.median(times), "peak_bytes": float(peak_rss() - base)}


def parse_args(doc: str | None, **extra: Any) -> argparse.Namespace:
    """``--json PATH`` and ``--quick`` for every script, plus script-specific options."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true", help="fewer repeats: a smoke run")
    for name, kwargs in extra.items():
        parser.add_argument(f"--{name.replace('_', '-')}", **kwargs)
    return parser.parse_args()


def ratio_of(
    subject: Callable[[], float], reference: Callable[[], float], repeats: int
) -> tuple[float, float, float]:
    """Median subject, median reference and median per-repeat ratio, measured interleaved."""
    subjects: list[float] = []
    references: list[float] = []
    ratios: list[float] = []
    for index in range(repeats):
        if index % 2:  # alternate the order so neither side always runs on a warmer cache
            s = subject()
            r = reference()
        else:
            r = reference()
            s = subject()
        subjects.append(s)
        references.append(r)
        ratios.append(s / r if r > 0 else float("inf"))
    return statistics.median(subjects), statistics.median(references), statistics.median(ratios)


def judge(ratio: float, target: str) -> bool | None:
    """``"<= 5"`` or ``">= 0.8"`` against ``ratio``; None when there is no target."""
    if not target:
        return None
    op, bound = target.split()
    return ratio <= float(bound) if op == "<=" else ratio >= float(bound)


def figure(
    name: str,
    reference: str,
    value: float,
    reference_value: float,
    unit: str,
    *,
    ratio: float | None = None,
    target: str = "",
    **extra: Any,
) -> Figure:
    """Build a row; ``ratio`` defaults to value / reference_value."""
    if ratio is None:
        ratio = value / reference_value if reference_value else float("inf")
    return Figure(
        name, reference, value, reference_value, unit, ratio, target, judge(ratio, target), extra
    )


def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1e3:.1f} ms" if value < 10 else f"{value:.1f} s"
    if unit == "ns":
        return f"{value:.0f} ns"
    if unit == "B":
        return f"{value / (1 << 20):.2f} MiB"
    if unit == "MB/s":
        return f"{value:.0f} MB/s"
    return f"{value:.3g} {unit}"


def report(title: str, figures: list[Figure], json_path: Path | None, **meta: Any) -> int:
    """Print the table, write JSON if asked; exit status 1 when a targeted figure failed."""
    rows = [("figure", "value", "reference", "ref value", "ratio", "target", "result")]
    for f in figures:
        result = "-" if f.passed is None else ("pass" if f.passed else "FAIL")
        rows.append(
            (
                f.name,
                _fmt(f.value, f.unit),
                f.reference,
                _fmt(f.reference_value, f.unit),
                f"{f.ratio:.3f}",
                f.target or "-",
                result,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    print(f"\n{title}")
    for index, row in enumerate(rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        if index == 0:
            print("  ".join("-" * width for width in widths))
    if json_path is not None:
        payload = {
            "title": title,
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "figures": [asdict(f) for f in figures],
            **meta,
        }
        json_path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    return 1 if any(f.passed is False for f in figures) else 0
