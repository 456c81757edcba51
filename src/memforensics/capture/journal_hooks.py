"""The facade's journal hooks: when a rank appends a line to its memory journal.

Split from :mod:`memforensics.capture.facade`: the journal is an optional side channel (one JSON line
every ``journal_every`` steps, plus window, OOM and close lines), and its scheduling reads best
apart from the step and dump logic that calls it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memforensics.capture.config import ForensicsConfig
from memforensics.capture.journal import NO_JOURNAL, Journal
from memforensics.capture.log import warn_once


class JournalHooks:
    """Mixin of :class:`~memforensics.capture.facade.MemoryForensics`: journal lines, never raising."""

    config: ForensicsConfig
    current_step: int | None
    _last_step: int | None
    _journal: Journal | None
    _journal_next: int
    _try: Callable[..., Any]

    def _journal_line(self, event: str, *, periodic: bool = True) -> None:
        """Append a journal line (never raises); a periodic one schedules the next.

        ``step`` is the step in progress; a ``close`` line outside a step gives the last one.
        """
        journal = self._journal
        if journal is None:
            return
        step = self.current_step if event != "close" else self._last_step
        try:
            journal.write(event, step)
        except Exception as exc:  # noqa: BLE001 - a full disk must not stop training
            warn_once(f"journal_failed:{type(exc).__name__}", "journal_failed", error=repr(exc))
        every = self.config.journal_every
        if periodic and every is not None and step is not None:
            self._journal_next = (step // every + 1) * every  # aligned: ranks share columns

    def _journal_close(self) -> None:
        journal = self._journal
        if journal is not None:
            self._journal_line("close", periodic=False)
            self._journal_next = NO_JOURNAL
            self._try("journal_failed", journal.close)
