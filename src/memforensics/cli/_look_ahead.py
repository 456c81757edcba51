"""Looking ahead: once a command has printed its answer about a dump it read, a detached
background process works out what the other per-dump commands would answer about it, so they
answer from the cache instead of reading the dump again.

Reading a big dump is most of any command's time, and the next command on the same dump (the
usual ``summary``, then ``replay``, then ``report``) would pay it again; ``replay``'s passes of
the allocator model cost more than the read. The dump is already in memory when the first
command ends, so a fork of it can answer the rest without reading anything: the child inherits
the loaded dump copy-on-write, leaves the terminal's session, points its standard streams at
``/dev/null`` (a pipe or terminal the user reads closes when the command exits, as before),
lowers its priority and keeps each answer in the cache as the commands themselves would, with
their own code and default flags.

Each answer the child will keep is claimed in the cache (a lock per dump and answer, taken
before the fork, so a command run right after this one sees it) until the child has kept it; a
command that misses the cache on one of those answers waits for its claim and then reads what
the look-ahead kept; any other question (``--top 30``, ``--set ...``) does not wait. The child
answers what a user most often asks next first. A
look-ahead never changes what a command prints or its exit status, and anything that goes
wrong in it is dropped: the command that needs the answer then works it out itself.

It runs only when the cache is on (it has nowhere else to put answers), on POSIX (fork, flock),
and by default only when stderr is a terminal: someone is at the keyboard, about to run the
next command; scripts, pipes and CI get no background work unless they ask (``--look-ahead``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from memforensics.analysis import Dump
from memforensics.analysis.cache import AnswerCache, Claim
from memforensics.cli._command import Command
from memforensics.cli.registry import all_commands

_NICENESS = 10
_ORDER = ("summary", "replay", "report")


@runtime_checkable
class AnswersAhead(Protocol):
    """A command that can work out its answers about a dump already in memory."""

    name: str

    def questions_ahead(self) -> list[str]:
        """The cache's names of what :meth:`answer_ahead` keeps about a dump."""
        ...

    def answer_ahead(self, path: Path, dump: Dump, cache: AnswerCache) -> None:
        """Keep in ``cache`` what the command with its default flags answers about ``dump``
        (read from ``path``), or reads of it, unless the cache holds it already."""
        ...


def look_ahead(args: argparse.Namespace, cache: AnswerCache, loaded: Mapping[Path, Dump]) -> None:
    """Leave the other commands' answers about ``loaded`` to a detached child, when asked
    (``--look-ahead``, or by default on a terminal); returns at once either way."""
    if not loaded or not _wanted(args, cache):
        return
    try:
        found: list[AnswersAhead] = [c for c in all_commands() if isinstance(c, AnswersAhead)]
        followers = [(c, c.questions_ahead()) for c in sorted(found, key=_likely_next)]
    except Exception:  # noqa: BLE001 - the command's answer is printed; the rest is a bonus
        return
    claim = cache.claim(list(loaded), [q for _, asked in followers for q in asked])
    if claim is None:  # another process is at it, or the cache cannot hold locks
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
    except (OSError, ValueError):
        claim.close()
        return
    if pid == 0:
        _work_detached(cache, loaded, followers, claim)
    claim.close()  # the child's descriptors keep the claim until it is done
    with contextlib.suppress(OSError):
        os.waitpid(pid, 0)  # the first child exits as soon as it has forked the worker


def _likely_next(command: AnswersAhead) -> int:
    """The order the look-ahead answers in: what a user most often asks next about the same
    dump first (the other rendering of a summary, its replay, its report), then what ``diff``
    and ``leaks`` read of it."""
    return _ORDER.index(command.name) if command.name in _ORDER else len(_ORDER)


def _wanted(args: argparse.Namespace, cache: AnswerCache) -> bool:
    asked: bool | None = getattr(args, "look_ahead", None)
    if asked is None:
        asked = sys.stderr.isatty()
    return asked and cache.enabled and hasattr(os, "fork")


def _work_detached(
    cache: AnswerCache,
    loaded: Mapping[Path, Dump],
    followers: list[tuple[AnswersAhead, list[str]]],
    claim: Claim,
) -> None:
    """In the first child: start a new session, fork the worker and exit; the worker (whose
    parent is then init, so nobody waits for it) answers, letting go of each answer's claim as
    soon as it is kept, and exits. Never returns."""
    try:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        _let_go_of_descriptors(keep=list(claim.handles.values()))
        with contextlib.suppress(OSError):
            os.nice(_NICENESS)
        for path, dump in loaded.items():
            for command, asked in followers:
                with contextlib.suppress(Exception):
                    command.answer_ahead(path, dump, cache)
                cache.finish([path], asked)
        claim.finish_all()
    finally:
        os._exit(0)


def default_args(
    command: Command, *positional: str
) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    """``command``'s arguments with every flag at its default (``--jobs``: the CPU count, as the
    command would run; the look-ahead's low priority leaves the CPUs to whatever else runs),
    quiet and without a look-ahead of its own; and its parser."""
    parser = argparse.ArgumentParser(prog=f"memforensics {command.name}")
    command.prepare_parser(parser)
    args = parser.parse_args(list(positional))
    args.quiet, args.look_ahead = True, False
    return args, parser


def _let_go_of_descriptors(keep: list[int]) -> None:
    """Point stdin, stdout and stderr at /dev/null and close every other descriptor but the
    claim's, so no pipe, terminal or file of the user's (or of whatever started the command)
    is held open by the look-ahead, and nothing it might print reaches them."""
    null = os.open(os.devnull, os.O_RDWR)
    for stream in (0, 1, 2):
        os.dup2(null, stream)
    low = 3
    for handle in sorted(keep):
        if handle >= low:
            os.closerange(low, handle)
            low = handle + 1
    try:
        most = os.sysconf("SC_OPEN_MAX")
    except (OSError, ValueError):
        most = 1 << 16
    os.closerange(low, most)
