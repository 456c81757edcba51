"""A first look and a second look at 1,000,000-entry dumps.

Builds two dumps: a real-shaped one (``_real_shape.real_shaped``: each entry with its own frames
list over shared frame dicts, as PyTorch writes them) and one whose trace the allocator model
itself wrote (``bench_replay.build``, so every free matches an allocation and replay runs it
end to end). Then, in fresh interpreters, median of ``--repeats``:

* ``summary / pickle.load``: ``load_dump`` + ``summarize`` of the real-shaped dump against plain
  ``pickle.load`` of the same file (target 1.3), and their peak memory (target 1.5); the same
  on a dump of as many entries whose stacks are short (8 to 40 frames, ``short``: target 1.3);
* ``replay / pickle.load``: ``load_dump`` + ``replay`` of the model-written dump with the
  CLI's default ``--jobs`` (the CPU count) (target 2.5);
* ``cli first summary / pickle.load``: the console script's first ``summary --json`` (interpreter,
  imports, the cache's hashing and the printing included; reported, no target);
* ``second look / first summary``: the console script's ``summary --json`` on the real-shaped
  dump run again with the cache warm, against its first run with the cache empty (target 0.25);

    python benchmarks/bench_cache.py [--json PATH] [--events N] [--repeats R]
        [--only replay|summary]

``--only replay`` measures the replay figure alone (``--model FILE``: on that dump, not a new one);
``--only summary`` the two summary ratios alone.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import timed_in_process

HERE = Path(__file__).resolve().parent
TARGETS = {
    "summary_over_pickle": 1.3,
    "short_summary_over_pickle": 1.3,
    "summary_peak_over_pickle_peak": 1.5,
    "replay_over_pickle": 2.5,
    "second_look_over_first_summary": 0.25,
}


def build(kind: str, path: Path, events: int) -> None:
    """Write the real-shaped (``real``), the short-stack (``short``) or the model-written
    (``model``) dump."""
    sys.path.insert(0, str(HERE))
    if kind in ("real", "short"):
        from _real_shape import SHORT, real_shaped

        depths = SHORT if kind == "short" else None
        with path.open("wb") as handle:
            pickle.dump(real_shaped(events, depths=depths), handle, protocol=4)
    else:
        from bench_replay import build as model_build

        model_build(path, events)


def measure(path: Path, mode: str, repeats: int) -> dict[str, float]:
    """Child process: time ``mode`` ``repeats`` times; the median and the peak RSS growth."""
    from memforensics.analysis import load_dump, replay_dump, summarize

    def run() -> object:
        if mode == "pickle":
            with path.open("rb") as handle:
                return pickle.load(handle)
        if mode == "summary":  # the dump is freed after the clock stops, as pickle's result is
            dump = load_dump(path)
            return dump, summarize(dump)
        dump = load_dump(path)  # kept past the clock too
        return dump, replay_dump(dump, jobs=os.cpu_count() or 1)  # the CLI's default --jobs

    return timed_in_process(run, repeats)


def _child(*args: str | Path) -> dict[str, float]:
    command = [sys.executable, __file__, *map(str, args)]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    figures: dict[str, float] = json.loads(out)
    return figures


def _interleaved(path: Path, mode: str, repeats: int) -> tuple[dict[str, float], dict[str, float]]:
    """``pickle.load`` and ``mode`` of ``path``, alternated repeat by repeat, each in a fresh
    interpreter (a busy moment of the shared machine hits both alike); medians."""
    runs: dict[str, list[dict[str, float]]] = {"pickle": [], mode: []}
    for _ in range(repeats):
        for name, found in runs.items():
            found.append(_child("--measure", name, "--file", path, "--repeats", "1"))
    medians = {
        name: {key: statistics.median(run[key] for run in found) for key in found[0]}
        for name, found in runs.items()
    }
    return medians["pickle"], medians[mode]


def _cli_seconds(*args: str | Path) -> float:
    """Wall time of one run of the console script (its output discarded)."""
    script = shutil.which("memforensics", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "memforensics"]
    start = time.perf_counter()
    subprocess.run([*command, *map(str, args)], capture_output=True, check=True)
    return time.perf_counter() - start


def _looks(path: Path, tmp: Path, repeats: int, then: str) -> tuple[float, float]:
    """The first ``summary --json`` (empty cache) and the command ``then`` right after it,
    each round with a fresh cache; medians."""
    first, after = [], []
    for round_ in range(repeats):
        cache = tmp / f"cache-{path.stem}-{round_}"
        first.append(_cli_seconds("summary", "--json", path, "--cache-dir", cache))
        after.append(_cli_seconds(then, "--json", path, "--cache-dir", cache))
    return statistics.median(first), statistics.median(after)


def _replay_only(args: argparse.Namespace) -> int:
    """The replay figure alone, on ``--model`` or on a model-written dump built here."""
    with tempfile.TemporaryDirectory() as name:
        model = args.model or Path(name) / "model.pickle"
        if args.model is None:
            _child("--build", "model", "--file", model, "--events", args.events)
        plain, replayed = _interleaved(model, "replay", args.repeats)
    ratio = replayed["seconds"] / plain["seconds"]
    figures = {"pickle_load_s": plain["seconds"], "replay_s": replayed["seconds"],
               "replay_over_pickle": ratio}  # fmt: skip
    for key, value in figures.items():
        print(f"{key:<42}{value:>12.3f}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 1 if ratio > TARGETS["replay_over_pickle"] else 0


def _summary_only(args: argparse.Namespace) -> int:
    """The two summary ratios alone: the real-shaped and the short-stack dump."""
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as name:
        for kind, key in (("real", "summary_over_pickle"), ("short", "short_summary_over_pickle")):
            path = Path(name) / f"{kind}.pickle"
            _child("--build", kind, "--file", path, "--events", args.events)
            plain, summary = _interleaved(path, "summary", args.repeats)
            figures[f"{kind}_pickle_load_s"] = plain["seconds"]
            figures[f"{kind}_summary_s"] = summary["seconds"]
            figures[key] = summary["seconds"] / plain["seconds"]
    for key, value in figures.items():
        target = f"   (target <= {TARGETS[key]})" if key in TARGETS else ""
        print(f"{key:<42}{value:>12.3f}{target}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    missed = [key for key in figures if key in TARGETS and figures[key] > TARGETS[key]]
    return 1 if missed else 0


def main() -> int:
    """Build, measure, print a table, write --json; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--only", choices=["replay", "summary"], help="measure only this figure (or these)"
    )
    parser.add_argument("--model", type=Path, help="with --only replay: this model-written dump")
    parser.add_argument("--build", choices=["real", "short", "model"], help=argparse.SUPPRESS)
    parser.add_argument(
        "--measure", choices=["pickle", "summary", "replay"], help=argparse.SUPPRESS
    )
    parser.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        build(args.build, args.file, args.events)
        print("{}")
        return 0
    if args.measure:
        print(json.dumps(measure(args.file, args.measure, args.repeats)))
        return 0
    if args.only == "replay":
        return _replay_only(args)
    if args.only == "summary":
        return _summary_only(args)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        real, model = tmp / "real.pickle", tmp / "model.pickle"
        short = tmp / "short.pickle"
        _child("--build", "real", "--file", real, "--events", args.events)
        _child("--build", "short", "--file", short, "--events", args.events)
        _child("--build", "model", "--file", model, "--events", args.events)
        plain, summary = _interleaved(real, "summary", args.repeats)
        plain_short, summary_short = _interleaved(short, "summary", args.repeats)
        plain_model, replayed = _interleaved(model, "replay", args.repeats)
        first, second = _looks(real, tmp, args.repeats, "summary")
    figures = {
        "events": args.events,
        "pickle_load_s": plain["seconds"],
        "summary_s": summary["seconds"],
        "summary_over_pickle": summary["seconds"] / plain["seconds"],
        "summary_peak_over_pickle_peak": summary["peak_bytes"] / plain["peak_bytes"],
        "short_summary_over_pickle": summary_short["seconds"] / plain_short["seconds"],
        "replay_over_pickle": replayed["seconds"] / plain_model["seconds"],
        "cli_first_summary_s": first,
        "cli_first_summary_over_pickle": first / plain["seconds"],
        "cli_second_summary_s": second,
        "second_look_over_first_summary": second / first,
    }
    missed = [key for key, target in TARGETS.items() if figures[key] > target]
    for key, value in figures.items():
        target = f"   (target <= {TARGETS[key]})" if key in TARGETS else ""
        print(f"{key:<42}{value:>12.3f}{target}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
