"""``memforensics leaks DIR``: sites whose live bytes grow steadily from window to window."""

from __future__ import annotations

import argparse
import json
import sys

from memforensics._errors import SnapshotLoadError
from memforensics.analysis import find_leaks
from memforensics.analysis.compare import leaks_text
from memforensics.cli._command import CommandError


class LeaksCommand:
    """Find leaks across a run's window dumps: per rank, per site, growth per step."""

    name = "leaks"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """DIR, --json, --top, --all."""
        parser.add_argument("dir", metavar="DIR", help="run folder (the out_dir)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument("--top", type=int, default=10, metavar="N", help="sites per rank")
        parser.add_argument("--all", action="store_true", help="every site, not the top N")

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Read the windows, fit, print; exit 1 when some dump could not be read."""
        if args.top < 0:
            parser.error("--top must be 0 or more")
        try:
            leaks = find_leaks(args.dir)
        except SnapshotLoadError as exc:
            raise CommandError(str(exc)) from None
        for error in leaks.unreadable:
            print(f"memforensics leaks: skipped: {error}", file=sys.stderr)
        if leaks.unreadable and not leaks.windows:
            raise CommandError("no window dump could be read")
        top = None if args.all else args.top
        print(json.dumps(leaks.to_dict(), indent=2) if args.json else leaks_text(leaks, top))
        return 1 if leaks.unreadable else 0
