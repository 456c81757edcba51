"""``memforensics replay FILE``: replay the allocator history; would another setting have fit?"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from memforensics._errors import SnapshotLoadError
from memforensics.allocator import SettingsError
from memforensics.analysis import Dump, load_dump, replay
from memforensics.analysis.replay import replay_text
from memforensics.cli._analysis_flags import (
    add_analysis_flags,
    job_count,
    open_cache,
    warn_cache,
)
from memforensics.cli._answers import Answer, answered, print_answer
from memforensics.cli._command import CommandError
from memforensics.cli._progress import Progress
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
            look_ahead=True,  # the retired flags
            jobs="processes replaying what-if rows at once: this one and N-1 forked workers"
            " sharing the loaded dump (default: the CPU count; 1 works in this process)",
        )

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Load, replay, print (or print the cached answer)."""
        path = Path(args.file)
        jobs = job_count(args, parser)
        question = _question(args, args.json)
        progress = Progress(quiet=args.quiet)

        def compute() -> dict[str, Answer]:
            try:
                dump = load_dump(path, reader=progress.reader(path))
            except SnapshotLoadError as exc:
                raise CommandError(str(exc)) from None
            progress.phase(f"replaying {path.name}")
            return _answers(args, dump, jobs)

        cache = open_cache(args)
        with progress.running():
            answer = answered(cache, [path], question, compute)
        warn_cache(cache, self.name)
        return print_answer(answer)


def _question(args: argparse.Namespace, as_json: bool) -> str:
    """The cache's name for a ``replay`` answer about one file (the file's name as given is
    printed in it; no ``--set`` and an empty one alike)."""
    return f"replay {json.dumps([args.file, args.sets or None, args.requested, as_json])}"


def _answers(args: argparse.Namespace, dump: Dump, jobs: int) -> dict[str, Answer]:
    """Replay ``dump`` as ``args`` ask, in ``jobs`` processes; the answers by question."""
    try:
        result = replay(dump, sets=args.sets or None, requested=args.requested, jobs=jobs)
    except SettingsError as exc:
        raise CommandError(f"--set: {exc}") from None
    warnings = tuple(f"memforensics replay: warning: {w}" for w in dump.warnings)
    return {
        _question(args, True): Answer(json.dumps(result.to_dict(), indent=2), warnings),
        _question(args, False): Answer(replay_text(result), warnings),
    }
