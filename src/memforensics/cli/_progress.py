"""Progress on stderr while a command reads and analyses dumps, with rich's Progress.

Shown only when stderr is a terminal and ``--quiet`` was not given: pipes, CI logs and files
get nothing, and stdout is never touched. rich is imported here only, by the console script,
never by code that runs inside training; it draws a transient bar (bytes read while loading,
then the named analysis phase, or the dumps done with ``--jobs``) that disappears when the
command prints its answer. It is redrawn as the work advances, not by a timer thread, so the
process pools of ``--jobs`` never fork while a drawing thread holds a lock. rich writes to the
real stderr, past the CLI's escaping, so that its erases work: every description (they name
the file being read) is made printable here, as rich is given it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memforensics._text import printable
from memforensics._units import format_bytes
from memforensics.analysis.dump import BytesRead, SnapshotReader, read_snapshot_file
from memforensics.cli._output import unescaped


class Progress:
    """One command's progress display; every method does nothing when it is off."""

    def __init__(self, *, quiet: bool) -> None:
        self._bar: Any = None
        self._task: Any = None
        if quiet or not sys.stderr.isatty():
            return
        from rich.console import Console  # only a terminal pays for importing rich
        from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            TimeElapsedColumn(),
            console=Console(file=unescaped(sys.stderr)),
            transient=True,
            auto_refresh=False,  # no drawing thread: the pools that --jobs starts fork safely
        )

    @property
    def shown(self) -> bool:
        """Whether anything is drawn."""
        return self._bar is not None

    @contextmanager
    def running(self) -> Iterator[Progress]:
        """Draw while inside; the bar is erased on the way out."""
        if self._bar is None:
            yield self
            return
        with self._bar:
            yield self

    def reading(self, path: Path) -> BytesRead | None:
        """A byte counter for loading ``path`` (None when off)."""
        if self._bar is None:
            return None
        try:
            total = path.stat().st_size
        except OSError:
            total = None
        name = f"reading {printable(path.name)}"
        self._start(name, total)
        bar, task = self._bar, self._task
        step = max((total or 0) // 200, 1 << 20)
        shown = [-step]

        def on_read(done: int) -> None:
            if done - shown[0] >= step:  # a redraw per 0.5% (or MiB), not per frame read
                shown[0] = done
                whole = f" / {format_bytes(total)}" if total else ""
                bar.update(task, completed=done, description=f"{name}  {format_bytes(done)}{whole}")
                bar.refresh()

        return on_read

    def reader(self, path: Path) -> SnapshotReader:
        """How to read ``path``'s snapshot, counting its bytes on the bar when it is shown."""
        on_read = self.reading(path)
        return lambda file: read_snapshot_file(file, on_read)

    def phase(self, name: str) -> None:
        """Name the analysis step now running (a spinner-like bar without a total)."""
        if self._bar is not None:
            self._start(name, None)

    def files(self, total: int) -> Any:
        """Count dumps done out of ``total`` (for a pool of workers); returns a ``done()``."""
        if self._bar is None:
            return lambda: None
        self._start("dumps analysed", total)
        bar, task = self._bar, self._task

        def done() -> None:
            bar.advance(task, 1)
            bar.refresh()

        return done

    def _start(self, description: str, total: int | None) -> None:
        if self._task is not None:
            self._bar.remove_task(self._task)
        self._task = self._bar.add_task(printable(description), total=total)
        self._bar.refresh()
