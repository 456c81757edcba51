"""``memforensics run``."""

from __future__ import annotations

import argparse

from memforensics._errors import ConfigError
from memforensics.capture.facade import install, uninstall
from memforensics.capture.log import safe_log
from memforensics.cli._command import CommandError
from memforensics.cli._flags import add_config_flags, config_keywords, passed_flags
from memforensics.cli.target import (
    TargetError,
    check_target,
    exported_config,
    run_target,
    target_from_args,
)

_USAGE = "memforensics run [-h] [config flags] (-m MODULE | SCRIPT) [ARGS ...]"


class RunCommand:
    """Run a training script or module with forensics installed, as python would run it.

    Forensics is installed in this interpreter first, then the script runs as __main__ with
    sys.argv and sys.path[0] set as python sets them, so it composes with launchers:
    torchrun --nproc_per_node 8 -m memforensics run train.py --lr 3e-4. Flags before the script
    are memforensics' own; everything after it goes to the script untouched. The script's exit
    status and exceptions pass through unchanged. OOMs are captured even if the script never
    calls mf.step(); for step windows, see docs/integrations.md.
    """

    name = "run"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """``-m MODULE ...`` or ``SCRIPT ...``, plus one flag per config field."""
        parser.usage = _USAGE
        parser.allow_abbrev = False  # --step must not quietly mean --steps
        parser.add_argument(
            "-m",
            dest="module",
            nargs=argparse.REMAINDER,
            metavar="MODULE",
            help="run a library module as a script, like python -m (the rest are its arguments)",
        )
        parser.add_argument(
            "script",
            nargs=argparse.REMAINDER,
            metavar="SCRIPT ARGS",
            help="the script to run and its arguments, passed on untouched",
        )
        add_config_flags(parser)

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Install, run the target, close; the target's SystemExit and exceptions propagate."""
        raw = passed_flags(args)
        keywords = config_keywords(raw, parser)
        target = target_from_args(args, parser)
        try:
            check_target(target)
            with exported_config(raw):
                try:
                    mf = install(**keywords)
                except ConfigError as exc:
                    message = str(exc).removeprefix("memforensics: ")
                    if exc.field in raw:
                        message += f" (from --{exc.field.replace('_', '-')})"
                    raise CommandError(message) from None
                safe_log(
                    "info",
                    "run_started",
                    target=target.describe(),
                    rank=mf.rank,
                    device=mf.backend.name,
                    capturing=mf.capturing,
                    oom_observer=mf.oom_attached,
                    steps=mf.config.steps,
                    out_dir=str(mf.out_dir),
                )
                try:
                    run_target(target)
                finally:
                    uninstall()  # flushes a partial window, even on an exception
        except TargetError as exc:
            raise CommandError(str(exc), exc.exit_code) from None
        return 0
