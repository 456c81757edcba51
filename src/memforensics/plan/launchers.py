"""A job's launcher command line planned as the ranks it starts: ``torchrun ... train.py``.

A distributed job is started by a launcher (``torchrun --nproc-per-node 8 train.py --lr 3e-4``,
or ``python -m torch.distributed.run``), which starts one process per rank with torchrun's
variables set and supervises them. Planned as it is, the launcher would start real processes,
which run on the CPU with no planned device and fail. So the launcher's own options are read
with torch's own parser (``torch.distributed.run.get_args_parser``), and the plan runs the
training script or module it names, as the rank of a world of ``--nproc-per-node`` times
``--nnodes`` it would start (``--node-rank``'s first, unless the plan's ``--rank`` names
another), exactly as ``plan --nproc-per-node N train.py`` does. The rendezvous and supervision
options (``--standalone``, ``--rdzv-*``, ``--max-restarts``) change nothing a rank allocates.

``accelerate launch [options] train.py`` is read the same way, with Accelerate's own parser and
its own checks (``_validate_launch_command``, which also takes the defaults of ``accelerate
config``'s file): the world it starts, and the variables it sets for the script
(``ACCELERATE_MIXED_PRECISION``, ``ACCELERATE_USE_FSDP`` and its ``FSDP_*``, DeepSpeed's,
dynamo's), which the script's ``Accelerator`` reads; a single process is planned as
``python train.py`` with those variables.

DeepSpeed's launcher (``deepspeed --num_gpus 8 train.py``) is read with its own parser
(``deepspeed.launcher.runner.parse_args``), and, as its per-node launcher does, the script gets
``--local_rank=R`` (the planned rank's local rank) before its own arguments unless
``--no_local_rank`` is given. Its hosts and GPUs are read with its own functions (hostfile,
``--include``/``--exclude``, ``--num_nodes``/``--num_gpus``, ``CUDA_VISIBLE_DEVICES``); every
GPU of the machine is as many as the plan's ``--nproc-per-node``.

Accelerate and DeepSpeed are read in a process of their own: importing them decides things
once for the process (DeepSpeed picks its accelerator, the CPU on the planning host, and its
logger writes to the stdout it finds), which the planned script must decide on the planned
device.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

MODULES = ("torch.distributed.run",)
"""Launcher modules a script is planned through (``python -m torch.distributed.run``)."""
SCRIPTS = ("torchrun",)
"""Launchers' console scripts, by name (``torchrun``, or the path ``which torchrun`` gives)."""
ACCELERATE_SCRIPT = "accelerate"
"""Accelerate's console script, whose ``launch`` command starts a job."""
ACCELERATE_MODULES = ("accelerate.commands.launch", "accelerate.commands.accelerate_cli")
DEEPSPEED_SCRIPT = "deepspeed"
DEEPSPEED_MODULE = "deepspeed.launcher.runner"


class LauncherError(ValueError):
    """The launcher's command line names no job a plan can run; the message says what to
    give instead."""


@dataclass(frozen=True)
class Launched:
    """The training script or module a launcher starts, the world it starts it in, and the
    variables it sets for it."""

    kind: str
    """``"script"`` or ``"module"`` (the launcher's ``-m``)."""
    name: str
    args: tuple[str, ...]
    nproc_per_node: int
    nnodes: int
    node_rank: int
    distributed: bool = True
    """Whether the launcher starts ranks (torchrun's variables set); False for one plain
    process (``accelerate launch`` of a single GPU), planned as ``python train.py``."""
    env: Mapping[str, str] = field(default_factory=dict)
    """What the launcher sets in the script's environment besides torchrun's variables."""
    local_rank_argument: bool = False
    """Whether the script gets ``--local_rank=R`` first among its arguments (DeepSpeed's)."""
    every_gpu: str = ""
    """How the command line asks for a process on every GPU of the machine (``torchrun
    --nproc-per-node gpu``), where it does (``nproc_per_node`` 0): the plan's
    ``--nproc-per-node`` then says how many that is."""

    def script_args(self, rank: int) -> tuple[str, ...]:
        """The script's arguments as the launcher gives them to ``rank``."""
        if not self.local_rank_argument:
            return self.args
        return (f"--local_rank={rank % self.nproc_per_node}", *self.args)


def reader(kind: str, name: str, args: Sequence[str]) -> Callable[[], Launched] | None:
    """What reads the job from ``python -m name args`` (``kind`` ``"module"``) or ``python name
    args`` where that starts a launcher; None for a script of the user's own."""
    if kind == "module" and name in MODULES:
        return lambda: _torchrun(args)
    if kind == "script" and os.path.basename(name) in SCRIPTS:
        return lambda: _torchrun(args)
    command = list(args)
    launch = kind == "script" and os.path.basename(name) == ACCELERATE_SCRIPT
    launch = launch or (kind == "module" and name == ACCELERATE_MODULES[1])
    if launch and command[:1] == ["launch"]:
        return lambda: _read_apart("accelerate", command[1:])
    if kind == "module" and name == ACCELERATE_MODULES[0]:
        return lambda: _read_apart("accelerate", command)
    if (kind == "module" and name == DEEPSPEED_MODULE) or (
        kind == "script" and os.path.basename(name) == DEEPSPEED_SCRIPT
    ):
        return lambda: _read_apart("deepspeed", command)
    return None


_SAID = "memforensics-launched: "
"""How the reading process's answer line begins, among what the library printed."""


def _read_apart(launcher: str, args: Sequence[str]) -> Launched:
    """``launcher``'s command line read in a process of its own (``python -m
    memforensics.plan.launchers LAUNCHER ARGS``)."""
    command = [sys.executable, "-m", __name__, launcher, *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    answers = [line[len(_SAID) :] for line in done.stdout.splitlines() if line.startswith(_SAID)]
    if not answers:
        tail = done.stderr.strip().splitlines()
        _refused(tail[-1] if tail else f"exit status {done.returncode}", launcher)
    found = json.loads(answers[-1])
    if "refused" in found:
        raise LauncherError(found["refused"])
    read = found["launched"]
    return Launched(**{**read, "args": tuple(read["args"])})


def _refused(message: str, launcher: str = "torchrun") -> NoReturn:
    raise LauncherError(f"{launcher}: {message}")


_MACHINE_GPUS = frozenset({"gpu", "auto"})
"""torchrun's ``--nproc-per-node`` values that start a process on every GPU of the machine."""


def _count(option: str, value: str) -> int:
    """A count torchrun takes as a string: a positive number, or a range whose bounds agree;
    0 for every GPU of the machine."""
    low, _, high = value.partition(":")
    if high and high != low:
        _refused(
            f"{option} {value} is elastic; give the number of nodes the job runs on, as "
            f"{option} {high}"
        )
    if option == "--nproc-per-node" and value in _MACHINE_GPUS:
        return 0  # the machine's GPUs: as many as the plan's --nproc-per-node (applied)
    if not low.isdigit() or int(low) < 1:
        _refused(
            f"{option} {value} counts the devices of the machine it runs on; give the number "
            f"of processes the job starts on each node, as {option} 8"
        )
    return int(low)


def _torchrun(args: Sequence[str]) -> Launched:
    """What torchrun started with ``args`` (its options, then the script and its arguments)
    would run, read with torch's own parser; :class:`LauncherError` where it names no
    script a plan can run."""
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()

    def error(message: str) -> NoReturn:
        _refused(message)

    setattr(parser, "error", error)  # noqa: B010  # one line, not torchrun's usage and exit
    found: Any = parser.parse_args(list(args))
    if found.no_python:
        _refused("--no-python starts a program that is not python, which a plan cannot run")
    nproc = _count("--nproc-per-node", str(found.nproc_per_node))
    nnodes = _count("--nnodes", str(found.nnodes))
    if not 0 <= found.node_rank < nnodes:
        _refused(f"--node-rank {found.node_rank} is not a node of --nnodes {nnodes}")
    return Launched(
        "module" if found.module else "script",
        found.training_script,
        tuple(found.training_script_args),
        nproc,
        nnodes,
        found.node_rank,
        every_gpu="" if nproc else f"torchrun --nproc-per-node {found.nproc_per_node}",
    )


def _accelerate(args: Sequence[str]) -> Launched:
    """What ``accelerate launch`` with ``args`` would start, read with Accelerate's own parser
    and checks (the defaults of its config file too), and the variables it would set."""
    try:
        from accelerate.commands.launch import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
            _validate_launch_command,
            launch_command_parser,
        )
        from accelerate.utils import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
            launch as prepared,
        )
    except ImportError as exc:
        _refused(f"this Accelerate cannot be read ({exc})", "accelerate launch")
    parser = launch_command_parser()

    def error(message: str) -> NoReturn:
        _refused(message, "accelerate launch")

    setattr(parser, "error", error)  # noqa: B010  # one line, not Accelerate's usage and exit
    found: Any = parser.parse_args(list(args))
    before = dict(os.environ)
    try:
        found, _, _ = _validate_launch_command(found)
        several = (found.num_processes or 1) > 1 and not found.cpu
        if several and not (found.use_deepspeed or found.use_fsdp or found.use_megatron_lm):
            found.multi_gpu = True  # as Accelerate decides on a node of several GPUs
        if found.use_deepspeed and not found.cpu:
            _, env = prepared.prepare_deepspeed_cmd_env(found)
        elif (found.multi_gpu or found.use_fsdp or found.use_megatron_lm) and not found.cpu:
            env = prepared.prepare_multi_gpu_env(found)
        else:
            _, env = prepared.prepare_simple_launcher_cmd_env(found)
    except (ValueError, AssertionError, RuntimeError) as exc:
        _refused(str(exc).strip().splitlines()[0], "accelerate launch")
    if found.no_python:
        _refused("--no_python starts a program that is not python", "accelerate launch")
    machines = int(found.num_machines or 1)
    processes = int(found.num_processes or 1)
    distributed = not found.cpu and (
        found.use_deepspeed or found.use_fsdp or found.multi_gpu or found.use_megatron_lm
    )
    return Launched(
        "module" if found.module else "script",
        found.training_script,
        tuple(found.training_script_args),
        max(processes // machines, 1),
        machines,
        int(found.machine_rank or 0),
        distributed=bool(distributed),
        env={k: v for k, v in env.items() if before.get(k) != v and k not in _WORLD},
    )


def _deepspeed(args: Sequence[str]) -> Launched:
    """What DeepSpeed's launcher started with ``args`` would run on one node, read with its own
    parser and its own reading of the hosts and GPUs it starts on (its hostfile, ``--include``,
    ``--exclude``, ``--num_nodes``, ``--num_gpus``, ``CUDA_VISIBLE_DEVICES``)."""
    import contextlib
    import io

    try:
        from deepspeed.launcher import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
            runner,
        )
    except ImportError as exc:
        _refused(f"this DeepSpeed cannot be read ({exc})", "deepspeed")
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            found: Any = runner.parse_args(list(args))
    except SystemExit:
        lines = said.getvalue().strip().splitlines()
        _refused((lines[-1].split(": error: ")[-1] if lines else "bad options"), "deepspeed")
    if found.no_python:
        _refused("--no_python starts a program that is not python", "deepspeed")
    nproc, nodes = _deepspeed_hosts(runner, found)
    node_rank = max(found.node_rank, 0)
    if node_rank >= nodes:
        _refused(f"--node_rank {node_rank} is not a node of {nodes}", "deepspeed")
    return Launched(
        "module" if found.module else "script",
        found.user_script,
        tuple(found.user_args),
        nproc,
        nodes,
        node_rank,
        local_rank_argument=not found.no_local_rank,
        every_gpu="" if nproc else "deepspeed without --num_gpus",
    )


def _deepspeed_hosts(runner: Any, found: Any) -> tuple[int, int]:
    """``(processes a node, nodes)`` DeepSpeed's launcher starts, as its ``main`` works them
    out: the hosts and slots of its hostfile (or of this machine), filtered by ``--include`` or
    ``--exclude`` and cut by ``--num_nodes`` and ``--num_gpus``; 0 processes a node where that
    is every GPU of this machine, which the plan's ``--nproc-per-node`` gives (:func:`applied`).
    """
    pool = runner.fetch_hostfile(found.hostfile)
    include, exclude = found.include, found.exclude
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    chosen = include or exclude or found.num_nodes > 1 or found.num_gpus > 0
    if not pool and visible and not chosen:  # DeepSpeed's own reading of the variable
        include = f"localhost:{visible}"
    if (found.num_nodes >= 0 or found.num_gpus >= 0) and (include or exclude):
        _refused("--num_nodes and --num_gpus cannot be combined with --include or --exclude",
                 "deepspeed")  # fmt: skip
    if not pool:  # this machine alone: its GPUs are the planned node's, which only plan knows
        if exclude or (include and not _slots_named(include)):
            _refused(
                "--include or --exclude without a hostfile counts this machine's GPUs; name "
                "the GPUs (--include localhost:0,1) or give --num_gpus N",
                "deepspeed",
            )
        if not include:
            return max(found.num_gpus, 0), max(found.num_nodes, 1)
        pool = {host: 1 + max(slots) for host, slots in _named_slots(include).items()}
    try:
        active = runner.parse_inclusion_exclusion(pool, include, exclude)
        active = runner.apply_num_nodes_and_gpus(active, found.num_nodes, found.num_gpus)
    except ValueError as exc:
        _refused(str(exc), "deepspeed")
    counts = {host: len(slots) for host, slots in active.items()}
    if not counts:
        _refused("the hosts and GPUs named leave no GPU to start a process on", "deepspeed")
    if len(set(counts.values())) > 1:
        each = ", ".join(f"{host} {count}" for host, count in counts.items())
        _refused(f"the hosts start different numbers of processes ({each}); a plan takes one "
                 "number a node", "deepspeed")  # fmt: skip
    return next(iter(counts.values())), len(counts)


def _named_slots(spec: str) -> dict[str, list[int]]:
    """The GPUs a DeepSpeed host filter (``worker-0:0,1@worker-1:2``) names, by host."""
    named: dict[str, list[int]] = {}
    for node in spec.split("@"):
        host, _, slots = node.partition(":")
        named[host] = [int(slot) for slot in slots.split(",") if slot.strip().isdigit()]
    return named


def _slots_named(spec: str) -> bool:
    """Whether a host filter names the GPUs of every host it names (not a whole host)."""
    return all(_named_slots(spec).values())


_WORLD = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}
)
"""torchrun's variables, which the plan sets for the planned rank itself."""


def applied(found: Launched, args: argparse.Namespace) -> Launched:
    """The job as planned, and the plan's world options (``args``) set from it: the launcher's
    world, where the plan's own ``--nproc-per-node`` and ``--nnodes`` do not say another (the
    same job on another number of GPUs: how ``--vary nproc-per-node`` plans a launcher's job,
    said on stderr where it differs); the plan's ``--rank`` still picks the rank, else the
    node's first. A launcher of one plain process changes nothing. A launcher asking for a
    process on every GPU of the machine starts as many as ``--nproc-per-node``."""
    if not found.distributed:
        return found
    if found.every_gpu and args.nproc_per_node is None:
        raise LauncherError(
            f"{found.every_gpu} starts a process on every GPU of the machine; give plan's "
            "--nproc-per-node N (the GPUs a node has), or the launcher its count"
        )
    nproc, nnodes = found.nproc_per_node, found.nnodes
    if args.nproc_per_node is not None and args.nproc_per_node != nproc:
        if not found.every_gpu:
            _said_instead("--nproc-per-node", args.nproc_per_node, nproc)
        nproc = args.nproc_per_node
    if args.nnodes not in (1, nnodes):  # 1: the plan's default, not a choice
        _said_instead("--nnodes", args.nnodes, nnodes)
        nnodes = args.nnodes
    found = dataclasses.replace(found, nproc_per_node=nproc, nnodes=nnodes)
    args.nproc_per_node, args.nnodes = found.nproc_per_node, found.nnodes
    if args.rank is None and args.ranks is None and found.node_rank:
        args.rank = found.node_rank * found.nproc_per_node
    if found.node_rank >= found.nnodes:
        raise LauncherError(
            f"the launcher's node {found.node_rank} is not a node of --nnodes {found.nnodes}"
        )
    return found


def _said_instead(option: str, planned: int, launched: int) -> None:
    """Say on stderr that the plan's own world option stands where the launcher's differs."""
    print(
        f"memforensics plan: planned with {option} {planned}, where the launcher starts {launched}",
        file=sys.stderr,
    )


def main(argv: Sequence[str]) -> int:
    """The reading process: :data:`_SAID` and the launched job (or why none) as JSON."""
    readers = {"accelerate": _accelerate, "deepspeed": _deepspeed}
    try:
        found: dict[str, Any] = {"launched": dataclasses.asdict(readers[argv[0]](argv[1:]))}
    except LauncherError as exc:
        found = {"refused": str(exc)}
    print(_SAID + json.dumps(found), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
