"""``memforensics replay FILE``: replay the allocator history; would another setting have fit?"""

from __future__ import annotations

import argparse
import json
import sys

from memforensics._errors import SnapshotLoadError
from memforensics.allocator import SettingsError
from memforensics.analysis import load_dump, replay
from memforensics.analysis.replay import replay_text
from memforensics.cli._command import CommandError
from memforensics.cli._sizes import byte_size


class ReplayCommand:
    """Replay a dump through the allocator model: self-check, proven bound, what-if table."""

    name = "replay"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """FILE, --set KEY=VALUE (repeatable), --requested SIZE, --json."""
        parser.add_argument("file", metavar="FILE", help="snapshot (.pickle or .pickle.gz)")
        parser.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            dest="sets",
            help="an allocator setting to try, as in PYTORCH_CUDA_ALLOC_CONF"
            " (expandable_segments=True, max_split_size_mb=512); repeat to combine;"
            " without it, a table of the standard alternatives",
        )
        parser.add_argument(
            "--requested",
            type=byte_size,
            metavar="SIZE",
            help="the failed request (2GiB) when the dump records neither history nor sidecar",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Load, replay, print."""
        try:
            dump = load_dump(args.file)
        except SnapshotLoadError as exc:
            raise CommandError(str(exc)) from None
        for warning in dump.warnings:
            print(f"memforensics replay: warning: {warning}", file=sys.stderr)
        try:
            result = replay(dump, sets=args.sets or None, requested=args.requested)
        except SettingsError as exc:
            raise CommandError(f"--set: {exc}") from None
        print(json.dumps(result.to_dict(), indent=2) if args.json else replay_text(result))
        return 0
