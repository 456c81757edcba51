"""``memforensics leaks DIR``: sites whose live bytes grow steadily from window to window."""

from __future__ import annotations

import argparse
import json
import sys
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
from memforensics.cli._cache import ResultCache, named_by
from memforensics.cli._command import (
    CommandError,
    none_readable,
    nothing_to_read,
    skipped_lines,
)
from memforensics.cli._flags import (
    DUMPS_AT_ONCE,
    add_analysis_flags,
    job_count,
    open_cache,
    warn_cache,
)
from memforensics.cli._output import say
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

        progress = Progress(quiet=args.quiet)
        cache = open_cache(args)
        with progress.running():
            progress.phase(f"reading {len(paths)} window dumps")
            try:
                leaks = _kept_leaks(cache, str(listing.root), paths, jobs)
            except SnapshotLoadError as exc:
                raise CommandError(str(exc)) from None
        warn_cache(cache, self.name)
        if leaks.unreadable and not leaks.windows:
            reasons = none_readable(leaks.unreadable, "")
            raise CommandError(f"no window dump could be read ({reasons})")
        for line in skipped_lines(self.name, leaks.unreadable):
            print(line, file=sys.stderr)
        if args.json:
            print(json.dumps(document(leaks, LEAKS_SCHEMA), indent=2))
        else:
            say(leaks_text(leaks, top))
        return 1 if leaks.unreadable else 0


_WINDOW = "leaks window-totals"
"""The cache's name for one window dump's :class:`WindowTotals`, followed by the kind, rank and
steps its folder and name say (they decide its totals' rank and step)."""


def _kept_leaks(cache: ResultCache, root: str, paths: list[Path], jobs: int) -> Leaks:
    """The trends over ``paths``: each window's totals the cache's, else read (in ``jobs``
    processes) and kept; a dump without known steps is read again each time."""
    found: dict[Path, WindowTotals | str | None] = {}
    questions: dict[Path, str] = {}
    for path in paths:
        named = named_by(path) if cache.enabled else None
        if named is None:
            continue
        questions[path] = f"{_WINDOW} {json.dumps([named.kind, named.rank, named.steps])}"
        kept = cache.lookup(WindowTotals, [path], questions[path])
        if kept is not None:
            found[path] = kept
    todo = [path for path in paths if path not in found]
    for path, result in zip(todo, read_windows(todo, jobs=jobs) if todo else [], strict=True):
        found[path] = result
        if isinstance(result, WindowTotals) and path in questions:
            cache.keep([path], questions[path], result)
    return fit_windows(root, [found[path] for path in paths])
