"""``memforensics replay FILE``: replay the allocator history; would another setting have fit?"""

from __future__ import annotations

import argparse
from pathlib import Path

from memforensics._errors import SnapshotLoadError
from memforensics.allocator import SettingsError
from memforensics.analysis import Dump, load_dump, replay
from memforensics.analysis.cache import AnswerCache
from memforensics.cli._analysis_flags import (
    add_analysis_flags,
    job_count,
    open_cache,
    warn_cache,
)
from memforensics.cli._answers import Answer, answered, print_answer
from memforensics.cli._command import CommandError
from memforensics.cli._look_ahead import default_args, look_ahead
from memforensics.cli._progress import Progress
from memforensics.cli._replay_answers import replay_answers, replay_question
from memforensics.cli._sizes import byte_size


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
            look_ahead=True,
            jobs="processes replaying what-if rows at once: this one and N-1 forked workers"
            " sharing the loaded dump (default: the CPU count; 1 works in this process)",
        )

    def questions_ahead(self) -> list[str]:
        """Both renderings of ``replay FILE``."""
        args, _ = default_args(self, "FILE")
        return [replay_question(args.sets, args.requested, as_json) for as_json in (True, False)]

    def answer_ahead(self, path: Path, dump: Dump, cache: AnswerCache) -> None:
        """Keep ``replay FILE``'s answer about ``dump``, unless the cache holds it."""
        args, parser = default_args(self, str(path))
        question = replay_question(args.sets, args.requested, args.json)
        answered(cache, [path], question, lambda: _answers(args, dump, job_count(args, parser)))

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Load, replay, print (or print the cached answer)."""
        path = Path(args.file)
        jobs = job_count(args, parser)
        question = replay_question(args.sets, args.requested, args.json)
        progress = Progress(quiet=args.quiet)
        loaded: dict[Path, Dump] = {}  # the dump read here, for the look-ahead

        def compute() -> dict[str, Answer]:
            try:
                dump = loaded[path] = load_dump(path, reader=progress.reader(path))
            except SnapshotLoadError as exc:
                raise CommandError(str(exc)) from None
            progress.phase(f"replaying {path.name}")
            return _answers(args, dump, jobs)

        cache = open_cache(args)
        with progress.running():
            answer = answered(cache, [path], question, compute, progress.awaiting)
        warn_cache(cache, self.name)
        status = print_answer(answer)
        look_ahead(args, cache, loaded)
        return status


def _answers(args: argparse.Namespace, dump: Dump, jobs: int) -> dict[str, Answer]:
    """Replay ``dump`` as ``args`` ask, in ``jobs`` processes; the answers by question."""
    try:
        result = replay(dump, sets=args.sets or None, requested=args.requested, jobs=jobs)
    except SettingsError as exc:
        raise CommandError(f"--set: {exc}") from None
    return replay_answers(result, dump, args.sets, args.requested)
