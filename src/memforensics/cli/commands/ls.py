"""``memforensics ls DIR``: every dump of a run, across ranks, and the first OOM."""

from __future__ import annotations

import argparse
import json

from memforensics._errors import SnapshotLoadError
from memforensics.analysis import list_dumps
from memforensics.analysis.folder import LS_SCHEMA, ls_text
from memforensics.analysis.schema import document
from memforensics.cli._command import CommandError, nothing_to_read
from memforensics.cli._output import say, screen_width


class LsCommand:
    """List the dumps under a run folder (all ranks), oldest first, naming the first OOM."""

    name = "ls"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """DIR, --json."""
        parser.add_argument("dir", metavar="DIR", help="run folder (the out_dir)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """List and print; exit 2 when the folder holds no dump."""
        try:
            listing = list_dumps(args.dir)
        except SnapshotLoadError as exc:
            raise CommandError(str(exc)) from None
        if not listing.dumps:
            raise CommandError(nothing_to_read(args.dir))
        if args.json:
            print(json.dumps(document(listing, LS_SCHEMA), indent=2))
        else:
            say(ls_text(listing, screen_width()))
        return 0
