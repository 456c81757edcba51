"""``memforensics report FILE... -o report.html``: one offline HTML page for one or more dumps."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from memforensics._errors import SnapshotLoadError
from memforensics._units import format_bytes
from memforensics.analysis import list_dumps, load_dump
from memforensics.analysis.report import ReportBuilder
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
)
from memforensics.cli._output import say, write_page
from memforensics.cli._process import leave_at_exit
from memforensics.cli._progress import Progress

REPLAY_OF_ONE = "; with one dump, the processes replaying its what-if rows (see replay --jobs)"


class ReportCommand:
    """Write one self-contained HTML report (opens with no network) for dumps or run folders."""

    name = "report"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """FILE..., -o, --top."""
        parser.add_argument(
            "files", metavar="FILE", nargs="+", help="snapshots, or run folders (all their dumps)"
        )
        parser.add_argument("-o", "--output", default="report.html", help="HTML file to write")
        parser.add_argument("--top", type=int, default=15, metavar="N", help="sites to list")
        add_analysis_flags(parser, jobs=DUMPS_AT_ONCE + REPLAY_OF_ONE, look_ahead=True, cache=False)

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Load each dump in turn (a bad one is listed, not fatal), render, write atomically.

        Exit 0 when every file was read, 1 when some were not, 2 when none was. The page is
        made afresh each time: it names the files as given, and the cache keeps no names.
        """
        jobs = job_count(args, parser)
        builder = ReportBuilder(top=max(args.top, 0))
        paths: list[Path] = []
        for name in args.files:
            found = [Path(name)]
            if found[0].is_dir():
                builder.folder = True
                try:
                    found = [entry.path for entry in list_dumps(found[0]).dumps]
                except SnapshotLoadError as exc:
                    builder.add_unreadable(str(exc))
                    continue
                if not found:
                    builder.add_unreadable(nothing_to_read(name))
            paths.extend(found)
        builder.replay_jobs = jobs if len(paths) == 1 else 1  # several: one process per dump
        progress = Progress(quiet=args.quiet)

        def compute() -> _Page:
            if jobs > 1 and len(paths) > 1:
                builder.add_files(paths, jobs=jobs, done=progress.files(len(paths)))
            for index, path in enumerate(paths if jobs == 1 or len(paths) <= 1 else ()):
                try:
                    dump = load_dump(path, reader=progress.reader(path))
                except SnapshotLoadError as exc:
                    builder.add_unreadable(str(exc))
                    continue
                progress.phase(f"analysing {path.name}")
                builder.add(dump, index=index)
                if len(paths) == 1:
                    leave_at_exit(dump)
                del dump
            progress.phase("rendering the page")
            return _page(builder)

        with progress.running():
            answer = compute()
        out = Path(args.output)
        write_page(out, answer.html)
        for line in answer.stderr:
            print(line, file=sys.stderr)
        say(f"wrote {out} {answer.said}")
        return answer.status


@dataclass(frozen=True)
class _Page:
    """The page, what the command says about it, its warnings and its exit status."""

    html: str
    said: str
    stderr: tuple[str, ...]
    status: int


def _page(builder: ReportBuilder) -> _Page:
    """The page of the dumps added to ``builder``, and what the command says about it."""
    warned = [
        f"memforensics report: warning: {entry['name']}: {warning}"
        for entry in builder.dumps
        for warning in entry["warnings"]
    ]
    if not builder.dumps:  # one line, as every command reports a bad input
        raise CommandError(none_readable(builder.unreadable, "no snapshot files found"))
    html = builder.html()
    bad = len(builder.unreadable)
    skipped = tuple(skipped_lines("report", builder.unreadable))
    said = (
        f"({len(builder.dumps)} dump(s), {format_bytes(len(html.encode()))}"
        + (f"; {bad} unreadable file(s) skipped, listed in the page" if bad else "")
        + ")"
    )
    return _Page(html, said, tuple(warned) + skipped, 1 if bad else 0)
