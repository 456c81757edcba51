"""``memforensics diff BEFORE AFTER``: where live memory grew between two dumps."""

from __future__ import annotations

import argparse
import json

from memforensics._errors import SnapshotLoadError
from memforensics.analysis import load_dump
from memforensics.analysis.compare import (
    device_diffs_text,
    diff_by_device,
    kinds_change,
    kinds_change_lines,
)
from memforensics.cli._command import CommandError
from memforensics.cli._rows import add_row_flags, row_limit


class DiffCommand:
    """Compare two dumps: change of live bytes per site, largest first, and leak suspects."""

    name = "diff"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """BEFORE, AFTER, --json, --top, --all, --device."""
        parser.add_argument("before", metavar="BEFORE", help="the earlier snapshot")
        parser.add_argument("after", metavar="AFTER", help="the later snapshot")
        parser.add_argument(
            "--json", action="store_true", help="print one JSON object (always every row)"
        )
        add_row_flags(parser, default=15)
        parser.add_argument(
            "--device", type=int, metavar="N", help="compare only device N of both dumps"
        )

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Load both, compare, print."""
        top = row_limit(args, parser)
        try:
            before, after = load_dump(args.before), load_dump(args.after)
            result = diff_by_device(before, after, device=args.device)
            if args.device is not None:
                before, after = before.on_device(args.device), after.on_device(args.device)
            kinds = kinds_change(before, after)  # live bytes per kind, before and after
        except SnapshotLoadError as exc:
            raise CommandError(str(exc)) from None
        if args.json:
            print(json.dumps({**result.to_dict(), "kinds": kinds}, indent=2))
        else:
            print("\n".join([device_diffs_text(result, top), *kinds_change_lines(kinds)]))
        return 0
