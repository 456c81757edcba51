"""``memforensics overview DIR [-o overview.html] [--json]``: the whole run, every rank."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from memforensics._errors import SnapshotLoadError
from memforensics._layout import JOURNAL_FOLDER, sidecar_path, snapshot_stem
from memforensics._text import printable
from memforensics._units import format_bytes
from memforensics.analysis import build_overview
from memforensics.analysis.folder import OVERVIEW_SCHEMA, overview_text
from memforensics.analysis.report import render_overview
from memforensics.analysis.schema import document
from memforensics.cli._command import CommandError, add_old_spelling, nothing_to_read
from memforensics.cli._explained import explained
from memforensics.cli._flags import add_cache_flags, open_cache, warn_cache
from memforensics.cli._output import say, screen_width, write_page


class OverviewCommand:
    """The whole run from every rank's journal: first OOM, ranks that stand out, a healthy peer."""

    name = "overview"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """DIR, -o, --json, --all, --jobs (``--workers``, deprecated), the cache."""
        parser.add_argument("dir", metavar="DIR", help="run folder (the out_dir) or its journal/")
        parser.add_argument("-o", "--output", metavar="HTML", help="also write this HTML page")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument("--all", action="store_true", help="list every rank, not a few")
        parser.add_argument(
            "--jobs", type=int, metavar="N", help="processes reading journals (default: the CPUs)"
        )
        add_old_spelling(parser, "--workers", "--jobs", dest="jobs", type=int)
        add_cache_flags(parser)

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Read (the first OOM dump's story as ``summary`` tells it), then print (and write
        the page)."""
        if args.jobs is not None and args.jobs < 1:
            parser.error("argument --jobs: must be at least 1")
        cache = open_cache(args)
        try:
            view = build_overview(
                args.dir, workers=args.jobs, diagnose=lambda path: explained(cache, path).diagnosis
            )
        except SnapshotLoadError as exc:
            raise CommandError(str(exc)) from None
        warn_cache(cache, self.name)
        if not view.ranks and not view.journals and not view.problems.unreadable:
            raise CommandError(_nothing_here(Path(args.dir)))
        note = ""
        if args.output:
            out = Path(args.output)
            html = render_overview(view, link_base=out.resolve().parent)
            write_page(out, html)
            note = f"wrote {out} ({format_bytes(len(html.encode()))})"
        text = (
            json.dumps(document(view, OVERVIEW_SCHEMA), indent=2)
            if args.json
            else overview_text(view, all_ranks=args.all, width=screen_width())
        )
        try:
            if args.json:
                print(text)
            else:
                say(text)
            if note:
                print(note, file=sys.stderr if args.json else sys.stdout)
            sys.stdout.flush()
        except BrokenPipeError:  # `| head`: stop quietly, as a Unix tool does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _nothing_here(folder: Path) -> str:
    """Why ``folder`` gives no overview: a run's dump folder (``oom/``, ``steps4-7/``: it holds
    sidecars, or its parent the journals) is read from its run folder; anything else holds
    neither journals nor sidecars."""
    run = folder.resolve().parent
    if (run / JOURNAL_FOLDER).is_dir() or _holds_a_sidecar(folder):
        return (
            f"{printable(str(folder))} is a dump folder of the run {printable(str(run))}:"
            f" overview reads the run folder (memforensics overview {printable(str(run))})"
        )
    return nothing_to_read(folder, "journals or sidecars")


def _holds_a_sidecar(folder: Path) -> bool:
    """Whether a snapshot in ``folder`` has its sidecar beside it (any other JSON is not one)."""
    try:
        snapshots = [p for p in folder.iterdir() if snapshot_stem(p.name) is not None]
    except OSError:
        return False
    return any(sidecar_path(p).is_file() for p in snapshots)
