"""``memforensics cache info|clear``: what the analysis cache holds, and emptying it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memforensics._units import format_bytes
from memforensics.analysis.schema import document
from memforensics.cli._cache import MAX_BYTES_ENV, SCHEMA, ResultCache, default_cache_dir
from memforensics.cli._output import say


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
            return _clear(cache, as_json=args.json)
        info = cache.info()
        if args.json:
            print(json.dumps(document(info, SCHEMA), indent=2))
        else:
            say(
                f"{info.folder}: {info.entries} entr{'y' if info.entries == 1 else 'ies'},"
                f" {format_bytes(info.bytes)} of at most {format_bytes(info.max_bytes)}"
                f" (least recently used evicted first; set {MAX_BYTES_ENV} to change)"
            )
        return 0


def _entries(count: int) -> str:
    return f"{count} entr{'y' if count == 1 else 'ies'}"


def _clear(cache: ResultCache, *, as_json: bool) -> int:
    """Empty the cache; exit 1 (saying why) when an entry that should have gone stayed."""
    cleared = cache.clear()
    if as_json:
        print(json.dumps(document(cleared, SCHEMA)))
    else:
        say(f"removed {_entries(cleared.removed)} from {cleared.folder}")
    if not cleared.kept:
        return 0
    print(
        f"memforensics cache: {_entries(cleared.kept)} could not be removed ({cleared.reason})",
        file=sys.stderr,
    )
    return 1
