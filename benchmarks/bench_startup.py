"""How long does the console script take to answer, and what does a first ``summary`` cost
against the ``pickle.load`` it cannot avoid, both as a user runs them (whole processes)?

* start-up: ``memforensics --version``, ``memforensics summary --help`` and ``memforensics plan
  --help`` against ``python -c pass``, alternated, medians of ``--repeats`` (target: each within
  0.25 s);
* a plan's start: ``memforensics plan`` of a one-line script (``torch.zeros`` on ``cuda``, one
  process, no sharding, no compiling) against ``python -c "import torch"``, which every plan
  pays for, alternated (target: 1.5, the plan's own imports and its run of the script beside
  torch's);
* first look: ``memforensics summary FILE`` with an empty cache (interpreter, imports, reading,
  the analysis, the cache's hashing and writing, printing) against a process that only does
  ``pickle.load`` of the same file, alternated, on real-shaped dumps
  (``_real_shape.real_shaped``) of 300,000 and 1,000,000 trace entries (target: 1.3 each).

Every process runs as it would for a user of an installed package: with the bytecode caches that
``pip install`` writes. ``PYTHONDONTWRITEBYTECODE`` is dropped from the processes' environment
and the source is compiled once before timing (with it set and an editable install, each run
would compile our modules again: about 0.1 s that no installed copy pays).

    python benchmarks/bench_startup.py [--json PATH] [--quick] [--repeats N] [--sizes 300000,...]
"""

from __future__ import annotations

import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import Figure, figure, parse_args, report

HERE = Path(__file__).resolve().parent
BUDGET_S = 0.25
"""What a user waits for ``--version`` or a command's ``--help`` at most."""
LOAD = "import pickle, sys\nwith open(sys.argv[1], 'rb') as f: pickle.load(f)"
ONE_LINE = 'import torch\nx = torch.zeros(10, device="cuda")\n'
"""A script whose plan is all start-up: torch, the plan's own imports, the emulation."""
PLAN_RATIO = 1.5


def _console() -> list[str]:
    """The console script beside this interpreter (as a user runs it), else ``-m``."""
    script = shutil.which("memforensics", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "memforensics"]


_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def _seconds(command: list[str | Path]) -> float:
    """Wall time of one process (its output discarded; it must succeed)."""
    start = time.perf_counter()
    subprocess.run([str(part) for part in command], capture_output=True, check=True, env=_ENV)
    return time.perf_counter() - start


def _compile_package() -> None:
    """Write the bytecode caches of the installed memforensics, as ``pip install`` does."""
    import memforensics

    folder = str(Path(memforensics.__file__).parent)
    command = [sys.executable, "-m", "compileall", "-q", folder]
    subprocess.run(command, capture_output=True, check=True, env=_ENV)


def _alternated(commands: dict[str, list[str | Path]], repeats: int) -> dict[str, float]:
    """Median wall time of each command, run in turn repeat by repeat (order reversed on odd
    repeats so that no command always follows the same one)."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for index in range(repeats):
        order = list(commands) if index % 2 == 0 else list(reversed(commands))
        for name in order:
            times[name].append(_seconds(commands[name]))
    return {name: statistics.median(found) for name, found in times.items()}


def _first_summaries(path: Path, tmp: Path, repeats: int) -> tuple[float, float]:
    """Medians of ``pickle.load`` in its own process and of the first ``summary`` (each
    repeat with a new, empty cache), alternated."""
    loads, summaries = [], []
    for index in range(repeats):
        cache = tmp / f"cache-{path.stem}-{index}"
        load = [sys.executable, "-c", LOAD, path]
        summary = [*_console(), "summary", path, "--cache-dir", cache]
        if index % 2:
            summaries.append(_seconds(summary))
            loads.append(_seconds(load))
        else:
            loads.append(_seconds(load))
            summaries.append(_seconds(summary))
        shutil.rmtree(cache, ignore_errors=True)
    return statistics.median(summaries), statistics.median(loads)


def _plan_start(console: list[str], tmp: Path, repeats: int) -> Figure:
    """``plan`` of :data:`ONE_LINE` (no cache, its snapshot under ``tmp``) against a process
    that imports torch, alternated."""
    script = tmp / "one_line.py"
    script.write_text(ONE_LINE)
    plan = [*console, "plan", "--no-cache", "--out-dir", tmp / "plan", script]
    found = _alternated({"torch": [sys.executable, "-c", "import torch"], "plan": plan}, repeats)
    return figure("memforensics plan of a one-line script", 'python -c "import torch"',
                  found["plan"], found["torch"], "s", target=f"<= {PLAN_RATIO}")  # fmt: skip


def _build(path: Path, events: int) -> None:
    sys.path.insert(0, str(HERE))
    from _real_shape import real_shaped

    with path.open("wb") as handle:
        pickle.dump(real_shaped(events), handle, protocol=4)


def main() -> int:
    """Measure, print the table, write --json; exit 1 when a target is missed."""
    args = parse_args(
        __doc__,
        repeats=dict(type=int, default=None, help="processes of each kind (default 15 / 5)"),
        sizes=dict(default="300000,1000000", help="trace entries of each dump, comma-separated"),
    )
    os.environ.setdefault("MEMFORENSICS_LOG_LEVEL", "CRITICAL")
    _ENV.setdefault("MEMFORENSICS_LOG_LEVEL", "CRITICAL")
    _compile_package()
    repeats = args.repeats or (3 if args.quick else 15)
    console = _console()
    startup = _alternated(
        {
            "pass": [sys.executable, "-c", "pass"],
            "version": [*console, "--version"],
            "help": [*console, "summary", "--help"],
            "plan help": [*console, "plan", "--help"],
        },
        repeats,
    )
    figures = []
    labels = (("version", "--version"), ("help", "summary --help"), ("plan help", "plan --help"))
    for key, label in labels:
        figures.append(figure(f"memforensics {label}", "python -c pass", startup[key],
                              startup["pass"], "s"))  # fmt: skip
        figures.append(figure(f"memforensics {label}", f"{BUDGET_S} s", startup[key], BUDGET_S,
                              "s", target="<= 1"))  # fmt: skip
    sizes = [int(size) for size in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        figures.append(_plan_start(console, tmp, 3 if args.quick else max(3, repeats // 3)))
        for events in sizes[:1] if args.quick else sizes:
            path = tmp / f"real-{events}.pickle"
            _build(path, events)
            summary, load = _first_summaries(path, tmp, 3 if args.quick else max(3, repeats // 3))
            figures.append(figure(f"first summary, {events:,} entries", "pickle.load process",
                                  summary, load, "s", target="<= 1.3",
                                  file_bytes=path.stat().st_size))  # fmt: skip
            path.unlink()
    return report(
        "start-up and first look (whole processes)",
        figures,
        args.json,
        load_average=os.getloadavg(),
        repeats=repeats,
    )


if __name__ == "__main__":
    sys.exit(main())
