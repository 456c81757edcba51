"""Writing an HTML page the way every memforensics file lands: whole or not at all.

The bytes go through the one atomic writer (:func:`memforensics.capture.atomic.write_file_atomic`);
this only turns its failure into the one line a command prints.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from memforensics._text import SCREEN_WIDTH, fit, terminal_safe
from memforensics.cli._command import CommandError

# The CLI's last line of defence: whatever a command prints reaches the terminal without a
# control character in it (newlines and tabs apart), however the text was built.
#
# Words from a dump are made printable where they enter (:func:`memforensics._text.printable`);
# this catches what any path missed, so a hostile frame or file name can never send ``ESC`` (a
# retitle, a cleared screen, OSC 52 to the clipboard) to the user's terminal.
#
# rich is the one writer let past it (:func:`unescaped`): its cursor moves and erases must reach
# the terminal as they are, so what it draws is made printable before rich is given it.


class SafeStream:
    """A text stream that escapes control characters before they reach ``inner``."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        """Write ``text`` with its controls escaped; report ``text``'s length, as streams do."""
        self._inner.write(terminal_safe(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)  # flush, fileno, isatty, encoding, buffer...


@contextlib.contextmanager
def safe_output() -> Iterator[None]:
    """Route ``sys.stdout`` and ``sys.stderr`` through :class:`SafeStream` for the block."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(saved[0]), SafeStream(saved[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def unescaped(stream: TextIO) -> TextIO:
    """The stream under ``stream``'s escaping, for rich's Console: its control sequences (hide
    the cursor, erase a line) must reach the terminal, so every word it is given from a dump or
    a file name must already be :func:`~memforensics._text.printable`."""
    return stream._inner if isinstance(stream, SafeStream) else stream


def screen_width() -> int:
    """The columns a command's text keeps: ``COLUMNS`` when set, else the terminal's, else
    :data:`~memforensics._text.SCREEN_WIDTH` (a pipe, a file)."""
    return shutil.get_terminal_size((SCREEN_WIDTH, 24)).columns


def say(text: str, *, end: str = "\n", flush: bool = False, width: int | None = None) -> None:
    """Print a command's text with every line in the screen's width (:func:`screen_width`):
    each text module lays its lines out for the width it is given; this wraps any line that
    still runs over (a sentence under its label, a long path shortened), the one rule for all."""
    print(fit(text, screen_width() if width is None else width), end=end, flush=flush)


def write_page(out: Path, html: str) -> None:
    """Write ``html`` to ``out`` atomically; a failure is one ``CommandError`` line."""
    from memforensics.capture.atomic import write_file_atomic  # only commands that write pages

    try:
        write_file_atomic(out, html.encode("utf-8"))
    except OSError as exc:
        raise CommandError(f"{out}: cannot write ({exc.strerror or exc})") from None
