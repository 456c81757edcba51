"""``memforensics replay FILE``: replay the allocator history; would another setting have fit?"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from memforensics._errors import SnapshotLoadError
from memforensics.allocator import SettingsError
from memforensics.analysis import Dump, load_dump, replay_dump
from memforensics.analysis.replay import SCHEMA, Replay, replay_text
from memforensics.analysis.schema import document
from memforensics.cli._cache import UNNAMED, named_by, renamed
from memforensics.cli._command import CommandError
from memforensics.cli._flags import (
    add_analysis_flags,
    byte_size,
    job_count,
    open_cache,
    warn_cache,
)
from memforensics.cli._output import say, screen_width
from memforensics.cli._process import leave_at_exit
from memforensics.cli._progress import Progress


class ReplayCommand:
    """Replay a dump through the allocator model: self-check, proven bound, what-if table."""

    name = "replay"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """FILE, --set KEY=VALUE (repeatable), --requested SIZE, --json, --jobs N."""
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
        add_analysis_flags(
            parser,
            look_ahead=True,  # the retired flags
            jobs="processes replaying what-if rows at once: this one and N-1 forked workers"
            " sharing the loaded dump (default: the CPU count; 1 works in this process)",
        )

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Load, replay, print (or print the kept result)."""
        path = Path(args.file)
        jobs = job_count(args, parser)
        progress = Progress(quiet=args.quiet)
        cache = open_cache(args)
        name = named_by(path) if cache.enabled else None
        kept = None if name is None else cache.lookup(_Kept, [path], _question(args))
        if kept is None:
            with progress.running():
                try:
                    dump = load_dump(path, reader=progress.reader(path))
                except SnapshotLoadError as exc:
                    raise CommandError(str(exc)) from None
                progress.phase(f"replaying {path.name}")
                kept = _replayed(args, dump, jobs)
                leave_at_exit(dump)
            if name is not None:
                cache.keep(
                    [path], _question(args), replace(kept, replay=renamed(kept.replay, UNNAMED))
                )
        if name is not None:
            kept = replace(kept, replay=renamed(kept.replay, name))
        warn_cache(cache, self.name)
        for warning in kept.warnings:
            print(f"memforensics replay: warning: {warning}", file=sys.stderr)
        if args.json:
            print(json.dumps(document(kept.replay, SCHEMA), indent=2))
        else:
            say(replay_text(kept.replay, screen_width()))
        return 0


@dataclass(frozen=True)
class _Kept:
    """A replay as the cache keeps it: the result and the dump's warnings for stderr."""

    replay: Replay
    warnings: tuple[str, ...] = ()


def _question(args: argparse.Namespace) -> str:
    """The cache's name for a ``replay`` of one file: what changes the result (no ``--set``
    and an empty one alike; the rendering and the file's name are applied afresh)."""
    return f"replay {json.dumps([args.sets or None, args.requested])}"


def _replayed(args: argparse.Namespace, dump: Dump, jobs: int) -> _Kept:
    """Replay ``dump`` as ``args`` ask, in ``jobs`` processes."""
    try:
        result = replay_dump(dump, sets=args.sets or None, requested=args.requested, jobs=jobs)
    except SettingsError as exc:
        raise CommandError(f"--set: {exc}") from None
    return _Kept(result, dump.warnings)
