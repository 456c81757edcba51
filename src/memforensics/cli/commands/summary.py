"""``memforensics summary FILE``: the verdict and the numbers behind it, for one dump."""

from __future__ import annotations

import argparse
import json
import sys

from memforensics._errors import SnapshotLoadError
from memforensics.analysis import load_dump, summarize
from memforensics.analysis._text import summary_text
from memforensics.cli._command import CommandError


class SummaryCommand:
    """Explain one dump: reserved/allocated bytes, the OOM, a verdict and the biggest sites."""

    name = "summary"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """FILE, --json, --top, --device."""
        parser.add_argument("file", metavar="FILE", help="snapshot (.pickle, .pkl, or either .gz)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument("--top", type=int, default=10, metavar="N", help="sites to list")
        parser.add_argument(
            "--device",
            type=int,
            metavar="N",
            help="device to explain (default: the OOM's device, else each device with memory)",
        )

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Load, summarize, print."""
        if args.top < 0:
            parser.error("--top must be 0 or more")
        try:
            dump = load_dump(args.file)
            views = dump.device_views() if args.device is None else (dump.on_device(args.device),)
        except SnapshotLoadError as exc:
            raise CommandError(str(exc)) from None
        for warning in dump.warnings if args.device is None else views[0].warnings:
            print(f"memforensics summary: warning: {warning}", file=sys.stderr)
        summaries = [summarize(view, top=args.top) for view in views]
        if args.json:
            data = summaries[0].to_dict()
            data["other_devices"] = [summary.to_dict() for summary in summaries[1:]]
            print(json.dumps(data, indent=2))
        else:
            print("\n\n".join(summary_text(summary) for summary in summaries))
        return 0
