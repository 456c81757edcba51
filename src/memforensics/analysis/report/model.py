"""The report's data model: a section, what its builder may read, and the generic table.

Every builder module (and an extension adding, say, a table of its own) imports these names,
and none of the builders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memforensics.analysis.dump import Dump
from memforensics.analysis.filled import Filled
from memforensics.analysis.summary import Summary


@dataclass(frozen=True)
class Section:
    """One part of the page: how to draw it (``type``), its data, and why it may be empty."""

    id: str
    title: str
    type: str
    data: Any = None
    empty: str | None = None


@dataclass(frozen=True)
class DumpContext:
    """What a builder may read: one device of one dump, summarized and classified."""

    dump: Dump
    summary: Summary
    filled: Filled
    key: str  # unique id of this dump and device on the page
    top: int
    oom_device: bool
    cache: dict[str, Any] = field(default_factory=dict)
    replay_jobs: int = 1  # processes the replay section may use (see ``replay(jobs=)``)


SectionBuilder = Callable[[DumpContext], Section | None]


def table(
    section_id: str,
    title: str,
    columns: list[tuple[str, str]],
    rows: list[list[Any]],
    *,
    empty: str | None = None,
    hidden: int = 0,
    note: str | None = None,
) -> Section:
    """A generic table; column kinds: ``text``, ``site``, ``bytes``, ``number``, ``share``."""
    data = {
        "columns": [{"label": label, "kind": kind} for label, kind in columns],
        "rows": rows,
        "hidden": hidden,
        "note": note,
    }
    return Section(section_id, title, "table", data, empty if not rows else None)
