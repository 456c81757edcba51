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
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

MODULES = ("torch.distributed.run",)
"""Launcher modules a script is planned through (``python -m torch.distributed.run``)."""
SCRIPTS = ("torchrun",)
"""Launchers' console scripts, by name (``torchrun``, or the path ``which torchrun`` gives)."""


class LauncherError(ValueError):
    """The launcher's command line names no job a plan can run; the message says what to
    give instead."""


@dataclass(frozen=True)
class Launched:
    """The training script or module a launcher starts, and the world it starts it in."""

    kind: str
    """``"script"`` or ``"module"`` (torchrun's ``-m``)."""
    name: str
    args: tuple[str, ...]
    nproc_per_node: int
    nnodes: int
    node_rank: int


def is_launcher(kind: str, name: str) -> bool:
    """Whether ``python -m name`` (``kind`` ``"module"``) or ``python name`` starts a launcher."""
    if kind == "module":
        return name in MODULES
    return os.path.basename(name) in SCRIPTS


def _refused(message: str) -> NoReturn:
    raise LauncherError(f"torchrun: {message}")


def _count(option: str, value: str) -> int:
    """A count torchrun takes as a string: a positive number, or a range whose bounds agree."""
    low, _, high = value.partition(":")
    if high and high != low:
        _refused(
            f"{option} {value} is elastic; give the number of nodes the job runs on, as "
            f"{option} {high}"
        )
    if not low.isdigit() or int(low) < 1:
        _refused(
            f"{option} {value} counts the devices of the machine it runs on; give the number "
            f"of processes the job starts on each node, as {option} 8"
        )
    return int(low)


def launched(args: Sequence[str]) -> Launched:
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
    )


def applied(found: Launched, args: argparse.Namespace) -> None:
    """The plan's world options (``args``) set from the launcher's, which the plan's own must
    agree with where given; the plan's ``--rank`` still picks the rank, else the node's
    first."""
    if args.nproc_per_node not in (None, found.nproc_per_node):
        _refused(
            f"--nproc-per-node {found.nproc_per_node} differs from plan's --nproc-per-node "
            f"{args.nproc_per_node}"
        )
    if args.nnodes not in (1, found.nnodes):
        _refused(f"--nnodes {found.nnodes} differs from plan's --nnodes {args.nnodes}")
    args.nproc_per_node, args.nnodes = found.nproc_per_node, found.nnodes
    if args.rank is None and args.ranks is None and found.node_rank:
        args.rank = found.node_rank * found.nproc_per_node
