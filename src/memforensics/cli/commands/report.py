"""``memforensics report FILE... -o report.html``: one offline HTML page for one or more dumps."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from memforensics._errors import SnapshotLoadError
from memforensics.analysis import Dump, list_dumps, load_dump, render_report
from memforensics.cli._command import CommandError


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
        """Load every dump, render, write atomically."""
        dumps: list[Dump] = []
        try:
            for name in args.files:
                paths = [Path(name)]
                if paths[0].is_dir():
                    paths = [entry.path for entry in list_dumps(paths[0]).dumps]
                dumps.extend(load_dump(path) for path in paths)
        except SnapshotLoadError as exc:
            raise CommandError(str(exc)) from None
        if not dumps:
            raise CommandError("no snapshot files found in the given folders")
        for dump in dumps:
            for warning in dump.warnings:
                print(f"memforensics report: warning: {dump.name}: {warning}", file=sys.stderr)
        html = render_report(dumps, top=max(args.top, 0))
        out = Path(args.output)
        temp = out.with_name(f".{out.name}.tmp{os.getpid()}")
        try:
            temp.write_text(html, encoding="utf-8")
            os.replace(temp, out)
        except OSError as exc:
            temp.unlink(missing_ok=True)
            raise CommandError(f"{out}: cannot write ({exc.strerror or exc})") from None
        print(f"wrote {out} ({len(dumps)} dump(s), {len(html.encode()) / 1024:.0f} KiB)")
        return 0
