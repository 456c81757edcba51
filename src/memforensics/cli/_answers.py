"""A command's whole answer (stdout, stderr lines, exit status, a page to write), kept in the
CLI's result cache so the same command on the same dumps prints it again without reading them,
in text or in JSON: one computation keeps both renderings."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from memforensics.cli._cache import ResultCache


@dataclass(frozen=True)
class Answer:
    """What a command prints (and, for ``report``, the page it writes)."""

    stdout: str
    stderr: tuple[str, ...] = ()
    status: int = 0
    page: str | None = None


def answered(
    cache: ResultCache,
    paths: Sequence[Path],
    question: str,
    compute: Callable[[], dict[str, Answer]],
) -> Answer:
    """The kept answer to ``question`` about ``paths``, else ``compute()``'s.

    ``compute`` returns every answer one computation gives, by question (the text and the JSON
    of one result: rendering the other costs nothing once the dumps are read), ``question``
    among them; each is kept, so the other rendering of the same result is a second look too.
    """
    found = cache.lookup(Answer, paths, question)
    if found is None:
        computed = compute()
        for asked, answer in computed.items():
            cache.keep(paths, asked, answer)
        found = computed[question]
    return found


def print_answer(answer: Answer) -> int:
    """Print the answer's stderr lines, then its stdout; return its exit status."""
    for line in answer.stderr:
        print(line, file=sys.stderr)
    print(answer.stdout)
    return answer.status
