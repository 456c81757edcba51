"""Flags every analysis command shares: the cache (``--cache-dir``, ``--no-cache``), progress
(``--quiet``) and, for commands over many dumps, ``--jobs``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from memforensics.analysis.cache import AnswerCache, default_cache_dir

DUMPS_AT_ONCE = (
    "dumps analysed at once, each in its own process (default: the CPU count; at most N dumps"
    " are in memory at a time; 1 works in this process)"
)


def add_analysis_flags(
    parser: argparse.ArgumentParser, *, jobs: str | None = None, look_ahead: bool = False
) -> None:
    """Add ``--cache-dir``, ``--no-cache``, ``--quiet``; when ``jobs`` says what the processes
    do (e.g. :data:`DUMPS_AT_ONCE`), ``--jobs N`` (default: the CPU count); with
    ``look_ahead``, ``--look-ahead``/``--no-look-ahead`` (default: on a terminal)."""
    parser.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="where answers about dumps are kept (default $XDG_CACHE_HOME/memforensics,"
        " else ~/.cache/memforensics)",
    )
    parser.add_argument(
        "--no-cache", action="store_true", help="neither read nor write the analysis cache"
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress on stderr (shown on a terminal)"
    )
    if look_ahead:
        parser.add_argument(
            "--look-ahead",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="once the answer is printed, work out in the background, at low priority,"
            " what summary, replay and report would answer about the dump it read, so those"
            " commands answer at once (default: on when stderr is a terminal; needs the cache)",
        )
    if jobs is not None:
        parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N", help=jobs)


def open_cache(args: argparse.Namespace) -> AnswerCache:
    """The cache the flags ask for (a disabled one with ``--no-cache``)."""
    if args.no_cache:
        return AnswerCache(None)
    folder: Path = args.cache_dir if args.cache_dir is not None else default_cache_dir()
    return AnswerCache(folder)


def job_count(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``--jobs``, checked: 1 or more."""
    jobs: int = args.jobs
    if jobs < 1:
        parser.error("--jobs must be 1 or more")
    return jobs


def warn_cache(cache: AnswerCache, command: str) -> None:
    """Print the cache's one warning (a folder it could not use), if it has one."""
    if cache.warning is not None:
        print(f"memforensics {command}: warning: {cache.warning}", file=sys.stderr)
