"""``memforensics diff BEFORE AFTER``: where live memory grew between two dumps."""

from __future__ import annotations

import argparse
import json

from memforensics._errors import SnapshotLoadError
from memforensics.analysis import diff_dumps, load_dump
from memforensics.analysis._text import diff_text
from memforensics.cli._command import CommandError
from memforensics.cli._rows import add_row_flags, row_limit


class DiffCommand:
    """Compare two dumps: change of live bytes per site, largest first, and leak suspects."""

    name = "diff"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """BEFORE, AFTER, --json, --top, --all."""
        parser.add_argument("before", metavar="BEFORE", help="the earlier snapshot")
        parser.add_argument("after", metavar="AFTER", help="the later snapshot")
        parser.add_argument(
            "--json", action="store_true", help="print one JSON object (always every row)"
        )
        add_row_flags(parser, default=15)

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Load both, compare, print."""
        top = row_limit(args, parser)
        try:
            before, after = load_dump(args.before), load_dump(args.after)
        except SnapshotLoadError as exc:
            raise CommandError(str(exc)) from None
        result = diff_dumps(before, after)
        print(json.dumps(result.to_dict(), indent=2) if args.json else diff_text(result, top))
        return 0
