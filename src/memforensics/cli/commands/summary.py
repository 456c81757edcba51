"""``memforensics summary FILE...``: the verdict and the numbers behind it, for each dump."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from memforensics._errors import SnapshotLoadError
from memforensics.analysis import load_dump, summarize
from memforensics.analysis.summary import summary_text
from memforensics.cli._command import CommandError
from memforensics.cli._rows import add_row_flags, row_limit
from memforensics.cli._sizes import byte_size


class SummaryCommand:
    """Explain dumps: reserved/allocated bytes, the OOM, a verdict and the biggest sites.

    Several files (a glob that matched a retry loop's dumps) get one section each, and --json
    prints a list of objects; one file prints one object. An unreadable file is reported on
    stderr and skipped: the exit status is 1 when any file was bad, 2 when none was readable.
    """

    name = "summary"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """FILE..., --json, --top, --all, --device, --requested."""
        parser.add_argument(
            "files", metavar="FILE", nargs="+", help="snapshots (.pickle, .pkl, or either .gz)"
        )
        parser.add_argument(
            "--json", action="store_true", help="print one JSON object (a list for several files)"
        )
        add_row_flags(parser, default=10)
        parser.add_argument(
            "--device",
            type=int,
            metavar="N",
            help="device to explain (default: the OOM's device, else each device with memory)",
        )
        parser.add_argument(
            "--requested",
            type=byte_size,
            metavar="SIZE",
            help="the failed request (2GiB), for a snapshot that records no OOM (its final state"
            " is judged); over a recorded OOM it replaces the recorded request (with a warning)",
        )

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Load, summarize and print each file in turn (each device it explains)."""
        top = row_limit(args, parser)
        several = len(args.files) > 1
        results: list[dict[str, Any]] = []
        bad = sections = 0
        for name in args.files:
            try:
                dump = load_dump(name)
                views = (
                    dump.device_views() if args.device is None else (dump.on_device(args.device),)
                )
            except SnapshotLoadError as exc:
                if not several:
                    raise CommandError(str(exc)) from None
                print(f"memforensics summary: {exc}", file=sys.stderr)
                bad += 1
                continue
            prefix = f"{dump.name}: " if several else ""
            for warning in dump.warnings if args.device is None else views[0].warnings:
                print(f"memforensics summary: warning: {prefix}{warning}", file=sys.stderr)
            summaries = [summarize(view, top=top, requested=args.requested) for view in views]
            if args.json:
                data = summaries[0].to_dict()
                data["other_devices"] = [summary.to_dict() for summary in summaries[1:]]
                results.append(data)
            else:
                text = "\n\n".join(summary_text(summary, rows=top) for summary in summaries)
                print(("\n" if sections else "") + text)
                sections += 1
        if args.json and (results or not several):
            print(json.dumps(results if several else results[0], indent=2))
        if bad == len(args.files):
            raise CommandError(f"none of the {bad} files could be read")
        return 1 if bad else 0
