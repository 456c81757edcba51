"""The ``replay`` command's answers about one file, shared with ``report``.

A report of an OOM dump contains its replay. Rather than replaying the trace again (five or
more passes of the allocator model on a big dump), a report takes the ``replay --json`` answer
the cache already holds for the file; and a report that had to replay keeps the replay's
answers, so a later ``replay`` of the file is a second look.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memforensics.analysis import Dump, replay
from memforensics.analysis.cache import AnswerCache
from memforensics.analysis.replay import Replay, replay_text
from memforensics.cli._answers import Answer

_ROW_KEYS = (
    "conf", "requires", "oom", "peak_reserved_bytes", "fragmentation_at_peak_bytes",
    "first_failure_bytes",
)  # fmt: skip


def replay_question(sets: list[str] | None, requested: int | None, as_json: bool) -> str:
    """The cache's name for a ``replay`` answer about one file (no ``--set``: ``sets`` empty
    or None alike)."""
    return f"replay {json.dumps([sets or None, requested, as_json])}"


def replay_answers(
    result: Replay, dump: Dump, sets: list[str] | None, requested: int | None
) -> dict[str, Answer]:
    """What ``replay`` prints for ``result``, in JSON and in text, by question."""
    warnings = tuple(f"memforensics replay: warning: {w}" for w in dump.warnings)
    return {
        replay_question(sets, requested, True): Answer(
            json.dumps(result.to_dict(), indent=2), warnings
        ),
        replay_question(sets, requested, False): Answer(replay_text(result), warnings),
    }


def kept_replay(cache: AnswerCache, path: Path, *, jobs: int) -> Callable[[Dump], dict[str, Any]]:
    """The ``replay --json`` object of the dump read from ``path``: the cache's, when it holds
    a sound one, else a replay in ``jobs`` processes (whose answers the cache then keeps)."""

    def replay_object(dump: Dump) -> dict[str, Any]:
        stored = cache.lookup([path], replay_question(None, None, True))
        answer = Answer.from_json(stored) if stored is not None else None
        found = _sound(answer.stdout) if answer is not None else None
        if found is not None:
            return found
        result = replay(dump, jobs=jobs)
        for question, kept in replay_answers(result, dump, None, None).items():
            cache.store([path], question, kept.to_json())
        return result.to_dict()

    return replay_object


def _sound(text: str) -> dict[str, Any] | None:
    """A kept ``replay --json`` object with what the report reads, else None (replay again)."""
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("trusted"), bool):
        return None
    refusals, rows, fidelity = body.get("refusals"), body.get("what_if"), body.get("fidelity")
    if not isinstance(refusals, list) or not all(isinstance(r, str) for r in refusals):
        return None
    if not isinstance(rows, list) or not all(
        isinstance(row, dict) and all(key in row for key in _ROW_KEYS) for row in rows
    ):
        return None
    if fidelity is not None and not isinstance(fidelity, int | float):
        return None
    return body
