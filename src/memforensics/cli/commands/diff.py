"""``memforensics diff BEFORE AFTER``: where live memory grew between two dumps."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from memforensics._errors import SnapshotLoadError
from memforensics.analysis import Dump, load_dump
from memforensics.analysis.cache import AnswerCache
from memforensics.analysis.compare import (
    SIDES_FACT,
    DumpSides,
    device_diffs_text,
    diff_by_device,
    kinds_change,
    kinds_change_lines,
)
from memforensics.cli._analysis_flags import add_analysis_flags, open_cache, warn_cache
from memforensics.cli._answers import Answer, answered, print_answer
from memforensics.cli._command import CommandError
from memforensics.cli._look_ahead import look_ahead
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
        add_analysis_flags(parser, look_ahead=True)

    def questions_ahead(self) -> list[str]:
        """What ``diff`` reads of a dump: its views (:class:`DumpSides`)."""
        return [SIDES_FACT]

    def answer_ahead(self, path: Path, dump: Dump, cache: AnswerCache) -> None:
        """Keep the views of ``dump`` a ``diff`` without ``--device`` compares (the whole file,
        or each device of a file holding several), unless the cache holds them."""
        sides = DumpSides.kept_or_read(path, cache, lambda: dump)
        for device in (None,) if len(sides.held) <= 1 else sides.held:
            sides.side(device)
        sides.kinds()
        sides.keep(path, cache)

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Load both, compare, print (or print the cached answer)."""
        top = row_limit(args, parser)
        paths = [Path(args.before), Path(args.after)]

        def question_for(as_json: bool) -> str:
            return f"diff {json.dumps([top, args.device, as_json])}"

        progress = Progress(quiet=args.quiet)
        loaded: dict[Path, Dump] = {}  # the dumps read here, for the look-ahead

        def sides(path: Path) -> DumpSides:
            def load() -> Dump:
                dump = loaded[path] = load_dump(path, reader=progress.reader(path))
                progress.phase("comparing")
                return dump

            return DumpSides.kept_or_read(path, cache, load, progress.awaiting)

        def compute() -> dict[str, Answer]:
            before, after = sides(paths[0]), sides(paths[1])  # each read only if not kept
            try:
                result = diff_by_device(before, after, device=args.device)
                kinds = kinds_change(before, after, args.device)  # live bytes per kind
            except SnapshotLoadError as exc:
                raise CommandError(str(exc)) from None
            for path, side in zip(paths, (before, after), strict=True):
                side.keep(path, cache)
            text = "\n".join([device_diffs_text(result, top), *kinds_change_lines(kinds)])
            return {
                question_for(True): Answer(
                    json.dumps({**result.to_dict(), "kinds": kinds}, indent=2)
                ),
                question_for(False): Answer(text),
            }

        cache = open_cache(args)
        with progress.running():
            answer = answered(cache, paths, question_for(args.json), compute, progress.awaiting)
        warn_cache(cache, self.name)
        status = print_answer(answer)
        look_ahead(args, cache, loaded)
        return status
