"""``memforensics doctor``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from memforensics._errors import ConfigError
from memforensics.analysis.schema import document
from memforensics.capture.config import ForensicsConfig, config_from_env
from memforensics.cli._command import add_old_spelling
from memforensics.cli._output import say

_DEVICES = ("auto", "cuda", "npu", "none", "sim")


class DoctorCommand:
    """Check this node before a long job: framework, device, OOM hook, history, disk, settings.

    Each check passes, warns or fails with a one-line reason; the exit status is 1 if any check
    fails. --device and --out-dir default to what install() would use here (MEMFORENSICS_DEVICE,
    MEMFORENSICS_OUT_DIR, else auto and ./memforensics).
    """

    name = "doctor"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """``--device``, ``--out-dir`` (``--out``, deprecated) and ``--json``."""
        parser.add_argument(
            "--device",
            choices=_DEVICES,
            default=None,
            help="the device to check (default: $MEMFORENSICS_DEVICE, else auto)",
        )
        parser.add_argument(
            "--out-dir",
            type=Path,
            default=None,
            metavar="DIR",
            help="the out_dir to check (default: $MEMFORENSICS_OUT_DIR, else ./memforensics)",
        )
        add_old_spelling(parser, "--out", "--out-dir", dest="out_dir", type=Path)
        parser.add_argument(
            "--json",
            action="store_true",
            help="print {schema, status, device, out_dir, checks} as JSON",
        )

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Run every check, print them, return 1 if any failed."""
        from memforensics.doctor import SCHEMA, Doctor, doctor_text

        env = _env_defaults()
        device = args.device or env.get("device", "auto")
        out_dir = args.out_dir or Path(env.get("out_dir", "memforensics"))
        report = Doctor(device, out_dir).report()
        if args.json:
            print(json.dumps(document(report, SCHEMA), indent=2))
        else:
            say(doctor_text(report))
        return 1 if report.status == "fail" else 0


def _env_defaults() -> dict[str, Any]:
    """``device`` and ``out_dir`` from the environment when they are valid there."""
    try:
        values = config_from_env()
    except ConfigError:
        return {}  # the config check reports it
    found: dict[str, Any] = {}
    for field in ("device", "out_dir"):
        if field in values:
            try:
                ForensicsConfig(**{field: values[field]})
            except ValueError:
                continue
            found[field] = values[field]
    return found
