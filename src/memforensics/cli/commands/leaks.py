"""``memforensics leaks DIR``: sites whose live bytes grow steadily from window to window."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from memforensics._errors import SnapshotLoadError
from memforensics.analysis import list_dumps
from memforensics.analysis.compare import (
    LEAKS_SCHEMA,
    Leaks,
    WindowTotals,
    fit_windows,
    leaks_text,
    read_windows,
    window_paths,
)
from memforensics.analysis.schema import document
from memforensics.cli._analysis_flags import (
    DUMPS_AT_ONCE,
    add_analysis_flags,
    job_count,
    open_cache,
    warn_cache,
)
from memforensics.cli._answers import Answer, answered, print_answer
from memforensics.cli._cache import ResultCache
from memforensics.cli._command import CommandError, nothing_to_read
from memforensics.cli._progress import Progress


class LeaksCommand:
    """Find leaks across a run's window dumps: per rank, per site, growth per step."""

    name = "leaks"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """DIR, --json, --top, --all."""
        parser.add_argument("dir", metavar="DIR", help="run folder (the out_dir)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument("--top", type=int, default=10, metavar="N", help="sites per rank")
        parser.add_argument("--all", action="store_true", help="every site, not the top N")
        add_analysis_flags(parser, jobs=DUMPS_AT_ONCE)

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Read the windows, fit, print; exit 1 when some dump could not be read, 2 when the
        folder holds none."""
        if args.top < 0:
            parser.error("--top must be 0 or more")
        jobs = job_count(args, parser)
        top = None if args.all else args.top
        try:
            listing = list_dumps(args.dir)
        except SnapshotLoadError as exc:
            raise CommandError(str(exc)) from None
        if not listing.dumps:
            raise CommandError(nothing_to_read(args.dir))
        paths = window_paths(listing.root)

        def question_for(as_json: bool) -> str:
            return f"leaks {json.dumps([args.dir, str(listing.root), top, as_json])}"

        progress = Progress(quiet=args.quiet)

        def compute() -> dict[str, Answer]:
            progress.phase(f"reading {len(paths)} window dumps")
            try:
                leaks = _kept_leaks(cache, str(listing.root), paths, jobs)
            except SnapshotLoadError as exc:
                raise CommandError(str(exc)) from None
            skipped = tuple(f"memforensics leaks: skipped: {e}" for e in leaks.unreadable)
            if leaks.unreadable and not leaks.windows:
                raise CommandError("no window dump could be read")
            status = 1 if leaks.unreadable else 0
            data = json.dumps(document(leaks, LEAKS_SCHEMA), indent=2)
            return {
                question_for(True): Answer(data, skipped, status),
                question_for(False): Answer(leaks_text(leaks, top), skipped, status),
            }

        cache = open_cache(args)
        with progress.running():
            answer = answered(cache, paths, question_for(args.json), compute)
        warn_cache(cache, self.name)
        return print_answer(answer)


_WINDOW = "leaks window-totals"
"""The cache's name for one window dump's :class:`WindowTotals`."""


def _kept_leaks(cache: ResultCache, root: str, paths: list[Path], jobs: int) -> Leaks:
    """The trends over ``paths``: each window's totals the cache's, else read (in ``jobs``
    processes) and kept; a dump without known steps is read again each time."""
    found: dict[Path, WindowTotals | str | None] = {}
    for path in paths:
        kept = cache.lookup(WindowTotals, [path], _WINDOW)
        if kept is not None:
            found[path] = kept
    todo = [path for path in paths if path not in found]
    for path, result in zip(todo, read_windows(todo, jobs=jobs), strict=True):
        found[path] = result
        if isinstance(result, WindowTotals):
            cache.keep([path], _WINDOW, result)
    return fit_windows(root, [found[path] for path in paths])
