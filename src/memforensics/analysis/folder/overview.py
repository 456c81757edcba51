"""``overview``: the whole run at a glance, from every rank's journal and every dump's sidecar.

A dump explains the rank that failed; the overview says whether the others were close behind,
which rank drifted from the rest, and how the failing rank differed from a healthy peer at the
same step. It reads journals and sidecars only, never a pickle, and fans the journal files out
to worker processes (reading is per file), so 2,048 ranks take about as long as parsing their
lines once (docs/performance.md).

Nothing about the folder's content raises: ranks without a journal, torn last lines, bad lines
and two processes for one rank (a restart) are reported in ``problems``.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import threading
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from memforensics._errors import SnapshotLoadError
from memforensics.analysis.diagnosis import Diagnosis
from memforensics.analysis.folder.forecast import Forecast
from memforensics.analysis.folder.journals import (
    MISSING,
    JournalFile,
    ProcessJournal,
    read_processes,
)
from memforensics.analysis.folder.ls import Diagnose, DumpRecord, first_oom_dump, scan_run
from memforensics.analysis.schema import NOT_IN_JSON, json_key

# One rank over the whole run: its journals' figures and dumps, and its first OOM.
#
# A rank may have left several processes (a restart): their journals are read in order of their
# first line, and the newest process's last figures are the rank's.


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
    """When live plus outside-PyTorch bytes reach the limit, if the rank drifts upward; None
    for a rank that ran out already (its limit is behind it, not ahead)."""


def rank_facts(rank: int, journals: list[ProcessJournal], dumps: list[DumpRecord]) -> RankFacts:
    """The facts of ``rank`` from its journals (oldest process first) and its dumps."""
    newest = journals[-1] if journals else None
    steps = [s for j in journals for s in (j.steps[:1] + j.steps[-1:]) if s != MISSING]
    peaks = [j.peak_reserved for j in journals if j.peak_reserved is not None]
    failure = _failure(rank, journals, dumps)
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
        failure=failure,
        closed=bool(newest is not None and newest.events.endswith("c")),
        dumps=tuple(sorted(d.path for d in dumps)),
        forecast=newest.forecast if newest is not None and failure is None else None,
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


# Which ranks stand out from the others in a run.
#
# Outliers use the median and the median absolute deviation (MAD), which one bad rank cannot
# drag along the way it drags a mean and a standard deviation. For peak reserved bytes and for
# reserved growth per 1,000 steps, a rank stands out when
#
#     |value - median| > max(OUTLIER_Z / 0.6745 * MAD, floor)
#
# ``OUTLIER_Z`` is 3.5, Iglewicz and Hoaglin's cut for the modified z-score. The floor keeps a
# symmetric job, where every healthy rank reports the same bytes and the MAD is 0, from flagging a
# one-byte difference: ``max(1 MiB, 5 % of the median peak reserved)`` for peak reserved, and for
# growth the slope that would add that many bytes over the steps the ranks cover (so a one-step
# dip in a 40-step run is no trend, and 2 MiB a step is). At least three ranks are needed to
# speak of "the others".

OUTLIER_Z = 3.5
MAD_TO_Z = 0.6745
MIN_FLOOR = 1 << 20
FLOOR_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class Outlier:
    """One rank standing out on one figure."""

    rank: int
    figure: str  # "peak_reserved_bytes" or "reserved_growth_per_1k_steps"
    value: float
    median: float
    threshold: float  # the allowed distance from the median


def find_outliers(ranks: Sequence[RankFacts]) -> list[Outlier]:
    """Ranks far from the others (rule in the module docstring), farthest first."""
    peaks = {
        r.rank: float(r.peak_reserved_bytes) for r in ranks if r.peak_reserved_bytes is not None
    }
    growth = {
        r.rank: r.reserved_growth_per_1k_steps
        for r in ranks
        if r.reserved_growth_per_1k_steps is not None
    }
    if len(peaks) < 3:
        return []
    floor = max(MIN_FLOOR, FLOOR_SHARE * abs(statistics.median(peaks.values())))
    found = _outliers("peak_reserved_bytes", peaks, floor)
    spans = [
        r.last_step - r.first_step
        for r in ranks
        if r.first_step is not None and r.last_step is not None
    ]
    span = max(statistics.median(spans), 1) if spans else 1
    if len(growth) >= 3:
        found += _outliers("reserved_growth_per_1k_steps", growth, floor * 1000 / span)
    found.sort(key=lambda o: (-abs(o.value - o.median) / o.threshold, o.rank))
    return found


def _outliers(figure: str, values: Mapping[int, float], floor: float) -> list[Outlier]:
    median = statistics.median(values.values())
    mad = statistics.median(abs(v - median) for v in values.values())
    threshold = max(OUTLIER_Z / MAD_TO_Z * mad, floor)
    return [
        Outlier(rank, figure, value, median, threshold)
        for rank, value in values.items()
        if abs(value - median) > threshold
    ]


# How the failing rank differs from a healthy peer at the same step, figure by figure.
#
# Both ranks are read at one journal line each, at the same step, so the difference is what the
# failing rank held that a rank doing the same work did not: bytes allocated or reserved, retries,
# memory outside PyTorch.

COMPARED = (
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "alloc_retries",
    "external_bytes",
    "device_free_bytes",
)


@dataclass(frozen=True, slots=True)
class PeerComparison:
    """The failing rank against the healthiest peer, line against line at one step."""

    rank: int
    peer: int
    step: int
    peer_step: int
    failing: dict[str, int | None]
    healthy: dict[str, int | None]
    differences: dict[str, int | None]
    """failing - healthy, per figure (None where either is unknown)."""


def compare_with_peer(
    failure: Failure,
    journals: Mapping[int, list[ProcessJournal]],
    ranks: Sequence[RankFacts],
    outliers: set[int],
) -> PeerComparison | None:
    """Compare at the failing rank's last journal line at or before its OOM step.

    That line, not the OOM line, because every rank writes one at the same steps (the journal
    is aligned to multiples of ``journal_every``) while the OOM line is the failing rank's
    alone. The healthiest peer is the rank that never ran out of memory, is no outlier, and
    had the least reserved at that step (ties: the lowest rank).
    """
    own = journals.get(failure.rank)
    if not own:
        return None
    step = failure.step if failure.step is not None else _last_step(own[-1])
    failing = _line_at(own, step, skip_oom=True) if step is not None else None
    if failing is None:
        return None
    at_step, failing_figures = failing
    best: tuple[int, int, int, dict[str, int | None]] | None = None
    for facts in ranks:
        if facts.failure is not None or facts.rank in outliers or facts.rank == failure.rank:
            continue
        line = _line_at(journals.get(facts.rank, []), at_step, skip_oom=True)
        if line is None:
            continue
        reserved = line[1]["reserved_bytes"]
        key = (reserved if reserved is not None else 1 << 62, facts.rank)
        if best is None or key < best[:2]:
            best = (key[0], key[1], line[0], line[1])
    if best is None:
        return None
    healthy = best[3]
    return PeerComparison(
        rank=failure.rank,
        peer=best[1],
        step=at_step,
        peer_step=best[2],
        failing=failing_figures,
        healthy=healthy,
        differences=_differences(failing_figures, healthy),
    )


def _differences(
    failing: Mapping[str, int | None], healthy: Mapping[str, int | None]
) -> dict[str, int | None]:
    """failing - healthy, per figure (None where either is unknown)."""
    found: dict[str, int | None] = {}
    for key in COMPARED:
        mine, theirs = failing[key], healthy[key]
        found[key] = None if mine is None or theirs is None else mine - theirs
    return found


def _last_step(journal: ProcessJournal) -> int | None:
    steps = [s for s in journal.steps if s != MISSING]
    return steps[-1] if steps else None


def _line_at(
    journals: Sequence[ProcessJournal], step: int, *, skip_oom: bool
) -> tuple[int, dict[str, int | None]] | None:
    """The newest line with a step at or before ``step`` (newest process first)."""
    for journal in reversed(journals):
        index = bisect_right(journal.steps, step) - 1  # steps never decrease within a process
        while index >= 0 and skip_oom and journal.events[index] == "o":
            index -= 1
        if index >= 0 and journal.steps[index] != MISSING:
            figures = {
                key: None if journal.columns[key][index] == MISSING else journal.columns[key][index]
                for key in COMPARED
            }
            return journal.steps[index], figures
    return None


MISSING_LISTED = 1_000
"""At most this many ranks that left nothing are listed (``ranks_missing_count`` has them all):
a world size is a claim from a file, and listing costs memory in proportion to it."""

PARALLEL_FROM = 64
"""Fewer journal files than this are read in-process: starting workers would cost more."""
_BATCH = 32


SCHEMA = 2
"""``overview --json``'s ``schema`` (docs/json.md: adding keys keeps it; renaming or removing
one bumps it)."""


@dataclass(frozen=True)
class Problems:
    """What the folder lacked or held badly; none of it stops the overview."""

    ranks_without_journal: tuple[int, ...]
    """Ranks with dumps but no journal."""
    ranks_missing: tuple[int, ...]
    """Ranks below the world size that left nothing (at most ``MISSING_LISTED``)."""
    ranks_missing_count: int
    """All of them."""
    restarts: dict[int, tuple[int, ...]]
    """Rank -> the pids of its processes, for ranks with more than one."""
    torn_last_lines: tuple[int, ...]
    """Ranks whose journal ends in a line cut short (skipped)."""
    bad_lines: int
    """Journal lines skipped: unreadable, or refused by ``journals.readable_line`` (a negative
    or non-finite time or figure)."""
    not_closed: tuple[int, ...]
    """Ranks whose newest process wrote no close line (killed, hung or running)."""
    unreadable: tuple[str, ...]
    """Why each unreadable file could not be read."""
    absurd_claims: tuple[str, ...]
    """Claims from files ignored as absurd (a world size of a billion)."""


@dataclass(frozen=True)
class Overview:
    """Everything ``overview`` says about a run folder.

    ``first_oom`` is the earliest out-of-memory of the run (``failures``' first), ``steps``
    the first and last step any journal covers, ``forecasts`` every rank's forecast, soonest
    first; ``journals`` (not in the JSON) are what the page draws.
    """

    root: Path
    world_size: int | None
    ranks_seen: int
    steps: tuple[int, int] | None
    first_oom: Failure | None
    failures: tuple[Failure, ...]
    outliers: tuple[Outlier, ...]
    comparison: PeerComparison | None
    problems: Problems
    forecasts: tuple[Forecast, ...]
    ranks: tuple[RankFacts, ...]
    journals: tuple[ProcessJournal, ...] = field(default=(), repr=False, metadata=NOT_IN_JSON)
    first_oom_diagnosis: Diagnosis | None = None
    """The first failing rank's causes, from its OOM dump (``summary``'s own diagnosis); None
    without such a dump, or when it could not be read."""

    def rank(self, number: int) -> RankFacts | None:
        """The facts of rank ``number``, if it left anything."""
        return next((r for r in self.ranks if r.rank == number), None)


def build_overview(
    root: str | Path, *, workers: int | None = None, diagnose: Diagnose | None = None
) -> Overview:
    """Read every journal and sidecar under ``root``; ``workers`` processes (None: the CPUs).
    No snapshot is opened, unless ``diagnose`` is given: then it is asked the causes of the
    first failing rank's earliest OOM dump (one dump, however many ranks)."""
    folder = Path(root)
    if not folder.is_dir():
        raise SnapshotLoadError(f"{folder}: not a folder")
    files = scan_run(str(folder))
    journals = read_all(list(files.journals.values()), workers)
    by_rank: dict[int, list[ProcessJournal]] = {}
    for journal in sorted(journals, key=_process_order):
        by_rank.setdefault(journal.rank, []).append(journal)
    dumps: dict[int, list[DumpRecord]] = {}
    for dump in files.dumps:
        if dump.rank is not None:
            dumps.setdefault(dump.rank, []).append(dump)
    ranks = tuple(
        rank_facts(rank, by_rank.get(rank, []), dumps.get(rank, []))
        for rank in sorted(set(by_rank) | set(dumps))
    )
    failures = tuple(
        sorted(
            (r.failure for r in ranks if r.failure is not None),
            key=lambda f: (f.time if f.time is not None else float("inf"), f.rank),
        )
    )
    outliers = tuple(find_outliers(ranks))
    outlier_ranks = {o.rank for o in outliers}
    comparison = None
    if failures:
        comparison = compare_with_peer(failures[0], by_rank, ranks, outlier_ranks)
    world = files.world_size or (max(by_rank) + 1 if by_rank else None)
    forecasts = [r.forecast for r in ranks if r.forecast is not None]
    return Overview(
        root=folder,
        world_size=world,
        ranks_seen=len(ranks),
        steps=_steps(ranks),
        first_oom=failures[0] if failures else None,
        failures=failures,
        outliers=outliers,
        comparison=comparison,
        problems=_problems(ranks, by_rank, world, files.errors, files.absurd),
        forecasts=tuple(sorted(forecasts, key=lambda f: (f.step, f.rank))),
        ranks=ranks,
        journals=tuple(journals),
        first_oom_diagnosis=_first_diagnosis(folder, failures, dumps, diagnose),
    )


def _first_diagnosis(
    folder: Path,
    failures: Sequence[Failure],
    dumps: Mapping[int, list[DumpRecord]],
    diagnose: Diagnose | None,
) -> Diagnosis | None:
    """The diagnosis of the first failing rank's earliest OOM dump (None: none readable)."""
    if not failures or diagnose is None:
        return None
    first = first_oom_dump(dumps.get(failures[0].rank, []), failures[0].rank)
    if first is None:
        return None
    try:
        return diagnose(folder / first.path)
    except SnapshotLoadError:
        return None


def _steps(ranks: Sequence[RankFacts]) -> tuple[int, int] | None:
    """The first and last step any journal covers."""
    firsts = [r.first_step for r in ranks if r.first_step is not None]
    lasts = [r.last_step for r in ranks if r.last_step is not None]
    return (min(firsts), max(lasts)) if firsts and lasts else None


def read_all(groups: list[list[JournalFile]], workers: int | None) -> list[ProcessJournal]:
    """Read each process's files, in worker processes when there are many."""
    count = workers if workers is not None else (os.cpu_count() or 1)
    if count <= 1 or len(groups) < PARALLEL_FROM:
        return read_processes(groups)
    batches = [groups[i : i + _BATCH] for i in range(0, len(groups), _BATCH)]
    with ProcessPoolExecutor(max_workers=count, mp_context=_context()) as pool:
        return [journal for batch in pool.map(read_processes, batches) for journal in batch]


def _context() -> multiprocessing.context.BaseContext:
    """fork where it is safe (one thread, POSIX): workers start in a millisecond, not a second."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _process_order(journal: ProcessJournal) -> tuple[bool, float, int]:
    """A rank's processes in the order they ran, those that ran no step first: the newest
    process, whose figures are the rank's, is always one that trained."""
    return (journal.ran_steps, journal.times[0] if journal.times else float("inf"), journal.pid)


def _restarts(by_rank: dict[int, list[ProcessJournal]]) -> dict[int, tuple[int, ...]]:
    """Rank -> the pids of its processes that ran steps, for ranks with more than one."""
    found = {r: tuple(j.pid for j in group if j.ran_steps) for r, group in by_rank.items()}
    return {rank: pids for rank, pids in found.items() if len(pids) > 1}


def _problems(
    ranks: Iterable[RankFacts],
    by_rank: dict[int, list[ProcessJournal]],
    world: int | None,
    errors: list[str],
    absurd: list[str],
) -> Problems:
    seen = [r.rank for r in ranks]
    journals = [j for group in by_rank.values() for j in group]
    present = set(seen)
    missing = islice((r for r in range(world or 0) if r not in present), MISSING_LISTED)
    return Problems(
        ranks_without_journal=tuple(sorted(present - set(by_rank))),
        ranks_missing=tuple(missing),
        ranks_missing_count=max(0, (world or 0) - sum(1 for r in present if r < (world or 0))),
        restarts=_restarts(by_rank),
        torn_last_lines=tuple(sorted({j.rank for j in journals if j.torn_last_line})),
        bad_lines=sum(j.bad_lines for j in journals),
        not_closed=tuple(
            sorted(r for r, group in by_rank.items() if not group[-1].events.endswith("c"))
        ),
        unreadable=tuple(errors + [e for j in journals for e in j.errors]),
        absurd_claims=tuple(absurd),
    )
