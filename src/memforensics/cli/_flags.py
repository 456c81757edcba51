"""The flags commands share, each defined once: for the analysis commands the cache
(``--cache-dir``, ``--no-cache``), progress (``--quiet``) and ``--jobs``; ``--top``/``--all``;
sizes (``2GiB``); and, for ``run``, one flag per ``ForensicsConfig`` field."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memforensics._units import parse_size
from memforensics.cli._command import add_retired_flags

if TYPE_CHECKING:
    from memforensics.cli._cache import ResultCache

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
    add_cache_flags(parser, shown=cache)
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress on stderr (shown on a terminal)"
    )
    if look_ahead:
        add_retired_flags(
            parser,
            "--look-ahead",
            "--no-look-ahead",
            why="no command works in the background after it returns",
        )
    if jobs is not None:
        parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N", help=jobs)


def add_cache_flags(parser: argparse.ArgumentParser, *, shown: bool = True) -> None:
    """Add ``--cache-dir`` and ``--no-cache`` (hidden unless ``shown``)."""
    parser.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="where answers about dumps are kept (default $XDG_CACHE_HOME/memforensics,"
        " else ~/.cache/memforensics)"
        if shown
        else argparse.SUPPRESS,
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="neither read nor write the analysis cache" if shown else argparse.SUPPRESS,
    )


def open_cache(args: argparse.Namespace) -> ResultCache:
    """The cache the flags ask for (a disabled one with ``--no-cache``). Its module reads dumps'
    metadata: a command's ``--help`` never loads it."""
    from memforensics.cli._cache import ResultCache, default_cache_dir

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


# ``--top N`` / ``--all``: how many rows a command's tables show (every cut table says so).


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


# Byte sizes as people type them on a command line: ``2GiB``, ``512MB``, ``1.5 GiB``, ``4096``.
#
# Read by :func:`memforensics._units.parse_size`; this adds only what argparse needs.


def byte_size(text: str) -> int:
    """argparse type: a positive size in bytes (binary units for K/M/G/T and *iB)."""
    try:
        value = parse_size(text)
    except ValueError:
        message = f"not a size: {text!r} (try 2GiB, 512MiB or 4096)"
        raise argparse.ArgumentTypeError(message) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}")
    return value


# Command-line flags for every ``ForensicsConfig`` field: ``--steps 4``, ``--window-ranks 0,8``.
#
# The flags are generated from ``ForensicsConfig.model_fields``, so a new field gets its flag
# without an edit here, and their text is parsed by the same ``parse_env_value`` the
# ``MEMFORENSICS_*`` variables go through, so a flag and its variable accept exactly the same
# values. Only the flags a user passed become keywords: the environment still applies underneath,
# as it does for ``install()``.

_DEST_PREFIX = "config_"

# One line per field for --help; a field missing here still gets a flag with a generic line.
_HELP = {
    "rank": "this process's global rank; none = torch.distributed's, else $RANK, else 0",
    "ranks": "ranks that capture OOM dumps: 'all', '0,8,16' or a JSON list",
    "window_ranks": "ranks that also record step windows: 'all', '0,8' or a JSON list",
    "steps": "steps per window; unset = OOM capture only",
    "every": "open a window every N steps (>= --steps)",
    "skip_first": "step calls before the first window opens",
    "max_windows": "stop opening windows after this many",
    "keep_last": "keep the first window and the newest N ('none' keeps all)",
    "out_dir": "root folder of everything written",
    "device": "auto, cuda, npu, none or sim",
    "max_entries": "allocator history ring-buffer size (trace events)",
    "stacks": "'python' or 'all' (C++ frames too: far slower dumps)",
    "oom": "attach the OOM observer: true or false",
    "oom_history": "history outside windows: state, all or off",
    "max_oom_snapshots": "OOM dumps per process at most",
    "annotate_steps": "tag allocations with step=N: true or false",
    "journal_every": "append a journal line every N steps ('none' turns the journal off)",
    "context": "stacks recorded with history: 'alloc' (allocations) or 'all' (frees too)",
    "writer": "window dumps: 'auto' (forked child for large ones) or 'inline'",
    "near_oom": "take a near-OOM dump when the allocator retries or memory nears the limit",
    "near_oom_fraction": "(reserved + outside PyTorch) / limit that counts as near",
    "near_oom_every": "check for a near-OOM every N steps",
    "max_near_oom_snapshots": "near-OOM dumps per process at most",
}


def flag_name(field: str) -> str:
    """``window_ranks`` -> ``--window-ranks``."""
    return "--" + field.replace("_", "-")


def _default_text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return str(value)


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """Add one ``--<field>`` flag per ``ForensicsConfig`` field; unset flags stay absent."""
    from memforensics.capture.config import ForensicsConfig, env_var  # pydantic: `run` only

    group = parser.add_argument_group(
        "forensics configuration",
        "One flag per ForensicsConfig field. A flag takes the same text as its MEMFORENSICS_* "
        "variable (e.g. --ranks 0,8 --oom false) and wins over it.",
    )
    for field, info in ForensicsConfig.model_fields.items():
        text = _HELP.get(field, f"ForensicsConfig.{field}")
        group.add_argument(
            flag_name(field),
            dest=_DEST_PREFIX + field,
            metavar=field.upper(),
            default=argparse.SUPPRESS,
            help=f"{text} [default: {_default_text(info.default)}; env {env_var(field)}]",
        )


def passed_flags(args: argparse.Namespace) -> dict[str, str]:
    """The raw text of each config flag the user passed, by field name."""
    from memforensics.capture.config import FIELDS

    values = vars(args)
    return {
        field: values[_DEST_PREFIX + field] for field in FIELDS if _DEST_PREFIX + field in values
    }


def config_keywords(raw: Mapping[str, str], parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Parse passed flags into ``install()`` keywords; a bad value is an argparse error (exit 2)."""
    from memforensics.capture.config import parse_env_value

    keywords: dict[str, Any] = {}
    for field, text in raw.items():
        try:
            keywords[field] = parse_env_value(field, text)
        except (ValueError, TypeError, RecursionError) as exc:  # deep JSON: RecursionError
            parser.error(f"argument {flag_name(field)}: invalid value {text!r}: {exc}")
    return keywords
