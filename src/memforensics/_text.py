"""Untrusted text made printable: the one rule for every string from a dump, sidecar, journal or
file name before it reaches a terminal, a log or a page.

A frame's file name or a sidecar's hostname is whatever the file says. Raw, an ``ESC`` there
would retitle the terminal, clear it, overprint a verdict or (OSC 52) write the clipboard, and a
bidi control would make a line read in another order than it is. :func:`printable` spells each
control out as an escape (``\\x1b``, ``\\u202e``) and cuts a long string to ``PRINT_LIMIT``
characters, saying how many it dropped. :func:`terminal_safe` is the CLI's last line of
defence over everything it prints: the same escapes, newlines and tabs kept.
"""

from __future__ import annotations

import re

PRINT_LIMIT = 512
"""Characters an untrusted string keeps when it is shown (a path or a function name is far
shorter; a 1 MB file name is not worth printing whole)."""

_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\t\n{_CONTROLS}]")
_UNSAFE_IN_TERMINAL = re.compile(f"[{_CONTROLS}]")


def _escape(match: re.Match[str]) -> str:
    point = ord(match.group())
    return f"\\x{point:02x}" if point < 0x100 else f"\\u{point:04x}"


def printable(text: str, limit: int = PRINT_LIMIT) -> str:
    """``text`` with every control (C0, C1, DEL, bidi, line separators) escaped, cut to
    ``limit`` characters with a note of how many more there were."""
    if len(text) <= limit and text.isprintable():
        return text  # the usual case: nothing to do, checked in C
    kept = _UNSAFE.sub(_escape, text[:limit])
    return kept if len(text) <= limit else f"{kept}…(+{len(text) - limit:,} characters)"


def terminal_safe(text: str) -> str:
    """``text`` with every control but newline and tab escaped (nothing is cut)."""
    return _UNSAFE_IN_TERMINAL.sub(_escape, text)
