"""``memforensics diff BEFORE AFTER``: where live memory grew between two dumps."""

from __future__ import annotations

import argparse
import json

from memforensics._errors import SnapshotLoadError
from memforensics.analysis import diff_dumps, load_dump
from memforensics.analysis._filled import kinds_change
from memforensics.analysis._text import diff_text
from memforensics.analysis._text_filled import kinds_change_lines
from memforensics.cli._command import CommandError


class DiffCommand:
    """Compare two dumps: growth of live bytes per site, biggest first, and leak suspects."""

    name = "diff"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """BEFORE, AFTER, --json."""
        parser.add_argument("before", metavar="BEFORE", help="the earlier snapshot")
        parser.add_argument("after", metavar="AFTER", help="the later snapshot")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Load both, compare, print."""
        try:
            before, after = load_dump(args.before), load_dump(args.after)
        except SnapshotLoadError as exc:
            raise CommandError(str(exc)) from None
        result = diff_dumps(before, after)
        kinds = kinds_change(before, after)  # (#12) live bytes per kind, before and after
        if args.json:
            print(json.dumps({**result.to_dict(), "kinds": kinds}, indent=2))
        else:
            print("\n".join([diff_text(result), *kinds_change_lines(kinds)]))
        return 0
