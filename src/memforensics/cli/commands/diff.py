"""``memforensics diff BEFORE AFTER``: where live memory grew between two dumps."""

from __future__ import annotations

import argparse
import functools
import json
from dataclasses import replace
from pathlib import Path

from memforensics._errors import SnapshotLoadError
from memforensics._text import printable
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
from memforensics.cli._analysis_flags import add_analysis_flags, open_cache, warn_cache
from memforensics.cli._answers import Answer, answered, print_answer
from memforensics.cli._cache import ResultCache
from memforensics.cli._command import CommandError
from memforensics.cli._progress import Progress
from memforensics.cli._rows import add_row_flags, row_limit


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
        """Load both, compare, print (or print the cached answer)."""
        top = row_limit(args, parser)
        paths = [Path(args.before), Path(args.after)]

        def question_for(as_json: bool) -> str:
            return f"diff {json.dumps([args.before, args.after, top, args.device, as_json])}"

        progress = Progress(quiet=args.quiet)
        cache = open_cache(args)

        def compute() -> dict[str, Answer]:
            before, after = (_kept_sides(cache, path, progress) for path in paths)
            try:
                result = diff_by_device(before, after, device=args.device)
            except SnapshotLoadError as exc:
                raise CommandError(str(exc)) from None
            return {
                question_for(True): Answer(json.dumps(document(result, DIFF_SCHEMA), indent=2)),
                question_for(False): Answer(device_diffs_text(result, top)),
            }

        with progress.running():
            answer = answered(cache, paths, question_for(args.json), compute)
        warn_cache(cache, self.name)
        return print_answer(answer)


def _kept_sides(cache: ResultCache, path: Path, progress: Progress) -> SideOf:
    """The dump at ``path``'s sides by device: each the cache's (named as given this time),
    else worked out from the dump, read once, when first needed, and kept."""
    read: list[Dump] = []

    def dump() -> Dump:
        if not read:
            read.append(load_dump(path, reader=progress.reader(path)))
            progress.phase("comparing")
        return read[0]

    @functools.cache
    def side(device: int | None) -> DiffSide:
        question = f"diff side {json.dumps(device)}"
        found = cache.result(DiffSide, [path], question, lambda: diff_side(dump(), device))
        return replace(found, name=printable(str(path)))

    return side
