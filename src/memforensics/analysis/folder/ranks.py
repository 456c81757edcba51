"""One rank over the whole run: its journals' figures and dumps, and its first OOM.

A rank may have left several processes (a restart): their journals are read in order of their
first line, and the newest process's last figures are the rank's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memforensics.analysis.folder.forecast import Forecast
from memforensics.analysis.folder.journals import MISSING, ProcessJournal
from memforensics.analysis.folder.scan import DumpRecord
from memforensics.analysis.schema import json_key


@dataclass(frozen=True, slots=True)
class Failure:
    """A rank's first out-of-memory: when, at which step, and what says so."""

    rank: int
    step: int | None
    time: float | None
    source: str  # "journal" or "sidecar"


@dataclass(frozen=True, slots=True)
class RankFacts:
    """One rank over the whole run (all its processes, the newest last)."""

    rank: int
    pids: tuple[int, ...]
    lines: int
    first_step: int | None
    last_step: int | None
    peak_reserved_bytes: int | None
    last_reserved_bytes: int | None
    last_allocated_bytes: int | None
    alloc_retries: int | None
    external_bytes: int | None
    reserved_growth_per_1k_steps: float | None
    allocated_growth_per_1k_steps: float | None
    failure: Failure | None = field(metadata=json_key("oom"))
    closed: bool
    dumps: tuple[str, ...]
    forecast: Forecast | None = None
    """When live plus outside-PyTorch bytes reach the limit, if the rank drifts upward."""


def rank_facts(rank: int, journals: list[ProcessJournal], dumps: list[DumpRecord]) -> RankFacts:
    """The facts of ``rank`` from its journals (oldest process first) and its dumps."""
    newest = journals[-1] if journals else None
    steps = [s for j in journals for s in (j.steps[:1] + j.steps[-1:]) if s != MISSING]
    peaks = [j.peak_reserved for j in journals if j.peak_reserved is not None]
    return RankFacts(
        rank=rank,
        pids=tuple(j.pid for j in journals),
        lines=sum(j.lines for j in journals),
        first_step=min(steps) if steps else None,
        last_step=max(steps) if steps else None,
        peak_reserved_bytes=max(peaks) if peaks else None,
        last_reserved_bytes=_last(journals, "reserved_bytes"),
        last_allocated_bytes=_last(journals, "allocated_bytes"),
        alloc_retries=_last(journals, "alloc_retries"),
        external_bytes=_last(journals, "external_bytes"),
        reserved_growth_per_1k_steps=newest.growth.get("reserved_bytes") if newest else None,
        allocated_growth_per_1k_steps=newest.growth.get("allocated_bytes") if newest else None,
        failure=_failure(rank, journals, dumps),
        closed=bool(newest is not None and newest.events.endswith("c")),
        dumps=tuple(sorted(d.path for d in dumps)),
        forecast=newest.forecast if newest is not None else None,
    )


def _last(journals: list[ProcessJournal], column: str) -> int | None:
    for journal in reversed(journals):
        value = journal.last(column)
        if value is not None:
            return value
    return None


def _failure(rank: int, journals: list[ProcessJournal], dumps: list[DumpRecord]) -> Failure | None:
    """The rank's earliest OOM, from its journal lines and its OOM dumps' sidecars."""
    found: list[Failure] = []
    for journal in journals:
        index = journal.events.find("o")
        if index >= 0:
            step = None if index in journal.stepless else journal.steps[index]
            found.append(Failure(rank, step, journal.times[index], "journal"))
    for dump in dumps:
        if dump.kind == "oom":
            found.append(Failure(rank, dump.step, dump.time, "sidecar"))
    timed = [f for f in found if f.time is not None]
    if timed:
        return min(timed, key=lambda f: f.time or 0.0)
    return found[0] if found else None
