"""Writing an HTML page the way every memforensics file lands: whole or not at all.

The bytes go through the one atomic writer (:func:`memforensics.capture.atomic.write_file_atomic`);
this only turns its failure into the one line a command prints.
"""

from __future__ import annotations

from pathlib import Path

from memforensics.capture.atomic import write_file_atomic
from memforensics.cli._command import CommandError


def write_page(out: Path, html: str) -> None:
    """Write ``html`` to ``out`` atomically; a failure is one ``CommandError`` line."""
    try:
        write_file_atomic(out, html.encode("utf-8"))
    except OSError as exc:
        raise CommandError(f"{out}: cannot write ({exc.strerror or exc})") from None
