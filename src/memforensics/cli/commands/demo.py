"""``memforensics demo``."""

from __future__ import annotations

import argparse
from pathlib import Path

from memforensics.cli._command import CommandError, add_old_spelling


class DemoCommand:
    """Run a small leaky training loop into OOM with forensics on, and show what it captured.

    On a CUDA or Ascend device it trains a real model under a memory cap; elsewhere it runs on
    the simulated 'sim' device and says so.
    """

    name = "demo"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """``--device`` and ``--out-dir`` (``--out``, deprecated)."""
        parser.add_argument(
            "--device",
            choices=["auto", "cuda", "npu", "sim"],
            default="auto",
            help="where to train (default: auto, falling back to sim)",
        )
        parser.add_argument(
            "--out-dir",
            type=Path,
            default=Path("memforensics-demo"),
            metavar="DIR",
            help="output folder (default: ./memforensics-demo)",
        )
        add_old_spelling(parser, "--out", "--out-dir", dest="out_dir", type=Path)

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Run the demo and print what it wrote."""
        from memforensics.cli.demo import describe, pick_device, run_demo

        device, note = pick_device(args.device)
        if note:
            print(note)
        if device in {"cuda", "npu"}:
            from memforensics.backends._select import create_backend

            if not create_backend(device).available():
                raise CommandError(f"--device {device}: no such device is available here")
        result = run_demo(device, args.out_dir.resolve())
        for line in describe(result, args.out_dir.resolve()):
            print(line)
        return 0
