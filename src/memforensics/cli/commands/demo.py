"""``memforensics demo``."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

from memforensics._layout import NEAR_OOM, parse_window_folder
from memforensics._text import SCREEN_WIDTH
from memforensics._units import format_bytes
from memforensics.backends._select import create_backend
from memforensics.capture.log import reset_logging
from memforensics.cli._command import CommandError, add_old_spelling
from memforensics.cli._output import say, screen_width

# ``memforensics demo``: show the whole product in ten seconds on any machine.
#
# It runs the packaged training script, ``memforensics.examples.demo_train``, in this interpreter
# (never a copy: a copy in a folder another user can write could be swapped before it runs), then
# prints what was written: the step windows, the OOM dump and the figures in its sidecar, and
# where the script it ran can be read.

DEMO_MODULE = "memforensics.examples.demo_train"


def pick_device(requested: str) -> tuple[str, str | None]:
    """Resolve ``auto``; return the device and a note to print when falling back to ``sim``."""
    if requested != "auto":
        return requested, None
    backend = create_backend("auto")
    if backend.name in {"cuda", "npu"}:
        return backend.name, None
    return "sim", "no CUDA or NPU device found: running on the simulated 'sim' device"


def run_demo(device: str, out_dir: Path) -> dict[str, Any]:
    """Run the leaky training script on ``device``; return its RESULT dict."""
    out_dir.mkdir(parents=True, exist_ok=True)
    keys = ("MEMFORENSICS_DEMO_DEVICE", "MEMFORENSICS_DEMO_OUT", "MEMFORENSICS_LOG_LEVEL")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ["MEMFORENSICS_DEMO_DEVICE"] = device
    os.environ["MEMFORENSICS_DEMO_OUT"] = str(out_dir)
    # The demo says what happened in its own words below (the OOM, each dump, or that no OOM
    # dump was written), so the library's event lines would only repeat it in another form.
    # An explicit MEMFORENSICS_LOG_LEVEL wins.
    os.environ.setdefault("MEMFORENSICS_LOG_LEVEL", "CRITICAL")
    reset_logging()
    argv = sys.argv
    try:
        sys.argv = [script_path()]
        namespace = runpy.run_module(DEMO_MODULE, run_name="__main__", alter_sys=True)
    finally:
        sys.argv = argv
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        reset_logging()
    result: dict[str, Any] = namespace["RESULT"]
    return result


def script_path() -> str:
    """Where the packaged demo script is, to read (the demo runs it from there)."""
    spec = importlib.util.find_spec(DEMO_MODULE)
    return str(spec.origin) if spec is not None and spec.origin else DEMO_MODULE


def _size(value: Any) -> str:
    return format_bytes(value) if isinstance(value, int) else "unknown"


def describe(
    result: dict[str, Any], out_dir: Path, width: int = SCREEN_WIDTH
) -> tuple[list[str], list[str]]:
    """Human lines about what the demo wrote, and the ``next:`` commands to run, which stay
    whole to copy (each continued over two lines where it runs past ``width``)."""
    lines = [
        f"ran {script_path()}",
        f"trained {result.get('steps', '?')} steps, then: {result.get('error', 'no OOM')}",
    ]
    dumps = [Path(p) for p in result.get("dumps", [])]
    windows = sorted({p.parent.name for p in dumps if parse_window_folder(p.parent.name)})
    lines.append(f"step windows kept in {out_dir}: {', '.join(windows) or 'none'}")
    lines += [f"near-OOM snapshot: {p}" for p in dumps if p.parent.name == NEAR_OOM]
    ooms = [p for p in dumps if p.parent.name == "oom"]
    for path in ooms:
        lines.append(f"OOM snapshot: {path}")
        sidecar = path.with_suffix(".json")
        try:
            oom = json.loads(sidecar.read_text())["oom"]
        except (OSError, ValueError, KeyError, TypeError):
            lines.append("  (sidecar unreadable)")
            continue
        lines.append(f"  sidecar: {sidecar}")
        lines.append(
            f"  requested {_size(oom.get('requested_bytes'))} (the allocator asked the device for "
            f"{_size(oom.get('allocation_bytes'))}), device free "
            f"{_size(oom.get('device_free_bytes'))} of "
            f"{_size(oom.get('device_total_bytes'))}"
        )
    commands: list[str] = []
    if ooms:
        commands += _next("summary", ooms[0], width)
    if windows:
        commands += _next("leaks", out_dir, width)
    if not ooms and "error" in result:
        lines.append(
            "no OOM snapshot was written: run again with MEMFORENSICS_LOG_LEVEL=WARNING to see why"
        )
    return lines, commands


def _next(command: str, path: Path, width: int) -> list[str]:
    """``next: memforensics COMMAND PATH`` as a user copies it into the same shell: one line, or,
    where that runs past ``width``, the command continued (``\\``) onto a line of its own for
    the path, relative to the working folder when it lies inside it."""
    line = f"next: memforensics {command} {path}"
    if len(line) <= width:
        return [line]
    try:
        shown = path.relative_to(Path.cwd())
    except ValueError:
        shown = path
    return [f"next: memforensics {command} \\", f"  {shown}"]


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
        from memforensics.cli.commands.demo import describe, pick_device, run_demo

        device, note = pick_device(args.device)
        if note:
            say(note)
        if device in {"cuda", "npu"}:
            from memforensics.backends._select import create_backend

            if not create_backend(device).available():
                raise CommandError(f"--device {device}: no such device is available here")
        result = run_demo(device, args.out_dir.resolve())
        lines, commands = describe(result, args.out_dir.resolve(), screen_width())
        for line in lines:
            say(line)
        for command in commands:
            print(command)  # never shortened: a path with "…" in it cannot be run
        return 0
