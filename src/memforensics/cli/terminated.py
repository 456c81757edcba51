"""SIGTERM while ``plan`` runs: an exception that unwinds, not a death that leaves files behind.

A batch system's time limit, ``timeout`` and ``kill`` end a process with SIGTERM, whose default
action ends it on the spot: a planned run's folders under the temporary directory (its ``nvcc``,
its ``nvidia-smi``) stay there, the plans of other ranks or values it started go on without it,
and the figures so far are lost. While :func:`raised` holds, SIGTERM first passes the signal on
to the plans it started (:func:`started`), then raises :class:`Terminated` in the main thread,
which unwinds every ``with`` and ``finally`` as Ctrl-C does. The command answers with the
figures so far and exits :data:`STATUS`, as a shell reports a program that SIGTERM ended.

A script that installs its own SIGTERM handler replaces this one while it runs (its handler is
what SIGTERM does to it on a GPU too); the handler the process had before is put back after.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STATUS = 128 + signal.SIGTERM
"""The exit status a shell gives a program that SIGTERM ended (143)."""

_children: set[subprocess.Popen[str]] = set()
_terminated: list[bool] = []  # one entry once SIGTERM came: a plan started after it is passed it
_lock = threading.RLock()  # the handler runs in the main thread, which may hold it


class Terminated(BaseException):
    """SIGTERM arrived: a ``BaseException``, so a script's ``except Exception`` lets it by, as
    it lets ``KeyboardInterrupt`` by."""


@contextmanager
def raised() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` while the block runs, where the process would
    otherwise die of it (the default action, in the main thread); as it was after."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with _lock:
            _terminated.clear()


@contextmanager
def started(child: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """``child`` is passed SIGTERM while the block runs (its own plan then unwinds and answers
    too)."""
    with _lock:
        _children.add(child)
        if _terminated:
            child.terminate()
    try:
        yield child
    finally:
        with _lock:
            _children.discard(child)


def _terminate(signum: int, frame: FrameType | None) -> None:
    with _lock:
        _terminated.append(True)
        for child in _children:
            child.terminate()
    raise Terminated
