"""``memforensics summary FILE...``: the verdict and the numbers behind it, for each dump."""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from memforensics._errors import SnapshotLoadError
from memforensics.analysis import Dump, load_dump, summarize
from memforensics.analysis.schema import document
from memforensics.analysis.summary import SCHEMA, summary_text
from memforensics.cli._analysis_flags import (
    DUMPS_AT_ONCE,
    add_analysis_flags,
    job_count,
    open_cache,
    warn_cache,
)
from memforensics.cli._cache import ResultCache
from memforensics.cli._command import CommandError
from memforensics.cli._progress import Progress
from memforensics.cli._rows import add_row_flags, row_limit
from memforensics.cli._sizes import byte_size


@dataclass(frozen=True)
class _Ask:
    """What to compute for each file (the arguments an answer depends on)."""

    json: bool
    top: int | None
    device: int | None
    requested: int | None
    several: bool

    def question(self, name: str, *, as_json: bool | None = None) -> str:
        """The cache's name for this question about the file named ``name`` as given (the
        answer prints it); ``as_json``: in the other rendering, which one computation answers
        too."""
        rendering = self.json if as_json is None else as_json
        asked = [name, rendering, self.top, self.device, self.requested, self.several]
        return f"summary {json.dumps(asked)}"


@dataclass(frozen=True)
class _Section:
    """One file's answer: its JSON object and its text (both rendered, either printed), and
    the lines for stderr."""

    data: dict[str, Any] | None = None
    text: str | None = None
    stderr: tuple[str, ...] = ()
    error: str | None = None


def _section(name: str, ask: _Ask, progress: Progress | None = None) -> _Section:
    """Load, summarize and render one file (run in a worker process with ``--jobs``)."""
    loaded = _load(Path(name), progress)
    return loaded if isinstance(loaded, _Section) else _answer(loaded, ask, progress)


def _load(path: Path, progress: Progress | None) -> Dump | _Section:
    """The dump at ``path``, or a section saying why it could not be read."""
    try:
        return load_dump(path, reader=progress.reader(path) if progress is not None else None)
    except SnapshotLoadError as exc:
        return _Section(error=str(exc))


def _answer(dump: Dump, ask: _Ask, progress: Progress | None = None) -> _Section:
    """Summarize and render a loaded dump."""
    try:
        views = dump.device_views() if ask.device is None else (dump.on_device(ask.device),)
    except SnapshotLoadError as exc:
        return _Section(error=str(exc))
    if progress is not None:
        progress.phase(f"summarizing {dump.path.name if dump.path is not None else dump.name}")
    prefix = f"{dump.name}: " if ask.several else ""
    warnings = dump.warnings if ask.device is None else views[0].warnings
    stderr = tuple(f"memforensics summary: warning: {prefix}{w}" for w in warnings)
    summaries = [summarize(view, top=ask.top, requested=ask.requested) for view in views]
    answer = replace(summaries[0], other_devices=tuple(summaries[1:]))
    data = document(answer, SCHEMA)
    text = summary_text(answer, rows=ask.top)
    return _Section(data=data, text=text, stderr=stderr)


def _keep(cache: ResultCache, name: str, ask: _Ask, section: _Section) -> None:
    """Keep a section for both renderings: the other is a second look too."""
    if section.error is None:
        for as_json in (True, False):
            cache.keep([Path(name)], ask.question(name, as_json=as_json), section)


class SummaryCommand:
    """Explain dumps: reserved/allocated bytes, the OOM, a verdict and the biggest sites.

    Several files (a glob that matched a retry loop's dumps) get one section each, and --json
    prints a list of objects; one file prints one object. An unreadable file is reported on
    stderr and skipped: the exit status is 1 when any file was bad, 2 when none was readable.
    Several files are read by up to --jobs processes at once, printed in the order given.
    """

    name = "summary"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """FILE..., --json, --top, --all, --device, --requested, the cache, --quiet, --jobs."""
        parser.add_argument(
            "files", metavar="FILE", nargs="+", help="snapshots (.pickle, .pkl, or either .gz)"
        )
        parser.add_argument(
            "--json", action="store_true", help="print one JSON object (a list for several files)"
        )
        add_row_flags(parser, default=10)
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
        add_analysis_flags(parser, jobs=DUMPS_AT_ONCE, look_ahead=True)  # the retired flags

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Answer each file (from the cache, in this process, or in a pool), print in order."""
        several = len(args.files) > 1
        ask = _Ask(args.json, row_limit(args, parser), args.device, args.requested, several)
        jobs = job_count(args, parser)
        cache = open_cache(args)
        sections: dict[int, _Section] = {}
        progress = Progress(quiet=args.quiet)
        for index, name in enumerate(args.files):
            section = cache.lookup(_Section, [Path(name)], ask.question(name))
            if section is not None and (section.data if ask.json else section.text) is not None:
                sections[index] = section
        todo = [index for index in range(len(args.files)) if index not in sections]
        with progress.running():
            if len(todo) == 1 and not several:
                found = _load(Path(args.files[todo[0]]), progress)
                if isinstance(found, Dump):
                    found = _answer(found, ask, progress)
                sections[todo[0]] = found
            elif jobs == 1 or len(todo) <= 1:
                for index in todo:
                    sections[index] = _section(args.files[index], ask, progress)
            else:
                done = progress.files(len(todo))
                with ProcessPoolExecutor(max_workers=min(jobs, len(todo))) as pool:
                    futures = {i: pool.submit(_section, args.files[i], ask) for i in todo}
                    for index, future in futures.items():
                        sections[index] = future.result()
                        done()
        for index in todo:
            _keep(cache, args.files[index], ask, sections[index])
        warn_cache(cache, self.name)
        return _print(args.files, [sections[i] for i in range(len(args.files))], ask)


def _body(data: dict[str, Any]) -> dict[str, Any]:
    """One dump's object inside the several-file document (its ``schema`` is the list's)."""
    return {key: value for key, value in data.items() if key != "schema"}


def _print(files: list[str], sections: list[_Section], ask: _Ask) -> int:
    """Print each section in the order given; the exit status (as documented above)."""
    results: list[dict[str, Any]] = []
    bad = shown = 0
    for section in sections:
        if section.error is not None:
            if not ask.several:
                raise CommandError(section.error)
            print(f"memforensics summary: {section.error}", file=sys.stderr)
            bad += 1
            continue
        for line in section.stderr:
            print(line, file=sys.stderr)
        if ask.json and section.data is not None:
            results.append(section.data)
        elif not ask.json and section.text is not None:
            print(("\n" if shown else "") + section.text)
            shown += 1
    if ask.json and (results or not ask.several):
        several = {"schema": SCHEMA, "dumps": [_body(data) for data in results]}
        print(json.dumps(several if ask.several else results[0], indent=2))
    if bad == len(files):
        raise CommandError(f"none of the {bad} files could be read")
    return 1 if bad else 0
