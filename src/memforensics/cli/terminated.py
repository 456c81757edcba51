"""SIGTERM and Ctrl-C while ``plan`` runs: exceptions that unwind, passed on to the plans it
started, not deaths that leave files and plans behind.

A batch system's time limit, ``timeout`` and ``kill`` end a process with SIGTERM, whose default
action ends it on the spot: a planned run's folders under the temporary directory (its ``nvcc``,
its ``nvidia-smi``) stay there, the plans of other ranks or values it started go on without it,
and the figures so far are lost. While :func:`raised` holds, SIGTERM first passes the signal on
to the plans it started (:func:`started`), then raises :class:`Terminated` in the main thread,
which unwinds every ``with`` and ``finally`` as Ctrl-C does. The command answers with the
figures so far and exits :data:`STATUS`, as a shell reports a program that SIGTERM ended.

Ctrl-C (SIGINT) raises ``KeyboardInterrupt`` as python's own handler does, after passing
SIGINT on to each plan started, to its whole process group as a terminal's Ctrl-C reaches the
foreground group. Each started plan leads a process group of its own (``start_new_session``,
as ``torchrun`` starts its workers), so a terminal's Ctrl-C reaches it once, through this
process, whether it was pressed or this process alone was sent SIGINT (``kill -INT``): one
interrupt, one answer with the figures so far. The command exits :data:`INTERRUPTED`.

A plan started so outlives nothing: it is told the process that started it
(:func:`child_environment`) and, on Linux, asks the kernel for SIGTERM when that process dies
(:func:`follow_parent`, ``PR_SET_PDEATHSIG``), so a ``kill -9`` of the command, or of its
process group, which no longer holds the plans it started, ends them too.

A script that installs its own SIGTERM or SIGINT handler replaces this one while it runs (its
handler is what the signal does to it on a GPU too); the handler the process had before is put
back after. A signal the process ignores (SIGINT in a shell's background job) stays ignored.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

STATUS = 128 + signal.SIGTERM
"""The exit status a shell gives a program that SIGTERM ended (143)."""

INTERRUPTED = 128 + signal.SIGINT
"""The exit status a shell gives a program that SIGINT (Ctrl-C) ended (130)."""

PARENT = "MEMFORENSICS_PLAN_PARENT"
"""The variable that tells a plan the process id of the plan that started it."""
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

_children: set[subprocess.Popen[str]] = set()
_came: list[int] = []  # the signals that came, in order: a plan started after is passed them
_lock = threading.RLock()  # the handler runs in the main thread, which may hold it


class Terminated(BaseException):
    """SIGTERM arrived: a ``BaseException``, so a script's ``except Exception`` lets it by, as
    it lets ``KeyboardInterrupt`` by."""


@contextmanager
def raised() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` while the block runs, where the process would
    otherwise die of it (the default action, in the main thread), and Ctrl-C raises
    ``KeyboardInterrupt`` where python's handler would; each is passed on to the plans
    started first. As it was after."""
    main = threading.current_thread() is threading.main_thread()
    usual: dict[int, Any] = {
        signal.SIGTERM: signal.SIG_DFL,
        signal.SIGINT: signal.default_int_handler,
    }
    ours: dict[int, Any] = {signal.SIGTERM: _terminate, signal.SIGINT: _interrupt}
    owned = [number for number in usual if main and signal.getsignal(number) is usual[number]]
    for number in owned:
        signal.signal(number, ours[number])
    try:
        yield
    finally:
        for number in owned:
            signal.signal(number, usual[number])
        if owned:
            with _lock:
                _came.clear()


@contextmanager
def started(child: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """``child`` is passed SIGTERM and Ctrl-C while the block runs (its own plan then unwinds
    and answers too), and those that came before it started."""
    with _lock:
        _children.add(child)
        for number in _came:
            _pass_on(child, number)
    try:
        yield child
    finally:
        with _lock:
            _children.discard(child)


def _pass_on(child: subprocess.Popen[str], number: int) -> None:
    """Signal ``number`` to ``child``: SIGINT to its process group where it leads one, as a
    terminal sends Ctrl-C; anything else to it alone."""
    try:
        if number == signal.SIGINT and os.getpgid(child.pid) == child.pid:
            os.killpg(child.pid, number)
        else:
            child.send_signal(number)
    except (ProcessLookupError, PermissionError):
        pass  # it ended


def _came_now(number: int) -> None:
    with _lock:
        _came.append(number)
        for child in _children:
            _pass_on(child, number)


def _terminate(signum: int, frame: FrameType | None) -> None:
    _came_now(signal.SIGTERM)
    raise Terminated


def _interrupt(signum: int, frame: FrameType | None) -> None:
    _came_now(signal.SIGINT)
    raise KeyboardInterrupt


def child_environment() -> dict[str, str]:
    """The environment of a plan this process starts: its own, and its process id
    (:data:`PARENT`) for :func:`follow_parent`."""
    return {**os.environ, PARENT: str(os.getpid())}


def follow_parent() -> None:
    """In a plan another plan started (:data:`PARENT`, taken out of the environment so that
    the script's own processes do not inherit it): SIGTERM when the thread that started it
    ends, which outlives its wait for this plan, on Linux (``prctl(PR_SET_PDEATHSIG)``), at
    once where that process is already gone; nothing elsewhere, or where the call fails."""
    parent = os.environ.pop(PARENT, None)
    if parent is None or not sys.platform.startswith("linux"):
        return
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return
    if prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) == 0 and os.getppid() != int(parent):
        os.kill(os.getpid(), signal.SIGTERM)  # it died before the kernel was asked
