"""``memforensics watch DIR [--interval S] [--once] [--json]``: a running job's ranks, live.

The figures come from :class:`memforensics.analysis.folder.JournalWatch` (new journal bytes
only, torn last lines left for the next refresh); this module only draws them. rich is
imported here, inside ``run``, and nowhere else: neither ``import memforensics`` nor a training
process ever loads it. rich draws on the real stdout, past the CLI's escaping, so that its
cursor moves work; every cell it is given is printable text, never markup.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from memforensics._text import printable
from memforensics.analysis.folder import (
    WATCH_COLUMNS,
    WATCH_SCHEMA,
    JournalWatch,
    WatchView,
    cause_lines,
    watch_cells,
    watch_header,
    watch_text,
)
from memforensics.analysis.schema import document
from memforensics.cli._command import CommandError
from memforensics.cli._explained import explained
from memforensics.cli._flags import add_cache_flags, open_cache, warn_cache
from memforensics.cli._output import say, screen_width, unescaped

_CHROME = 7
"""Terminal lines the live view needs besides its rows (header, borders, column titles)."""


class WatchCommand:
    """Watch a running job's journals: one row per rank, most urgent first (Ctrl-C ends it)."""

    name = "watch"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """DIR, --interval, --once, --json, --rows, the cache."""
        parser.add_argument("dir", metavar="DIR", help="run folder (the out_dir) or its journal/")
        parser.add_argument(
            "--interval", type=float, default=2.0, metavar="S", help="seconds between refreshes"
        )
        parser.add_argument("--once", action="store_true", help="print the table once and exit")
        parser.add_argument("--json", action="store_true", help="with --once: one JSON object")
        parser.add_argument(
            "--rows", type=int, metavar="N", help="rows shown (default: what fits; --once: all)"
        )
        add_cache_flags(parser)

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Poll and draw until Ctrl-C, or once."""
        if args.interval <= 0:
            parser.error("argument --interval: must be above 0")
        if args.rows is not None and args.rows < 1:
            parser.error("argument --rows: must be at least 1")
        if args.json and not args.once:
            parser.error("argument --json: needs --once")
        if not Path(args.dir).is_dir():
            raise CommandError(f"{args.dir}: not a folder")
        cache = open_cache(args)  # the first OOM dump's story, as ``summary`` tells it
        watch = JournalWatch(args.dir, diagnose=lambda path: explained(cache, path).diagnosis)
        try:
            if args.once:
                watch.poll()
                _print_once(watch.view(), args)
            else:
                _live(watch, args)
        except KeyboardInterrupt:
            return 0  # Ctrl-C is how a watch ends
        except BrokenPipeError:  # `| head`: stop quietly, as a Unix tool does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        finally:
            warn_cache(cache, self.name)
        return 0


def _shown(view: WatchView, rows: int | None) -> WatchView:
    if rows is None or len(view.rows) <= rows:
        return view
    return replace(view, rows=view.rows[:rows])


def _print_once(view: WatchView, args: argparse.Namespace) -> None:
    if args.json:
        print(json.dumps(document(view, WATCH_SCHEMA), indent=2))
    elif sys.stdout.isatty():
        from rich.console import Console

        Console(file=unescaped(sys.stdout)).print(_table(_shown(view, args.rows)))
    else:
        say(watch_text(_shown(view, args.rows), screen_width()))
    sys.stdout.flush()


def _table(view: WatchView) -> Any:
    """The rich Table of ``view``: the header as its title, failed ranks in red."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(printable(watch_header(view))), title_justify="left", expand=False)
    for column in WATCH_COLUMNS:
        table.add_column(column, justify="left" if column == "forecast" else "right")
    for row in view.rows:
        style = "bold red" if row.failed else ("yellow" if row.forecast is not None else None)
        table.add_row(*(Text(printable(cell)) for cell in watch_cells(row)), style=style)
    cause = cause_lines(view.first_oom_diagnosis)
    if cause:
        table.caption = Text(printable(" ".join(line.strip() for line in cause)))
        table.caption_justify = "left"
    if not view.rows:
        table.caption = "no journal lines yet"
    return table


def _live(watch: JournalWatch, args: argparse.Namespace) -> None:
    """Refresh every ``--interval`` seconds; a plain table per refresh when not a terminal."""
    if not sys.stdout.isatty():
        while True:
            watch.poll()
            say(watch_text(_shown(watch.view(), args.rows), screen_width()), end="\n\n", flush=True)
            time.sleep(args.interval)
    from rich.console import Console
    from rich.live import Live

    console = Console(file=unescaped(sys.stdout))

    def frame() -> Any:
        watch.poll()
        rows = args.rows or max(console.size.height - _CHROME, 1)
        return _table(_shown(watch.view(), rows))

    with Live(frame(), console=console, auto_refresh=False, transient=False) as live:
        while True:
            time.sleep(args.interval)
            live.update(frame(), refresh=True)
