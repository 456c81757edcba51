"""Writing an HTML page the way every memforensics file lands: whole or not at all.

A report or overview opened while it is being written (a browser refreshing it, a colleague on a
shared filesystem) must never show half a page, so the page goes to a hidden temporary name in
the same folder and is renamed over the target.
"""

from __future__ import annotations

import os
from pathlib import Path

from memforensics.cli._command import CommandError


def write_page(out: Path, html: str) -> None:
    """Write ``html`` to ``out`` atomically; a failure is one ``CommandError`` line."""
    temp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:
        temp.write_text(html, encoding="utf-8")
        os.replace(temp, out)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise CommandError(f"{out}: cannot write ({exc.strerror or exc})") from None
