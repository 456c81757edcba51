"""A dump's story as every command asks for it: :func:`memforensics.analysis.explain`, kept in
the cache under every file it read (:func:`~memforensics.analysis.story.evidence_files`).

``summary`` keeps its answers here, and ``overview``, ``watch`` and ``plan`` ask the same
question of the dump they name, so a dump ``summary`` explained is answered from the same entry,
and a command never tells another story of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from memforensics.analysis import explain, load_dump
from memforensics.analysis.story import evidence_files
from memforensics.analysis.summary import Summary
from memforensics.cli._cache import UNNAMED, ResultCache, named_by, renamed

DEFAULT_TOP = 10
"""Site rows of a summary by default (``summary``'s one screen)."""


@dataclass(frozen=True)
class Kept:
    """One file's answer as the cache keeps it: the summary (of each device) and the dump's
    warnings for stderr."""

    summary: Summary
    warnings: tuple[str, ...] = ()


def question(
    top: int | None,
    device: int | None,
    requested: int | None,
    device_memory: int | None = None,
) -> str:
    """The cache's name for explaining one file with these arguments (what changes the
    answer; the rendering and the file's name are applied afresh)."""
    return f"summary {json.dumps([top, device, requested, device_memory])}"


def lean(summary: Summary) -> Summary:
    """``summary`` without the lifetimes behind ``filled`` (the report's; no text reads them,
    and the cache does not keep them), in it and its other devices."""
    others = tuple(replace(other, filled=None) for other in summary.other_devices)
    return replace(summary, filled=None, other_devices=others)


def kept(cache: ResultCache, path: Path, ask: str) -> Kept | None:
    """The kept answer to ``ask`` about the dump at ``path``, named by ``path``; None when
    there is none (or the cache is off, or the path's sidecar cannot be read)."""
    name = named_by(path) if cache.enabled else None
    if name is None:
        return None
    found = cache.lookup(Kept, evidence_files(path), ask)
    return None if found is None else replace(found, summary=renamed(found.summary, name))


def keep(cache: ResultCache, path: Path, ask: str, answer: Kept) -> None:
    """Keep ``answer`` to ``ask`` about the dump at ``path``, under every file it was read
    from, without the names ``path`` gives it."""
    if not cache.enabled or named_by(path) is None:
        return
    unnamed = replace(answer, summary=renamed(lean(answer.summary), UNNAMED))
    cache.keep(evidence_files(path), ask, unnamed)


def explained(cache: ResultCache, path: Path) -> Summary:
    """The story of the dump at ``path`` that ``summary`` tells by default, from the cache or
    computed and kept. SnapshotLoadError when the file cannot be read."""
    ask = question(DEFAULT_TOP, None, None)
    found = kept(cache, path, ask)
    if found is not None:
        return found.summary
    dump = load_dump(path)
    answer = Kept(lean(explain(dump, top=DEFAULT_TOP)), dump.warnings)
    keep(cache, path, ask, answer)
    return answer.summary
