"""Text for a terminal: untrusted strings made printable, and lines fitted to the screen's width.

The width rules live here, for every command: a line keeps :data:`SCREEN_WIDTH` columns unless
the caller gives the terminal's (``COLUMNS`` when set); a sentence wraps under the column where
its text starts (:func:`wrap`, :func:`fit`); a path or site too long for its column keeps its
end behind ``…`` (:func:`shorten`: the file and function matter, the prefix not); a line that
must stay one line is cut at a word's end (:func:`cut`).

Untrusted text: the one rule for every string from a dump, sidecar, journal or file name before
it reaches a terminal, a log or a page.

A frame's file name or a sidecar's hostname is whatever the file says. Raw, an ``ESC`` there
would retitle the terminal, clear it, overprint a verdict or (OSC 52) write the clipboard, and a
bidi control would make a line read in another order than it is. :func:`printable` spells each
control out as an escape (``\\x1b``, ``\\u202e``) and cuts a long string to ``PRINT_LIMIT``
characters, saying how many it dropped. :func:`terminal_safe` is the CLI's last line of
defence over everything it prints: the same escapes, newlines and tabs kept.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Collection, Sequence

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


SCREEN_WIDTH = 80
"""Columns a line of text keeps where nothing says the screen's width (a pipe, a file)."""
_MIN_ROOM = 12  # a wrapped line keeps at least this much text beside its indent
_FIGURE = re.compile(r"(\d) ((?:[KMGTP]i)?B\b)")  # ``24.63 MiB``: one word to the wrapping


def shorten(path: str, width: int) -> str:
    """``path`` (a file, a ``path:line function`` site) in ``width`` characters: its end kept
    behind ``…`` when it is longer."""
    if len(path) <= width:
        return path
    return "…" + path[len(path) - width + 1 :] if width > 1 else "…"


def cut(line: str, width: int) -> str:
    """One line in ``width`` characters, ending in ``…`` when cut, at a word's end when one lies
    in the last third of the line (a row that must stay one row)."""
    if len(line) <= width:
        return line
    room = max(width - 1, 1)
    head = line[:room]
    space = head.rstrip().rfind(" ")
    if space > room * 2 // 3 and head[:space].strip():
        head = head[:space].rstrip() + " "
    return head + "…"


def table(
    rows: Sequence[Sequence[str]],
    width: int,
    *,
    drops: Sequence[int] = (),
    left: Collection[int] = (),
    squeeze: int | None = None,
    room: int = 30,
    keep_start: bool = False,
) -> tuple[list[str], list[int]]:
    """``rows`` (the first the header) in aligned columns, two spaces apart, one line per row
    in ``width`` where it can: the ``squeeze`` column (a path, a site) first gives up its start
    behind ``…`` (:func:`shorten`; a name, ``keep_start``: its end, :func:`cut`), keeping
    ``room`` characters at least; then the columns of
    ``drops`` are left out in turn until every row fits. Columns in ``left`` are left-aligned,
    the rest right-aligned. Returns the lines and the columns left out."""
    kept = list(range(len(rows[0]))) if rows else []
    gone: list[int] = []
    short = cut if keep_start else shorten
    lines = _squeezed(rows, kept, left, width, squeeze, room, short)
    for column in drops:
        if max(map(len, lines), default=0) <= width:
            break
        kept.remove(column)
        gone.append(column)
        lines = _squeezed(rows, kept, left, width, squeeze, room, short)
    return lines, gone


def _squeezed(
    rows: Sequence[Sequence[str]],
    kept: Sequence[int],
    left: Collection[int],
    width: int,
    squeeze: int | None,
    room: int,
    short: Callable[[str, int], str],
) -> list[str]:
    """The aligned rows, the ``squeeze`` column shortened (to ``room`` at least) where the
    rows run over ``width``."""
    lines = _aligned(rows, kept, left)
    over = max(map(len, lines), default=0) - width
    if over <= 0 or squeeze is None or squeeze not in kept:
        return lines
    keep = max(max(len(row[squeeze]) for row in rows) - over, room)
    cut_rows = [
        [short(cell, keep) if i == squeeze else cell for i, cell in enumerate(row)] for row in rows
    ]
    return _aligned(cut_rows, kept, left)


def _aligned(
    rows: Sequence[Sequence[str]], kept: Sequence[int], left: Collection[int]
) -> list[str]:
    """The ``kept`` cells of ``rows``, each column as wide as its widest cell."""
    widths = {i: max(len(row[i]) for row in rows) for i in kept}
    return [
        "  ".join(
            row[i].ljust(widths[i]) if i in left else row[i].rjust(widths[i]) for i in kept
        ).rstrip()
        for row in rows
    ]


def wrap(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    """``text`` wrapped to ``width`` after ``first`` (later lines after ``rest``, by default as
    many spaces), never at a hyphen; a word longer than a line (a path) is shortened."""
    rest = " " * len(first) if rest is None else rest
    room = max(width - max(len(first), len(rest)), _MIN_ROOM)
    words = [shorten(word, room) for word in _FIGURE.sub("\\1\xa0\\2", text).split(" ")]
    lines = textwrap.wrap(  # textwrap breaks at ASCII spaces only: a figure stays whole
        " ".join(words),
        width=max(width, len(rest) + _MIN_ROOM),
        initial_indent=first,
        subsequent_indent=rest,
        break_on_hyphens=False,
        break_long_words=False,
    )
    return [line.replace("\xa0", " ") for line in lines] or [first.rstrip()]


def text_column(line: str) -> int:
    """Where the text of ``line`` starts after its label (``  cannot tell  the note``): past
    the first run of two spaces that follows a word, when it lies in the line's first half;
    else the line's indent and two more (a sentence's next lines hang under its first)."""
    indent = len(line) - len(line.lstrip(" "))
    gap = re.search(r"\S {2,}(?=\S)", line[indent:])
    if gap is not None and indent + gap.end() <= len(line) // 2:
        return indent + gap.end()
    return indent + 2


def fit(text: str, width: int) -> str:
    """Every line of ``text`` in ``width`` columns: a longer one wraps under its text column
    (:func:`text_column`), a word too long for a line is shortened; short lines are kept as
    they are. Every word stays whole: where the text column falls inside a word (a sentence
    with no label), the line wraps from its indent and hangs under that column. A label that
    would leave its text less than half the width (a path before its details) keeps a line of
    its own (a path whole, or shortened behind ``…``) and its text hangs under it: hung under
    a column that deep, the text would stand one word a line."""
    lines: list[str] = []
    for line in text.split("\n"):
        if len(line) <= width:
            lines.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip(" "))]
        column = text_column(line)
        label = line[:column]
        if column > width // 2 and label.endswith(" ") and label.strip():
            # the label (a path: one unbreakable word) on its own line, its text under it
            lines += wrap(label.strip(), width, indent, indent + "  ")
            lines += wrap(line[column:].strip(), width, indent + "  ")
            continue
        column = min(column, max(width - _MIN_ROOM, 0))
        head = line[:column]
        if head.strip() and not head.endswith(" "):  # the column falls in the text, not after
            head = indent  # no label: wrap from the indent
        lines += wrap(line[len(head) :].strip(), width, head, " " * column)
    return "\n".join(lines)
