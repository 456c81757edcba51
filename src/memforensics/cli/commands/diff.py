"""``memforensics diff BEFORE AFTER``: where live memory grew between two dumps."""

from __future__ import annotations

import argparse
import functools
import json
from dataclasses import replace
from pathlib import Path

from memforensics._errors import SnapshotLoadError
from memforensics.analysis import Dump, load_dump
from memforensics.analysis.compare import (
    DIFF_SCHEMA,
    DiffSide,
    SideOf,
    device_diffs_text,
    diff_by_device,
    diff_side,
)
from memforensics.analysis.schema import document
from memforensics.cli._cache import UNNAMED, ResultCache, named_by
from memforensics.cli._command import CommandError
from memforensics.cli._flags import (
    add_analysis_flags,
    add_row_flags,
    open_cache,
    row_limit,
    warn_cache,
)
from memforensics.cli._output import say
from memforensics.cli._progress import Progress


class DiffCommand:
    """Compare two dumps: change of live bytes per site, largest first, and leak suspects."""

    name = "diff"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """BEFORE, AFTER, --json, --top, --all, --device."""
        parser.add_argument("before", metavar="BEFORE", help="the earlier snapshot")
        parser.add_argument("after", metavar="AFTER", help="the later snapshot")
        parser.add_argument(
            "--json", action="store_true", help="print one JSON object (always every row)"
        )
        add_row_flags(parser, default=15)
        parser.add_argument(
            "--device", type=int, metavar="N", help="compare only device N of both dumps"
        )
        add_analysis_flags(parser, look_ahead=True)  # the retired flags

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Take both dumps' sides (kept, or read once), compare, print."""
        top = row_limit(args, parser)
        paths = [Path(args.before), Path(args.after)]
        progress = Progress(quiet=args.quiet)
        cache = open_cache(args)
        with progress.running():
            before, after = (_kept_sides(cache, path, progress) for path in paths)
            try:
                result = diff_by_device(before, after, device=args.device)
            except SnapshotLoadError as exc:
                raise CommandError(str(exc)) from None
        warn_cache(cache, self.name)
        if args.json:
            print(json.dumps(document(result, DIFF_SCHEMA), indent=2))
        else:
            say(device_diffs_text(result, top))
        return 0


def _kept_sides(cache: ResultCache, path: Path, progress: Progress) -> SideOf:
    """The dump at ``path``'s sides by device: each the cache's, else worked out from the dump,
    read once, when first needed, and kept without its name, which is the path's each time.
    The steps its folder and name say decide its window, so they are part of the question."""
    read: list[Dump] = []
    named = named_by(path) if cache.enabled else None

    def dump() -> Dump:
        if not read:
            read.append(load_dump(path, reader=progress.reader(path)))
            progress.phase("comparing")
        return read[0]

    @functools.cache
    def side(device: int | None) -> DiffSide:
        if named is None:
            return diff_side(dump(), device)
        question = f"diff side {json.dumps([device, named.step, named.steps])}"
        found = cache.lookup(DiffSide, [path], question)
        if found is None:
            found = diff_side(dump(), device)
            cache.keep([path], question, replace(found, name=UNNAMED.file))
        return replace(found, name=named.file)

    return side
