"""``--top N`` / ``--all``: how many rows a command's tables show (every cut table says so)."""

from __future__ import annotations

import argparse


def add_row_flags(parser: argparse.ArgumentParser, *, default: int) -> None:
    """Add ``--top N`` (rows per table, ``default`` unless given) and ``--all`` (every row)."""
    rows = parser.add_mutually_exclusive_group()
    rows.add_argument(
        "--top",
        type=int,
        default=default,
        metavar="N",
        help=f"rows per table (default {default}); a cut table says how many rows it hides",
    )
    rows.add_argument("--all", action="store_true", help="every row of every table")


def row_limit(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int | None:
    """The row cap the flags ask for: None with ``--all``; a negative ``--top`` is an error."""
    if args.all:
        return None
    if args.top < 0:
        parser.error("--top must be 0 or more")
    top: int = args.top
    return top
