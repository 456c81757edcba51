"""``memforensics summary FILE...``: the verdict and the numbers behind it, for each dump."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memforensics._errors import SnapshotLoadError
from memforensics.analysis import Dump, explain, load_dump
from memforensics.analysis.schema import to_json
from memforensics.analysis.summary import SCHEMA, summary_text
from memforensics.cli._command import CommandError, skipped_lines
from memforensics.cli._explained import DEFAULT_TOP, Kept, keep, kept, lean, question
from memforensics.cli._flags import (
    DUMPS_AT_ONCE,
    add_analysis_flags,
    add_row_flags,
    byte_size,
    job_count,
    open_cache,
    row_limit,
    warn_cache,
)
from memforensics.cli._output import say, screen_width
from memforensics.cli._process import leave_at_exit
from memforensics.cli._progress import Progress


@dataclass(frozen=True)
class _Ask:
    """What to compute for each file (the arguments an answer depends on)."""

    json: bool
    top: int | None
    device: int | None
    requested: int | None
    several: bool
    verbose: bool = False
    fit: bool = True  # no --top or --all given: the site rows are cut to one screen
    device_memory: int | None = None

    def question(self) -> str:
        """The cache's name for this question about one file (whether it is one of several,
        and the rendering, are applied afresh)."""
        return question(self.top, self.device, self.requested, self.device_memory)


@dataclass(frozen=True)
class _Section:
    """One file's answer, or why it has none."""

    kept: Kept | None = None
    error: str | None = None


def _section(name: str, ask: _Ask, progress: Progress | None = None) -> _Section:
    """Load and explain one file (run in a worker process with ``--jobs``)."""
    loaded = _load(Path(name), progress)
    if isinstance(loaded, _Section):
        return loaded
    return _answer(loaded, ask, progress)


def _load(path: Path, progress: Progress | None) -> Dump | _Section:
    """The dump at ``path``, or a section saying why it could not be read."""
    try:
        return load_dump(path, reader=progress.reader(path) if progress is not None else None)
    except SnapshotLoadError as exc:
        return _Section(error=str(exc))


def _answer(dump: Dump, ask: _Ask, progress: Progress | None = None) -> _Section:
    """The story :func:`~memforensics.analysis.explain` tells of a loaded dump (the first
    device's summary holds the others'), and the dump's warnings for stderr."""
    try:
        summary = explain(
            dump,
            top=ask.top,
            requested=ask.requested,
            device_memory=ask.device_memory,
            device=ask.device,
            phase=progress.phase if progress is not None else None,
        )
        warnings = dump.warnings if ask.device is None else dump.on_device(ask.device).warnings
    except SnapshotLoadError as exc:
        return _Section(error=str(exc))
    return _Section(Kept(lean(summary), warnings))


class SummaryCommand:
    """Explain dumps: reserved/allocated bytes, the OOM, a verdict and the biggest sites.

    Several files (a glob that matched a retry loop's dumps) get one section each, and --json
    prints one object whose "dumps" lists them; one file prints one object. An unreadable file
    is reported on stderr and skipped: the exit status is 1 when any file was bad, 2 when none
    was readable.
    Several files are read by up to --jobs processes at once, printed in the order given.
    """

    name = "summary"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """FILE..., --json, --top, --all, --device, --requested, --device-memory, the cache,
        --quiet, --jobs."""
        parser.add_argument(
            "files", metavar="FILE", nargs="+", help="snapshots (.pickle, .pkl, or either .gz)"
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help='print one JSON object (several files: their objects under "dumps")',
        )
        add_row_flags(parser, default=DEFAULT_TOP)
        parser.add_argument(
            "--device",
            type=int,
            metavar="N",
            help="device to explain (default: the OOM's device, else each device with memory)",
        )
        parser.add_argument(
            "--requested",
            type=byte_size,
            metavar="SIZE",
            help="the failed request (2GiB), for a snapshot that records no OOM (its final state"
            " is judged); over a recorded OOM it replaces the recorded request (with a warning)",
        )
        parser.add_argument(
            "--device-memory",
            type=byte_size,
            metavar="SIZE",
            help="the device's memory (80GiB), for a dump that records none (a raw snapshot):"
            " with --requested, whether that request fits and what frees it",
        )
        parser.add_argument(
            "--verbose",
            action="store_true",
            help="print everything: every cause with its fixes, what evidence is missing, each"
            " moment's kinds and call tree, live bytes per step (default: one screen)",
        )
        add_analysis_flags(parser, jobs=DUMPS_AT_ONCE, look_ahead=True)  # the retired flags

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Answer each file (from the cache, in this process, or in a pool), print in order."""
        several = len(args.files) > 1
        top = row_limit(args, parser)
        fit = not args.all and top == DEFAULT_TOP
        ask = _Ask(
            args.json, top, args.device, args.requested, several, args.verbose, fit,
            args.device_memory,
        )  # fmt: skip
        jobs = job_count(args, parser)
        cache = open_cache(args)
        sections: dict[int, _Section] = {}
        progress = Progress(quiet=args.quiet)
        for index, name in enumerate(args.files):
            found = kept(cache, Path(name), ask.question())
            if found is not None:
                sections[index] = _Section(found)
        todo = [index for index in range(len(args.files)) if index not in sections]
        with progress.running():
            if len(todo) == 1 and not several:
                loaded = _load(Path(args.files[todo[0]]), progress)
                answered = _answer(loaded, ask, progress) if isinstance(loaded, Dump) else loaded
                sections[todo[0]] = answered
                leave_at_exit(loaded)
            elif jobs == 1 or len(todo) <= 1:
                for index in todo:
                    sections[index] = _section(args.files[index], ask, progress)
            else:
                from concurrent.futures import ProcessPoolExecutor  # several files only

                done = progress.files(len(todo))
                with ProcessPoolExecutor(max_workers=min(jobs, len(todo))) as pool:
                    futures = {i: pool.submit(_section, args.files[i], ask) for i in todo}
                    for index, future in futures.items():
                        sections[index] = future.result()
                        done()
        for index in todo:
            answer = sections[index].kept
            if answer is not None:
                keep(cache, Path(args.files[index]), ask.question(), answer)
        warn_cache(cache, self.name)
        return _print(args.files, [sections[i] for i in range(len(args.files))], ask)


def _print(files: list[str], sections: list[_Section], ask: _Ask) -> int:
    """Print each section in the order given; the exit status (as documented above)."""
    results: list[dict[str, Any]] = []
    shown = 0
    errors: list[str] = []
    width = screen_width()
    for section in sections:
        if section.kept is None:
            if not ask.several:
                raise CommandError(section.error or "no answer")
            errors.append(section.error or "no answer")
            continue
        summary = section.kept.summary
        prefix = f"{summary.file}: " if ask.several else ""
        for warning in section.kept.warnings:
            print(f"memforensics summary: warning: {prefix}{warning}", file=sys.stderr)
        if ask.json:
            results.append(to_json(summary))
        else:
            text = summary_text(
                summary, rows=ask.top, width=width, verbose=ask.verbose, fit=ask.fit
            )
            say(("\n" if shown else "") + text, width=width)
            shown += 1
    if ask.json and (results or not ask.several):
        body = {"dumps": results} if ask.several else results[0]
        print(json.dumps({"schema": SCHEMA, **body}, indent=2))
    for line in skipped_lines("summary", errors, label=""):
        print(line, file=sys.stderr)
    if len(errors) == len(files):
        raise CommandError(f"none of the {len(errors):,} files could be read")
    return 1 if errors else 0
