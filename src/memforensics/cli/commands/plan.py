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
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from memforensics._layout import PREDICTED
from memforensics._units import parse_size
from memforensics.cli._command import CommandError
from memforensics.cli._flags import add_cache_flags, open_cache, warn_cache
from memforensics.cli._output import say
from memforensics.cli.target import (
    Target,
    TargetError,
    check_target,
    environment,
    run_target,
    target_from_args,
)
from memforensics.cli.terminated import (
    INTERRUPTED,
    STATUS,
    Terminated,
    child_environment,
    follow_parent,
    raised,
    started,
)

if TYPE_CHECKING:
    from memforensics.cli._cache import ResultCache

_USAGE = "memforensics plan [-h] [options] (-m MODULE | SCRIPT) [ARGS ...]"
_CONF_ENV = "PYTORCH_CUDA_ALLOC_CONF"
_RANKS_ENV = "MEMFORENSICS_RANKS"
EXPANDABLE_FOLDER = "expandable"
"""Under ``--out-dir``: the run that checks a fragmented OOM with expandable segments."""


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
        setattr(parser, "error", _one_line(parser))  # noqa: B010  # bad options: one line
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
            help="the script to plan and its arguments, passed on untouched; or a launcher's "
            "command line (torchrun ..., accelerate launch ..., deepspeed ...), planned as the "
            "rank it starts",
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
            "--jobs",
            type=int,
            default=1,
            metavar="N",
            help="with --vary or --ranks all: plans run at once",
        )
        parser.add_argument(
            "--nproc-per-node",
            type=int,
            default=None,
            metavar="N",
            help="plan one rank of a distributed job of N processes per node, on torch's fake "
            "process group (torchrun's environment is set for the script); on a launcher's "
            "command line, it stands over the launcher's count",
        )
        parser.add_argument(
            "--nnodes", type=int, default=1, metavar="M", help="nodes of the job (default: 1)"
        )
        parser.add_argument(
            "--rank", type=int, default=None, metavar="R", help="the rank to plan (default: 0)"
        )
        parser.add_argument(
            "--ranks",
            choices=("all",),
            default=None,
            help="all: plan every rank, each in its own process, and print a table",
        )
        parser.add_argument(
            "--no-expandable-check",
            dest="expandable_check",
            action="store_false",
            help="when a predicted OOM is fragmentation, do not plan the script again with "
            "expandable_segments:True to tell whether that setting avoids it",
        )
        parser.add_argument(
            "--steps",
            type=int,
            default=None,
            metavar="N",
            help="end the script when an optimizer comes to its step N+1: the figures are those "
            "of the first N steps of a training loop (default: run the script to its end)",
        )
        parser.add_argument(
            "--max-entries",
            type=int,
            default=None,
            metavar="N",
            help="allocator events the snapshot written at the script's end keeps in its trace, "
            "the last N, as _record_memory_history(max_entries=N) keeps them; capture's "
            "dumps keep as many (default: capture's max_entries, 100,000)",
        )
        parser.add_argument("--check-into", default=None, help=argparse.SUPPRESS)
        parser.add_argument("--check-until", type=int, default=None, help=argparse.SUPPRESS)
        add_cache_flags(parser)

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Plan the target; print the figures; 0 fits, 1 does not, 2 the script failed."""
        follow_parent()  # a plan another plan started ends with it
        given = target_from_args(args, parser)
        target, launched_env = _launched(given, args)
        with environment(launched_env), raised():  # the launcher's variables, child plans' too
            try:
                return _planned(args, target, given)
            except Terminated:  # outside the script's run: nothing to answer with
                return STATUS


def _planned(args: argparse.Namespace, target: Target, given: Target) -> int:
    """Plan ``target`` as ``args`` ask: once, or once per value or rank in plans of their own,
    which are given the command line as given (a launcher's, which each reads again for its
    rank)."""
    from memforensics.allocator import SettingsError, parse_conf
    from memforensics.plan import device_spec

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
        raise CommandError(str(exc)) from None
    if args.steps is not None and args.steps < 1:
        raise CommandError(f"--steps must be at least 1, got {args.steps}")
    if args.max_entries is not None and args.max_entries < 1:
        raise CommandError(f"--max-entries must be at least 1, got {args.max_entries}")
    try:
        check_target(target)
    except TargetError as exc:
        raise CommandError(str(exc), exc.exit_code) from None
    world = _world(args)
    if args.vary is not None:
        return _vary(args, given, conf)
    if args.ranks == "all":
        return _all_ranks(args, given, conf, world)
    cache = open_cache(args)
    into = Path(args.check_into) if args.check_into is not None else None
    check = None
    if args.expandable_check and into is None and not spec.settings.expandable_segments:
        check = _expandable_check(args, given, conf)
    with _torchrun_env(world):
        status = _plan(
            target, spec, Path(args.out_dir), conf, as_json=args.json, cache=cache,
            check=check, into=into, until=args.check_until, steps=args.steps,
            max_entries=args.max_entries,
        )  # fmt: skip
    warn_cache(cache, "plan")
    return status


def _launched(target: Target, args: argparse.Namespace) -> tuple[Target, dict[str, str]]:
    """The training script a launcher's command line (``torchrun ... train.py``, ``accelerate
    launch ... train.py``) starts, its world set in ``args``, and the variables the launcher
    sets for it (:mod:`~memforensics.plan.launchers`); any other target as given."""
    from memforensics.plan import launchers

    read = launchers.reader(target.kind, target.name, target.args)
    if read is None:
        return target, {}
    try:
        found = read()
        found = launchers.applied(found, args)
    except launchers.LauncherError as exc:
        raise CommandError(str(exc)) from None
    kind: Literal["script", "module"] = "module" if found.kind == "module" else "script"
    return Target(kind, found.name, found.script_args(args.rank or 0)), dict(found.env)


def _world(args: argparse.Namespace) -> Any:
    """The planned world from --nproc-per-node, --nnodes and --rank; None without them (the
    environment's, torchrun's, then decides)."""
    from memforensics.plan.distributed import World

    if args.nproc_per_node is None:
        if args.ranks is not None or args.rank is not None or args.nnodes != 1:
            raise CommandError("--rank, --ranks and --nnodes need --nproc-per-node")
        return None
    if args.ranks is not None and args.rank is not None:
        raise CommandError("--rank and --ranks all cannot be combined")
    try:
        return World.of(args.nproc_per_node, args.nnodes, args.rank or 0)
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def _torchrun_env(world: Any) -> contextlib.AbstractContextManager[None]:
    """torchrun's variables for ``world`` set for the run (nothing changed for None), and put
    back after."""
    return contextlib.nullcontext() if world is None else environment(world.env())


def _device_flags(args: argparse.Namespace, conf: str | None) -> list[str]:
    """The planned device's options and the run's step limit, as a child plan takes them."""
    steps = [] if args.steps is None else ["--steps", str(args.steps)]
    entries = [] if args.max_entries is None else ["--max-entries", str(args.max_entries)]
    return [
        "--device-memory", args.device_memory, "--device-capability", args.device_capability,
        "--context-memory", args.context_memory, "--alloc-conf", conf or "", *steps, *entries,
    ]  # fmt: skip


def _target_argv(target: Target) -> list[str]:
    return [*(("-m", target.name) if target.kind == "module" else (target.name,)), *target.args]


def _child(command: list[str]) -> dict[str, Any] | str:
    """A child plan's JSON answer, whatever status it exited with, unless its script failed
    for another reason than an OOM: then where and how (its answer's ``failed``), else the last
    line it said."""
    pipe = subprocess.PIPE
    with (  # a process group of its own: Ctrl-C reaches it once, through this plan (started)
        subprocess.Popen(
            command,
            stdout=pipe,
            stderr=pipe,
            text=True,
            start_new_session=True,
            env=child_environment(),
        ) as child,
        started(child),
    ):
        stdout, stderr = child.communicate()
    try:
        found: dict[str, Any] = json.loads(stdout)
    except ValueError:
        pass
    else:
        failed = found.get("failed")
        return found if failed is None else str(failed)
    tail = stderr.strip().splitlines()
    return tail[-1] if tail else f"exit status {child.returncode}"


def _all_ranks(args: argparse.Namespace, target: Target, conf: str | None, world: Any) -> int:
    """Every rank planned in its own process, --jobs at a time; the table and the first rank
    to run out."""
    from memforensics.plan.ranks import SCHEMA, RankRow, RanksAnswer, first_out
    from memforensics.plan.text import ranks_text

    if args.jobs < 1:
        raise CommandError("--jobs must be at least 1")

    def one(rank: int) -> dict[str, Any] | str:
        return _child([
            sys.executable, "-m", "memforensics", "plan", "--json", *_device_flags(args, conf),
            "--out-dir", args.out_dir, "--nproc-per-node", str(args.nproc_per_node),
            "--nnodes", str(args.nnodes), "--rank", str(rank), *_target_argv(target),
        ])  # fmt: skip

    answers, stopped = _at_once(one, range(world.world_size), args.jobs)
    rows = []
    statuses = [stopped]  # the signals' exit statuses: this plan's, then each row's plan's
    for rank, found in enumerate(answers):
        if found is None:  # SIGTERM or Ctrl-C came before its plan began
            continue
        if isinstance(found, str):
            rows.append(RankRow(rank, None, None, None, error=found))
            continue
        fits, interrupted, stop = _so_far(found)
        statuses.append(stop)
        rows.append(
            RankRow(
                rank,
                found["peak_allocated_bytes"],
                found["peak_reserved_bytes"],
                fits,
                oom=found["oom_message"] is not None,
                cause=_cause(found),
                snapshots=tuple(found.get("snapshots") or ()),
                interrupted=interrupted,
                interrupted_by=_signal_word(stop),
            )
        )
    not_planned = tuple(rank for rank, found in enumerate(answers) if found is None)
    answer = RanksAnswer(
        world.world_size, tuple(rows), first_out(rows), stopped == STATUS, not_planned,
        interrupted_by=_signal_word(stopped),
    )  # fmt: skip
    if args.json:
        from memforensics.analysis.schema import document

        print(json.dumps(document(answer, SCHEMA), indent=2))
    else:
        print(ranks_text(answer))
    signalled = _signalled(statuses)
    if signalled is not None:
        return signalled
    if any(r.fits is None and not r.oom for r in rows):
        return 2  # a rank's script failed, as one rank's plan exits
    return 0 if answer.first_out is None and all(r.fits for r in rows) else 1


def _at_once(
    function: Callable[[Any], Any], items: Iterable[Any], jobs: int
) -> tuple[list[Any], int | None]:
    """``function`` of each item, ``jobs`` at a time, in order, and the exit status of the
    signal that stopped them (SIGTERM's or Ctrl-C's; None: none came). Stopped, the items
    not begun are dropped (None in their place): those begun end with their plans, which are
    passed the signal and answer with their figures so far, which are waited for."""
    from concurrent.futures import ThreadPoolExecutor, wait

    items = list(items)
    futures: list[Any] = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        try:
            for item in items:
                futures.append(pool.submit(function, item))
            return [future.result() for future in futures], None
        except (Terminated, KeyboardInterrupt) as came:
            for future in futures:
                future.cancel()  # those not begun; the plans begun were passed the signal
            wait(futures)
            answers = [None if f.cancelled() else f.result() for f in futures]
            status = STATUS if isinstance(came, Terminated) else INTERRUPTED
            return answers + [None] * (len(items) - len(answers)), status
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise


def _so_far(found: dict[str, Any]) -> tuple[bool | None, str | None, int | None]:
    """Whether a child plan's run fits as a table row counts it, where its script was when
    SIGTERM or Ctrl-C stopped it (None: neither did), and that signal's exit status (143 or
    130): a stopped run that fits so far may not fit by its end, so nothing says it fits; one
    that does not fit already does not."""
    status = found.get("exit_status")
    stopped = found.get("interrupted") if status in (STATUS, INTERRUPTED) else None
    fits = bool(found["fits"])
    stop = status if stopped is not None else None
    return (None if stopped is not None and fits else fits), stopped, stop


def _signalled(statuses: list[int | None]) -> int | None:
    """The exit status of a table's plan where a signal stopped it or one of its rows' plans
    alone (the first given), as a plan that signal stopped exits: 143, or 130 for Ctrl-C."""
    return next((status for status in statuses if status is not None), None)


def _signal_word(status: int | None) -> str | None:
    """How the table names the signal whose exit status is ``status``: Ctrl-C or SIGTERM
    (None for None)."""
    from memforensics.plan.text import interrupted_by

    return None if status is None else interrupted_by(status)


def _cause(found: dict[str, Any]) -> str | None:
    """Why a rank's plan does not fit, in words: its OOM's cause, or what it needs."""
    from memforensics._units import format_bytes

    if found["fits"]:
        return None
    verdict = found.get("verdict") or {}
    if found["oom_message"] is not None:
        cause = verdict.get("cause") or found["oom_message"].split(". If ")[0]
        return f"predicted OOM: {cause}"
    return (
        f"needs {format_bytes(found['needed_bytes'])} (peak reserved, the CUDA context and "
        f"NCCL's buffers) of {format_bytes(found['device_bytes'])}"
    )


def _plan(
    target: Target,
    spec: Any,
    out_dir: Path,
    conf: str | None,
    *,
    as_json: bool,
    cache: ResultCache,
    check: Callable[[int], bool | None] | None = None,
    into: Path | None = None,
    until: int | None = None,
    steps: int | None = None,
    max_entries: int | None = None,
) -> int:
    """Run the target planned, capture as ``run`` does, write sidecars and print (the OOM
    dump's story explained as ``summary`` explains it, and kept in ``cache``). ``check``: plans
    it again with expandable segments (whether that run runs out) for a fragmented OOM.
    ``into``: this run is another plan's check: the script's own snapshots go into that
    folder, and capture records nothing; ``until``: it ends after that many allocations;
    ``steps``: it ends when an optimizer comes to its step ``steps`` + 1 (``--steps``).
    ``max_entries``: the events capture's history and the plan's own trace keep, the last ones
    (``--max-entries``; None: capture's configured ``max_entries``)."""
    from memforensics.capture.config import build_config
    from memforensics.capture.facade import current, install, uninstall
    from memforensics.plan import MissingAttribute, OutOfScope, live_models, run_planned

    folders = [out_dir]  # where capture writes: plan's, and the script's own install()
    ending = _Ending(target)
    at_end: list[Any] = []  # the tracked tensors at the script's end, for the final snapshot
    dumped: list[str] = []  # the snapshots the script wrote itself: then none is written at its end
    write_dump = _writer(spec, into)

    def dump(path: str, snapshot: dict[str, Any]) -> None:
        dumped.append(path)
        write_dump(path, snapshot)

    def before() -> None:
        if into is None:
            entries = {} if max_entries is None else {"max_entries": max_entries}
            install(out_dir=str(out_dir), **entries).track(finder=live_models)

    def after() -> None:
        if into is None and not dumped:  # read while the stand-ins answer their addresses
            at_end.append(_tracked_now())
        live = current()
        if live is not None and live.out_dir not in folders:
            folders.append(live.out_dir)
        uninstall()

    started = time.time()
    try:
        with (
            environment({} if conf is None else {_CONF_ENV: conf}),
            contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext(),
        ):
            result, device = run_planned(
                spec, ending.run, dump, before=before, after=after,
                stop_after=until, steps=steps,
                flight_entries=build_config(
                    {} if max_entries is None else {"max_entries": max_entries}
                ).max_entries,
            )  # fmt: skip
    except (OutOfScope, MissingAttribute) as exc:
        print(f"memforensics plan: {exc}", file=sys.stderr)
        return 2
    except BaseException as exc:  # the plan itself failed around the script: show it, exit 2
        if isinstance(exc, (KeyboardInterrupt, Terminated)):
            raise
        _said_failed(exc)
        return 2
    result = ending.told(result)
    if into is not None:
        written = tuple(str(into / Path(path).name) for path in result.script_snapshots)
        result = replace(result, script_snapshots=written)
    status = _answer(
        result, device, spec, folders, started, as_json=as_json, cache=cache, check=check,
        at_end=at_end[0] if at_end else None,
    )  # fmt: skip
    ending.kept = None
    return 2 if ending.failed is not None else status


class _Ending:
    """How the script's run ended where not at its end, as the plan answers it: its own exit
    status, Ctrl-C, ``--steps``, or a failure other than a predicted OOM (which
    :func:`~memforensics.plan.run_planned` answers itself)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.exit_status = 0
        self.interrupted: str | None = None
        self.ended_at_step: str | None = None
        self.failed: Exception | None = None
        self.kept: dict[str, Any] | None = None
        """The script's globals as it left them, held until the plan has read what the
        script kept to its end (the final snapshot, the tracked tensors), as a snapshot the
        script dumped on its last line would show them: released, its tensors would read as
        freed at the end of every trace."""

    def run(self) -> None:
        """Run the script, keeping how it ended and what it kept."""
        from memforensics.plan.runner import predicted_oom
        from memforensics.plan.step_limit import StepsTaken

        try:
            self.kept = run_target(self.target)
        except SystemExit as exc:  # the script's own exit: its status, as python gives it
            self.exit_status = _exit_status(exc)
        except KeyboardInterrupt as exc:  # Ctrl-C: the figures so far, exit as python would
            self.interrupted, self.exit_status = _stopped_at(exc), INTERRUPTED
        except Terminated as exc:  # SIGTERM: the figures so far, exit as a shell reports it
            self.interrupted, self.exit_status = _stopped_at(exc), STATUS
        except StepsTaken as exc:  # --steps reached: the figures of those steps, as an end
            self.ended_at_step = _stopped_at(exc)
        except Exception as exc:  # failed: its traceback, the figures so far, exit 2
            if predicted_oom(exc):
                raise
            self.failed = exc

    def told(self, result: Any) -> Any:
        """``result`` with how the run ended (a failure's traceback shown now)."""
        failed = None if self.failed is None else _said_failed(self.failed)
        return replace(
            result,
            exit_status=self.exit_status or None,
            interrupted=self.interrupted,
            ended_at_step=self.ended_at_step,
            failed=failed,
        )


def _said_failed(exc: BaseException) -> str:
    """Show why the script failed (one line for what a plan does not model, else its
    traceback, with the line :mod:`~memforensics.plan.unemulated` adds where the plan is why):
    where and how, as ``file:line: Error: message``."""
    from memforensics.plan import OutOfScope
    from memforensics.plan.unemulated import unemulated_call

    where = _stopped_at(exc)
    if isinstance(exc, OutOfScope):
        print(f"memforensics plan: {exc}", file=sys.stderr)
        return f"{where}: {exc}"
    traceback.print_exception(type(exc), exc, exc.__traceback__)
    said = unemulated_call(exc, where)
    if said is not None:
        print(said, file=sys.stderr)
    message = str(exc).strip().splitlines()
    return f"{where}: {type(exc).__name__}" + (f": {message[0]}" if message else "")


def _stopped_at(exc: BaseException) -> str:
    """``file:line`` of the innermost frame of the script's own code when it was interrupted
    or failed: not torch's, not memforensics', not python's frozen modules, and not an
    installed library's where the script's own code is on the stack (``trainer.train()``'s
    line, not Accelerate's optimizer wrapper that stepped)."""
    from memforensics.analysis.dump import is_installed_file

    own = tuple(
        os.path.dirname(module.__file__)
        for module in (sys.modules.get("torch"), sys.modules.get("memforensics"))
        if module is not None and module.__file__
    )
    outside = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith(own) and not frame.filename.startswith("<")
    ]
    scripts = [frame for frame in outside if not is_installed_file(frame.filename)]
    frames = scripts or outside
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "an unknown place"


def _exit_status(exc: SystemExit) -> int:
    """The status python exits with for ``exc``: its code, 0 for None, 1 (the message on
    stderr) for anything else."""
    if exc.code is None or isinstance(exc.code, int):
        return int(exc.code or 0)
    print(exc.code, file=sys.stderr)
    return 1


def _say_cut_trace(final: Path, device: Any) -> None:
    """Tell on stderr when the final snapshot's trace lost the run's first events: it keeps
    the last ``--max-entries`` as PyTorch's ring buffer does, while the figures printed are
    the allocator's counts over the whole run."""
    if device.events > device.flight_entries:
        print(
            f"memforensics plan: {final}'s trace keeps the last {device.flight_entries:,} "
            f"of the run's {device.events:,} allocator events, as "
            f"_record_memory_history(max_entries={device.flight_entries}) would; the "
            "figures are the whole run's (--max-entries N keeps more)",
            file=sys.stderr,
        )


def _answer(
    result: Any,
    device: Any,
    spec: Any,
    folders: list[Path],
    started: float,
    *,
    as_json: bool,
    cache: ResultCache,
    check: Callable[[int], bool | None] | None,
    at_end: Any = None,
) -> int:
    """Mark and name the snapshots the run wrote, print the plan; the script's own exit status
    when it gave one, else 0 fits, 1 does not. ``at_end``: the tracked tensors at the script's
    end, which the final snapshot's sidecar lists."""
    snapshots = list(result.script_snapshots)
    for folder in folders:  # what capture wrote during this run (not an earlier run's files)
        if folder.is_dir():
            found = sorted(p for p in folder.glob("**/*.pickle") if p.stat().st_mtime >= started)
            if result.world_size > 1:  # other ranks may be writing there: capture names ranks
                found = [p for p in found if p.name.startswith(f"rank{result.rank}_")]
            snapshots += [str(p) for p in found]
    by_path: dict[str, str] = {}  # the script's own dump and capture's may name one file twice
    for path in snapshots:
        by_path.setdefault(os.path.abspath(path), path)
    snapshots = list(by_path.values())
    caught_only = result.oom_message is None and all(map(_is_oom_dump, snapshots))
    if not snapshots or caught_only:  # the run's end, where capture wrote none of it
        name = f"rank{result.rank}_planned.pickle" if result.world_size > 1 else "planned.pickle"
        final = folders[0] / name
        _writer(spec, tensors=lambda: at_end)(str(final), device.snapshot(flight=True))
        _say_cut_trace(final, device)
        snapshots.append(str(final))
    _mark_predicted(snapshots, spec)
    oom_dump = _oom_dump(snapshots) if result.oom_message is not None else None
    ran_out = None
    if oom_dump is not None and check is not None and _fragmented(oom_dump):
        try:  # as far again as the run that failed: past the failed request
            ran_out = check(device.served + 1)
        except KeyboardInterrupt:  # Ctrl-C during the check: the plan's own figures stand
            ran_out = None
        if ran_out is not None:
            _record_expandable(oom_dump, ran_out)
    verdict = _verdict(oom_dump, cache) if oom_dump is not None else None
    result = replace(result, snapshots=tuple(snapshots), verdict=verdict, oom_expandable=ran_out)
    if as_json:
        from memforensics.analysis.schema import document
        from memforensics.plan.runner import SCHEMA

        print(json.dumps(document(result, SCHEMA), indent=2))
    else:
        from memforensics.plan.text import plan_text

        say(plan_text(result))
    for line in dict.fromkeys(result.warnings):
        print(f"memforensics plan: {line}", file=sys.stderr)
    if result.exit_status:
        return int(result.exit_status)
    return 0 if result.fits else 1


def _vary(args: argparse.Namespace, target: Target, conf: str | None) -> int:
    """Plan each value in its own process, --jobs at a time, as given and with expandable
    segments; print the rows and the largest value that fits."""
    from memforensics.plan.text import vary_text
    from memforensics.plan.vary import (
        SCHEMA,
        Vary,
        VaryAnswer,
        VaryRow,
        largest,
        with_expandable,
    )

    try:
        vary = Vary.parse(args.vary)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if args.jobs < 1:
        raise CommandError("--jobs must be at least 1")
    out_dir = Path(args.out_dir)

    world = _world_flags(args)

    def one(value: str, expandable: bool) -> dict[str, Any] | str:
        own = vary.name in _WORLD_FLAGS  # the plan's own option, not the script's
        planned = target if own else Target(target.kind, target.name, vary.args(target.args, value))
        chosen = with_expandable(conf) if expandable else (conf or "")
        folder = out_dir / f"{vary.name}-{value}{'-expandable' if expandable else ''}"
        flags = dict(world)
        if own:
            flags[f"--{vary.name}"] = value
        # each value's row with expandable segments is its own run: no check inside it
        return _planned_apart(args, planned, chosen, folder, "--no-expandable-check", *_argv(flags))

    jobs = [(value, expandable) for value in vary.values for expandable in (False, True)]
    answers, stopped = _at_once(lambda job: one(*job), jobs, args.jobs)
    rows = []
    not_planned = []
    statuses = [stopped]  # the signals' exit statuses: this plan's, then each row's plans'
    for i, value in enumerate(vary.values):
        plain, grown = answers[2 * i], answers[2 * i + 1]
        if plain is None:  # SIGTERM or Ctrl-C came before its plan began
            not_planned.append(value)
            continue
        if isinstance(plain, str):
            rows.append(VaryRow(value, None, None, None, None, plain))
            continue
        fits, interrupted, stop = _so_far(plain)
        fits_expandable, interrupted_expandable, stop_expandable = (
            _so_far(grown) if isinstance(grown, dict) else (None, None, None)
        )
        statuses += [stop, stop_expandable]
        rows.append(
            VaryRow(
                value,
                plain["peak_allocated_bytes"],
                plain["peak_reserved_bytes"],
                fits,
                fits_expandable,
                oom=plain["oom_message"] is not None,
                oom_expandable=isinstance(grown, dict) and grown["oom_message"] is not None,
                interrupted=interrupted or interrupted_expandable,
                interrupted_by=_signal_word(stop or stop_expandable),
            )
        )
    answer = VaryAnswer(
        vary.name, tuple(rows), largest(rows, expandable=False),
        largest(rows, expandable=True), stopped == STATUS, tuple(not_planned),
        interrupted_by=_signal_word(stopped),
    )  # fmt: skip
    if args.json:
        from memforensics.analysis.schema import document

        print(json.dumps(document(answer, SCHEMA), indent=2))
    else:
        say(vary_text(answer))
    signalled = _signalled(statuses)
    if signalled is not None:
        return signalled
    return 0 if answer.largest is not None else 1


_WORLD_FLAGS = ("nproc-per-node", "nnodes", "rank")
"""Options of the plan itself that ``--vary`` sets on the plan, not on the script."""


def _world_flags(args: argparse.Namespace) -> dict[str, str]:
    """The world options given, as a child plan takes them."""
    found = {"--nproc-per-node": args.nproc_per_node, "--nnodes": args.nnodes, "--rank": args.rank}
    if args.nproc_per_node is None:
        found.pop("--nproc-per-node")
    return {k: str(v) for k, v in found.items() if v is not None}


def _argv(flags: dict[str, str]) -> list[str]:
    """Options as a child plan's command line takes them."""
    return [part for pair in flags.items() for part in pair]


def _planned_apart(
    args: argparse.Namespace, target: Target, conf: str, out_dir: Path, *extra: str
) -> dict[str, Any] | str:
    """``plan --json`` of ``target`` in its own process (a plan changes the interpreter) on the
    same planned device under ``conf``: its answer, or the last line it said when it gave none."""
    command = [
        sys.executable, "-m", "memforensics", "plan", "--json", *_device_flags(args, conf),
        "--out-dir", str(out_dir), *extra, *_target_argv(target),
    ]  # fmt: skip
    return _child(command)


def _expandable_check(
    args: argparse.Namespace, target: Target, conf: str | None
) -> Callable[[int], bool | None]:
    """Plans ``target`` again with ``expandable_segments:True`` (under ``--out-dir``'s
    ``expandable/``, the script's own snapshots there too, capture off), up to twice the
    allocations the run that failed asked for (its failed request, and as many again; a long
    script is not run to its end): whether it runs out by then; None when that run failed for
    another reason."""
    from memforensics.plan.vary import with_expandable

    def check(requests: int) -> bool | None:
        folder = Path(args.out_dir) / EXPANDABLE_FOLDER
        with environment({_RANKS_ENV: "[]"}):  # the script's own install() captures nothing
            found = _planned_apart(
                args, target, with_expandable(conf), folder, "--check-into", str(folder),
                "--check-until", str(2 * requests), *_argv(_world_flags(args)),
            )  # fmt: skip
        if isinstance(found, str):
            return None
        return found.get("oom_message") is not None

    return check


def _oom_dump(snapshots: list[str]) -> Path | None:
    """The OOM dump of the OOM that ended the run: the last capture wrote (those before it are
    OOMs the script caught and went on from)."""
    dumps = [Path(path) for path in snapshots if _is_oom_dump(path)]
    return dumps[-1] if dumps else None


def _is_oom_dump(path: str) -> bool:
    """Whether capture wrote ``path`` for an OOM (into its ``oom`` folder)."""
    return Path(path).parent.name == "oom"


def _fragmented(path: Path) -> bool:
    """Whether the allocator's verdict on the OOM dump is fragmentation (no replay asked)."""
    from memforensics.analysis import explain

    return bool(explain(path, replay=False).verdict.name == "fragmentation")


def _record_expandable(path: Path, ran_out: bool) -> None:
    """Write into the OOM dump's sidecar (its ``predicted`` object) whether the run with
    expandable segments ran out too, so ``summary`` of the dump reads the same answer."""
    from memforensics._layout import OOM_EXPANDABLE, sidecar_path
    from memforensics.capture.atomic import write_sidecar

    side = sidecar_path(path)
    try:
        found = json.loads(side.read_text())
    except (OSError, ValueError):
        return
    if isinstance(found, dict) and isinstance(found.get(PREDICTED), dict):
        found[PREDICTED][OOM_EXPANDABLE] = ran_out
        write_sidecar(side, found)


def _tracked_now() -> Any:
    """The tensors of every module and optimizer alive now, as capture's tracker lists them in
    a sidecar (``tensors``), or None where none is alive: what a planned snapshot knows of its
    kinds. Read while the plan runs, when a stand-in answers its block's address; a walk that
    fails lists nothing, as capture's does, and never ends the plan."""
    from memforensics.capture.track import Tracker
    from memforensics.plan import live_models

    tracker = Tracker()
    tracker.find_with(live_models)
    try:
        return tracker.tensors("cuda")
    except Exception:  # noqa: BLE001 - the script's objects may answer anything: no kinds known
        return None


def _writer(spec: Any, into: Path | None = None, tensors: Callable[[], Any] | None = None) -> Any:
    """Writes a snapshot the run dumps (the script's own path, or its name in ``into``) and
    its predicted sidecar, with the tracked tensors ``tensors`` gives (by default those alive
    as it is written; none in ``into``, another plan's check, where capture records nothing)."""
    if tensors is None:
        tensors = _tracked_now if into is None else lambda: None
    from memforensics._layout import sidecar_path
    from memforensics.analysis.dump import marked_peak
    from memforensics.capture.atomic import utc_now, write_sidecar, write_snapshot
    from memforensics.capture.sidecar import SidecarContext, build_sidecar

    def write(path: str, snapshot: dict[str, Any]) -> None:
        final = Path(path) if into is None else into / Path(path).name
        if final.parent != Path(""):
            final.parent.mkdir(parents=True, exist_ok=True)
        size = write_snapshot(final, snapshot)
        from memforensics.plan.distributed import World

        world = World.from_env()
        context = SidecarContext.collect(
            rank=world.rank,
            world_size=world.world_size if world.world_size > 1 else None,
            device="cuda",
            torch_version=_torch_version(),
        )
        sidecar = build_sidecar(
            context,
            kind="manual",
            snapshot_file=final,
            snapshot_bytes=size,
            created_at=utc_now(),
            device_index=0,
            tensors=tensors(),
            peak_allocated_bytes=marked_peak(snapshot),
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


def _verdict(path: Path, cache: ResultCache) -> Any:
    """The diagnosis and verdict of the predicted OOM dump: the story ``summary`` tells of it
    (kept in ``cache``, so ``summary`` of that dump reads it back)."""
    from memforensics.cli._explained import explained
    from memforensics.plan.runner import PlanVerdict

    summary = explained(cache, path)
    verdict = summary.verdict
    return PlanVerdict(
        cause=summary.diagnosis.headline if summary.diagnosis is not None else "",
        label=verdict.label,
        explanation=verdict.explanation,
        advice=verdict.advice or "",
    )


def _one_line(parser: argparse.ArgumentParser) -> Callable[[str], NoReturn]:
    """argparse's error for ``parser`` as one line on stderr (no usage block), exit status 2."""

    def error(message: str) -> NoReturn:
        parser.exit(2, f"{parser.prog}: {message} (see --help)\n")

    return error


def _size(text: str, flag: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise CommandError(f"{flag}: {exc}") from None


def _capability(text: str) -> tuple[int, int]:
    try:
        major, minor = (int(part) for part in text.split("."))
    except ValueError:
        major = minor = -1
    if major < 1 or minor < 0:
        raise CommandError(f"--device-capability must be MAJOR.MINOR, got {text!r}")
    return major, minor
