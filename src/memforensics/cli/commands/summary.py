"""``memforensics summary FILE``: the verdict and the numbers behind it, for one dump."""

from __future__ import annotations

import argparse
import json
import sys

from memforensics._errors import SnapshotLoadError
from memforensics.analysis import load_dump, summarize
from memforensics.analysis._text import summary_text
from memforensics.cli._command import CommandError
from memforensics.cli._sizes import byte_size


class SummaryCommand:
    """Explain one dump: reserved/allocated bytes, the OOM, a verdict and the biggest sites."""

    name = "summary"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """FILE, --json, --top."""
        parser.add_argument("file", metavar="FILE", help="snapshot (.pickle or .pickle.gz)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument("--top", type=int, default=10, metavar="N", help="sites to list")
        parser.add_argument(
            "--requested",
            type=byte_size,
            metavar="SIZE",
            help="the failed request (2GiB), for a snapshot with neither history nor sidecar",
        )

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Load, summarize, print."""
        if args.top < 0:
            parser.error("--top must be 0 or more")
        try:
            dump = load_dump(args.file)
        except SnapshotLoadError as exc:
            raise CommandError(str(exc)) from None
        for warning in dump.warnings:
            print(f"memforensics summary: warning: {warning}", file=sys.stderr)
        summary = summarize(dump, top=args.top, requested=args.requested)
        print(json.dumps(summary.to_dict(), indent=2) if args.json else summary_text(summary))
        return 0
