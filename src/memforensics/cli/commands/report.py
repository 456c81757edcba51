"""``memforensics report FILE... -o report.html``: one offline HTML page for one or more dumps."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from memforensics._errors import SnapshotLoadError
from memforensics._units import format_bytes
from memforensics.analysis import list_dumps, load_dump
from memforensics.analysis.report import ReportBuilder
from memforensics.cli._command import CommandError
from memforensics.cli._output import write_page


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

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Load each dump in turn (a bad one is listed, not fatal), render, write atomically.

        Exit 0 when every file was read, 1 when some were not, 2 when none was.
        """
        builder = ReportBuilder(top=max(args.top, 0))
        for name in args.files:
            paths = [Path(name)]
            if paths[0].is_dir():
                builder.folder = True
                try:
                    paths = [entry.path for entry in list_dumps(paths[0]).dumps]
                except SnapshotLoadError as exc:
                    builder.add_unreadable(str(exc))
                    continue
            for path in paths:
                try:
                    dump = load_dump(path)
                except SnapshotLoadError as exc:
                    builder.add_unreadable(str(exc))
                    continue
                for warning in dump.warnings:
                    print(f"memforensics report: warning: {dump.name}: {warning}", file=sys.stderr)
                builder.add(dump)
                del dump
        if not builder.dumps:  # one line, as every command reports a bad input
            raise CommandError("; ".join(builder.unreadable) or "no snapshot files found")
        for message in builder.unreadable:
            print(f"memforensics report: skipped: {message}", file=sys.stderr)
        html = builder.html()
        out = Path(args.output)
        write_page(out, html)
        bad = len(builder.unreadable)
        print(
            f"wrote {out} ({len(builder.dumps)} dump(s), {format_bytes(len(html.encode()))}"
            + (f"; {bad} unreadable file(s) skipped, listed in the page" if bad else "")
            + ")"
        )
        return 1 if bad else 0
