"""A command's whole answer (stdout, stderr lines, exit status, a page to write), kept in the
analysis cache so the same command on the same dumps prints it again without reading them, in
text or in JSON: one computation keeps both renderings."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from memforensics.analysis.cache import AnswerCache


@dataclass(frozen=True)
class Answer:
    """What a command prints (and, for ``report``, the page it writes)."""

    stdout: str
    stderr: tuple[str, ...] = ()
    status: int = 0
    page: str | None = None

    def to_json(self) -> str:
        """The answer as cache text."""
        return json.dumps(
            {
                "stdout": self.stdout,
                "stderr": list(self.stderr),
                "status": self.status,
                "page": self.page,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Answer | None:
        """An answer read back from the cache; None when the text is not one."""
        try:
            body = json.loads(text)
        except ValueError:
            return None
        if not isinstance(body, dict):
            return None
        stdout, stderr, status = body.get("stdout"), body.get("stderr"), body.get("status")
        page = body.get("page")
        if not isinstance(stdout, str) or not isinstance(stderr, list):
            return None
        if type(status) is not int or not (page is None or isinstance(page, str)):
            return None
        return cls(stdout, tuple(map(str, stderr)), status, page)


def answered(
    cache: AnswerCache,
    paths: Sequence[Path],
    question: str,
    compute: Callable[[], dict[str, Answer]],
    on_wait: Callable[[], None] = lambda: None,
) -> Answer:
    """The cached answer to ``question`` about ``paths``, else ``compute()``'s.

    ``compute`` returns every answer one computation gives, by question (the text and the JSON
    of one result: rendering the other costs nothing once the dumps are read), ``question``
    among them; each is kept, so the other rendering of the same result is a second look too.
    A look-ahead working on ``paths`` is waited for (``on_wait()`` says so) before computing.
    """
    stored = cache.lookup_settled(paths, question, on_wait)
    answer = Answer.from_json(stored) if stored is not None else None
    if answer is None:
        computed = compute()
        for asked, found in computed.items():
            cache.store(paths, asked, found.to_json())
        answer = computed[question]
    return answer


def print_answer(answer: Answer) -> int:
    """Print the answer's stderr lines, then its stdout; return its exit status."""
    for line in answer.stderr:
        print(line, file=sys.stderr)
    print(answer.stdout)
    return answer.status
