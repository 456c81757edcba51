"""``memforensics cache info|clear``: what the analysis cache holds, and emptying it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from memforensics._units import format_bytes
from memforensics.analysis.schema import document
from memforensics.cli._cache import MAX_BYTES_ENV, SCHEMA, ResultCache, default_cache_dir


class CacheCommand:
    """Show (info) or empty (clear) the cache of answers about dumps that analysis commands keep."""

    name = "cache"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """ACTION (info or clear), --cache-dir, --json."""
        parser.add_argument("action", choices=["info", "clear"], help="info: size; clear: empty")
        parser.add_argument(
            "--cache-dir",
            type=Path,
            metavar="DIR",
            help="the cache folder (default $XDG_CACHE_HOME/memforensics)",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Report or clear; a missing folder is an empty cache."""
        cache = ResultCache(args.cache_dir or default_cache_dir())
        if args.action == "clear":
            cleared = cache.clear()
            removed = cleared.removed
            print(
                json.dumps(document(cleared, SCHEMA))
                if args.json
                else f"removed {removed} entr{'y' if removed == 1 else 'ies'} from {cleared.folder}"
            )
            return 0
        info = cache.info()
        if args.json:
            print(json.dumps(document(info, SCHEMA), indent=2))
        else:
            print(
                f"{info.folder}: {info.entries} entr{'y' if info.entries == 1 else 'ies'},"
                f" {format_bytes(info.bytes)} of at most {format_bytes(info.max_bytes)}"
                f" (least recently used evicted first; set {MAX_BYTES_ENV} to change)"
            )
        return 0
