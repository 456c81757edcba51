"""``memforensics plan``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from memforensics._layout import PREDICTED
from memforensics._units import parse_size
from memforensics.cli._command import CommandError
from memforensics.cli._output import say
from memforensics.cli.target import Target, TargetError, check_target, run_target, target_from_args

_USAGE = "memforensics plan [-h] [options] (-m MODULE | SCRIPT) [ARGS ...]"
_CONF_ENV = "PYTORCH_CUDA_ALLOC_CONF"


class PlanCommand:
    """Predict a script's GPU memory on the CPU: peak, reserved, segments, and whether it fits.

    The script runs unchanged in this process with CUDA emulated: tensors on "cuda" are
    shape-only stand-ins and every storage goes through memforensics' model of PyTorch's caching
    allocator. Snapshots the script dumps are the predicted ones, at the script's own paths; a
    predicted OOM leaves an OOM dump under --out-dir. Exit status: 0 fits, 1 does not fit or runs
    out, 2 usage error or the script failed.
    """

    name = "plan"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """``-m MODULE ...`` or ``SCRIPT ...`` and the planned device."""
        parser.usage = _USAGE
        parser.allow_abbrev = False
        parser.add_argument(
            "-m",
            dest="module",
            nargs=argparse.REMAINDER,
            metavar="MODULE",
            help="run a library module as a script, like python -m",
        )
        parser.add_argument(
            "script",
            nargs=argparse.REMAINDER,
            metavar="SCRIPT ARGS",
            help="the script to plan and its arguments, passed on untouched",
        )
        parser.add_argument(
            "--device-memory",
            default="80GiB",
            metavar="SIZE",
            help="memory of the planned device (default: 80GiB)",
        )
        parser.add_argument(
            "--device-capability",
            default="9.0",
            metavar="MAJOR.MINOR",
            help="compute capability of the planned device (default: 9.0)",
        )
        parser.add_argument(
            "--context-memory",
            default="512MiB",
            metavar="SIZE",
            help="memory the CUDA context takes outside PyTorch (default: 512MiB)",
        )
        parser.add_argument(
            "--alloc-conf",
            default=None,
            metavar="CONF",
            help="PYTORCH_CUDA_ALLOC_CONF for the planned allocator (default: the environment's)",
        )
        parser.add_argument(
            "--out-dir",
            default="memforensics-plan",
            metavar="DIR",
            help="where OOM dumps and the final snapshot go (default: memforensics-plan/)",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--vary",
            default=None,
            metavar="NAME=V1,V2,...",
            help="plan the script once per value of its own option --NAME, each in its own "
            "process, and print the largest value that fits",
        )
        parser.add_argument(
            "--jobs", type=int, default=1, metavar="N", help="with --vary: values planned at once"
        )

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Plan the target; print the figures; 0 fits, 1 does not, 2 the script failed."""
        from memforensics.allocator import SettingsError, parse_conf
        from memforensics.plan import device_spec

        target = target_from_args(args, parser)
        conf = args.alloc_conf if args.alloc_conf is not None else os.environ.get(_CONF_ENV)
        try:
            settings = parse_conf(conf)
            spec = device_spec(
                _size(args.device_memory, "--device-memory"),
                _capability(args.device_capability),
                _size(args.context_memory, "--context-memory"),
                settings,
            )
        except (SettingsError, ValueError) as exc:
            raise CommandError(f"plan: {exc}") from None
        try:
            check_target(target)
        except TargetError as exc:
            raise CommandError(str(exc), exc.exit_code) from None
        if args.vary is not None:
            return _vary(args, target, conf)
        return _plan(target, spec, Path(args.out_dir), conf, as_json=args.json)


def _plan(target: Target, spec: Any, out_dir: Path, conf: str | None, *, as_json: bool) -> int:
    """Run the target planned, capture as ``run`` does, write sidecars and print."""
    from memforensics.capture.facade import current, install, uninstall
    from memforensics.plan import OutOfScope, run_planned

    folders = [out_dir]  # where capture writes: plan's, and the script's own install()

    def run() -> None:
        try:
            run_target(target)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise

    def before() -> None:
        install(out_dir=str(out_dir))

    def after() -> None:
        live = current()
        if live is not None and live.out_dir not in folders:
            folders.append(live.out_dir)
        uninstall()

    started = time.time()
    saved_conf = os.environ.get(_CONF_ENV)
    if conf is not None:
        os.environ[_CONF_ENV] = conf
    try:
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            result, device = run_planned(spec, run, _writer(spec), before=before, after=after)
    except OutOfScope as exc:
        print(f"memforensics plan: {exc}", file=sys.stderr)
        return 2
    except BaseException as exc:  # the script failed for another reason: show it, exit 2
        if isinstance(exc, KeyboardInterrupt):
            raise
        traceback.print_exception(type(exc), exc, exc.__traceback__)
        return 2
    finally:
        if saved_conf is None:
            os.environ.pop(_CONF_ENV, None)
        else:
            os.environ[_CONF_ENV] = saved_conf
    return _answer(result, device, spec, folders, started, as_json=as_json)


def _answer(
    result: Any, device: Any, spec: Any, folders: list[Path], started: float, *, as_json: bool
) -> int:
    """Mark and name the snapshots the run wrote, print the plan; 0 fits, 1 does not."""
    snapshots = list(result.script_snapshots)
    for folder in folders:  # what capture wrote during this run (not an earlier run's files)
        if folder.is_dir():
            found = sorted(p for p in folder.glob("**/*.pickle") if p.stat().st_mtime >= started)
            snapshots += [str(p) for p in found]
    by_path: dict[str, str] = {}  # the script's own dump and capture's may name one file twice
    for path in snapshots:
        by_path.setdefault(os.path.abspath(path), path)
    snapshots = list(by_path.values())
    if not snapshots:
        final = folders[0] / "planned.pickle"
        _writer(spec)(str(final), device.snapshot())
        snapshots.append(str(final))
    _mark_predicted(snapshots, spec)
    verdict = _verdict(snapshots) if result.oom_message is not None else None
    if as_json:
        doc = asdict(result) | {
            "snapshots": snapshots,
            "verdict": verdict,
            "needed_bytes": result.needed_bytes,
        }
        print(json.dumps(doc, indent=2))
    else:
        from memforensics.plan.text import plan_text

        say(plan_text(result, snapshots, verdict))
    for line in dict.fromkeys(result.warnings):
        print(f"memforensics plan: {line}", file=sys.stderr)
    return 0 if result.fits else 1


def _vary(args: argparse.Namespace, target: Target, conf: str | None) -> int:
    """Plan each value in its own process, --jobs at a time, as given and with expandable
    segments; print the rows and the largest value that fits."""
    from concurrent.futures import ThreadPoolExecutor

    from memforensics.plan.text import vary_text
    from memforensics.plan.vary import Vary, VaryRow, largest, with_expandable

    try:
        vary = Vary.parse(args.vary)
    except ValueError as exc:
        raise CommandError(f"plan: {exc}") from None
    if args.jobs < 1:
        raise CommandError("plan: --jobs must be at least 1")
    out_dir = Path(args.out_dir)

    def one(value: str, expandable: bool) -> dict[str, Any] | str:
        planned = Target(target.kind, target.name, vary.args(target.args, value))
        chosen = with_expandable(conf) if expandable else (conf or "")
        folder = out_dir / f"{vary.name}-{value}{'-expandable' if expandable else ''}"
        command = [
            sys.executable, "-m", "memforensics", "plan", "--json",
            "--device-memory", args.device_memory, "--device-capability", args.device_capability,
            "--context-memory", args.context_memory, "--alloc-conf", chosen,
            "--out-dir", str(folder),
            *(("-m", planned.name) if planned.kind == "module" else (planned.name,)),
            *planned.args,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode in (0, 1):
            try:
                found: dict[str, Any] = json.loads(done.stdout)
                return found
            except ValueError:
                pass
        tail = done.stderr.strip().splitlines()
        return tail[-1] if tail else f"exit status {done.returncode}"

    jobs = [(value, expandable) for value in vary.values for expandable in (False, True)]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        answers = list(pool.map(lambda job: one(*job), jobs))
    rows = []
    for i, value in enumerate(vary.values):
        plain, grown = answers[2 * i], answers[2 * i + 1]
        if isinstance(plain, str):
            rows.append(VaryRow(value, None, None, None, None, plain))
            continue
        rows.append(
            VaryRow(
                value,
                plain["peak_allocated_bytes"],
                plain["peak_reserved_bytes"],
                bool(plain["fits"]),
                bool(grown["fits"]) if isinstance(grown, dict) else None,
            )
        )
    best = largest(rows, expandable=False)
    best_expandable = largest(rows, expandable=True)
    if args.json:
        doc = {
            "name": vary.name,
            "rows": [asdict(r) for r in rows],
            "largest": best,
            "largest_expandable": best_expandable,
        }
        print(json.dumps(doc, indent=2))
    else:
        say(vary_text(vary.name, rows, best, best_expandable))
    return 0 if best is not None else 1


def _writer(spec: Any) -> Any:
    """Writes a snapshot the run dumps (the script's own path) and its predicted sidecar."""
    from memforensics._layout import sidecar_path
    from memforensics.capture.atomic import utc_now, write_sidecar, write_snapshot
    from memforensics.capture.sidecar import SidecarContext, build_sidecar

    def write(path: str, snapshot: dict[str, Any]) -> None:
        final = Path(path)
        if final.parent != Path(""):
            final.parent.mkdir(parents=True, exist_ok=True)
        size = write_snapshot(final, snapshot)
        context = SidecarContext.collect(
            rank=0, world_size=None, device="cuda", torch_version=_torch_version()
        )
        sidecar = build_sidecar(
            context,
            kind="manual",
            snapshot_file=final,
            snapshot_bytes=size,
            created_at=utc_now(),
            device_index=0,
        )
        sidecar[PREDICTED] = spec.predicted_record()
        write_sidecar(sidecar_path(final), sidecar)

    return write


def _torch_version() -> str | None:
    import torch

    return str(torch.__version__)


def _mark_predicted(snapshots: list[str], spec: Any) -> None:
    """Every sidecar of the run says ``predicted``, with the planned device."""
    from memforensics._layout import sidecar_path
    from memforensics.capture.atomic import write_sidecar

    for path in snapshots:
        side = sidecar_path(Path(path))
        try:
            found = json.loads(side.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(found, dict) and PREDICTED not in found:
            found[PREDICTED] = spec.predicted_record()
            write_sidecar(side, found)


def _verdict(snapshots: list[str]) -> dict[str, str] | None:
    """The summary's diagnosis and verdict on the predicted OOM dump, when capture wrote one:
    the same cause ``summary`` names for it."""
    from memforensics.analysis import load_dump, summarize

    for path in snapshots:
        if Path(path).parent.name == "oom":
            summary = summarize(load_dump(Path(path)))
            verdict = summary.verdict
            return {
                "cause": summary.diagnosis.headline if summary.diagnosis is not None else "",
                "label": verdict.label,
                "explanation": verdict.explanation,
                "advice": verdict.advice or "",
            }
    return None


def _size(text: str, flag: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise CommandError(f"plan: {flag}: {exc}") from None


def _capability(text: str) -> tuple[int, int]:
    try:
        major, minor = (int(part) for part in text.split("."))
    except ValueError:
        raise CommandError(f"plan: --device-capability must be MAJOR.MINOR, got {text!r}") from None
    return major, minor
