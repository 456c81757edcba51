"""The console script's process, and what it leaves to the operating system when it ends.

A dump read for one answer is millions of small dicts and lists. Freeing them one by one when
the command is done costs about a fifteenth of a first ``summary`` (70 ms of a second on a
300,000-entry trace) and gains nothing when the process exits right after: the operating system
takes the memory back at once. So when the console script runs (:func:`console`, not
:func:`~memforensics.cli.main` called by a program that goes on), a command that reads one dump
hands it to :func:`leave_at_exit`; it stays out of reach of reference counting and of the
interpreter's last collection until the process ends. A command reading several dumps frees
each as it goes, so memory stays that of one dump.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence

from memforensics.cli._main import main

_left: list[object] = []
_ending = False


def leave_at_exit(found: object) -> None:
    """Keep ``found`` until the process ends, when it is the console script's (a no-op when
    ``main`` runs inside another program).

    The list that keeps it holds itself, so the module's teardown leaves it be, and everything
    is frozen (moved where the collector never looks): neither a collection after the command
    nor the interpreter's last one walks the dump's objects again.
    """
    if _ending:
        if not _left:
            _left.append(_left)
        _left.append(found)
        gc.freeze()


def console(argv: Sequence[str] | None = None) -> int:
    """The console script: :func:`~memforensics.cli.main`, in a process that ends when it
    returns."""
    global _ending  # noqa: PLW0603 - one flag for the process, set once by its entry point
    _ending = True
    try:
        return main(argv)
    finally:
        _ending = False
