"""Flags every analysis command shares: the cache (``--cache-dir``, ``--no-cache``), progress
(``--quiet``) and, for commands over many dumps, ``--jobs``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memforensics.cli._cache import ResultCache, default_cache_dir

DUMPS_AT_ONCE = (
    "dumps analysed at once, each in its own process (default: the CPU count; at most N dumps"
    " are in memory at a time; 1 works in this process)"
)


def add_analysis_flags(
    parser: argparse.ArgumentParser,
    *,
    jobs: str | None = None,
    look_ahead: bool = False,
    cache: bool = True,
) -> None:
    """Add ``--cache-dir``, ``--no-cache``, ``--quiet``; when ``jobs`` says what the processes
    do (e.g. :data:`DUMPS_AT_ONCE`), ``--jobs N`` (default: the CPU count); with
    ``look_ahead``, the retired ``--look-ahead``/``--no-look-ahead`` (hidden; a warning).
    A command that keeps nothing (``cache=False``) still accepts the cache flags, hidden."""
    parser.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="where answers about dumps are kept (default $XDG_CACHE_HOME/memforensics,"
        " else ~/.cache/memforensics)"
        if cache
        else argparse.SUPPRESS,
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="neither read nor write the analysis cache" if cache else argparse.SUPPRESS,
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress on stderr (shown on a terminal)"
    )
    if look_ahead:
        parser.add_argument(
            "--look-ahead", "--no-look-ahead", action=_Retired, nargs=0, help=argparse.SUPPRESS
        )
    if jobs is not None:
        parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N", help=jobs)


class _Retired(argparse.Action):
    """A flag of 0.1 that no longer does anything: accepted, with one warning."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        if not getattr(namespace, "_warned_retired", False):
            namespace._warned_retired = True
            print(
                f"{parser.prog}: warning: {option_string} does nothing any more (no command"
                " works in the background after it returns) and will be removed",
                file=sys.stderr,
            )


def open_cache(args: argparse.Namespace) -> ResultCache:
    """The cache the flags ask for (a disabled one with ``--no-cache``)."""
    if args.no_cache:
        return ResultCache(None)
    folder: Path = args.cache_dir if args.cache_dir is not None else default_cache_dir()
    return ResultCache(folder)


def job_count(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``--jobs``, checked: 1 or more."""
    jobs: int = args.jobs
    if jobs < 1:
        parser.error("--jobs must be 1 or more")
    return jobs


def warn_cache(cache: ResultCache, command: str) -> None:
    """Print the cache's one warning (a folder it could not use), if it has one."""
    if cache.warning is not None:
        print(f"memforensics {command}: warning: {cache.warning}", file=sys.stderr)
