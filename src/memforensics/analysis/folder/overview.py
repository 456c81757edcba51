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
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from memforensics._errors import SnapshotLoadError
from memforensics.analysis.folder.forecast import Forecast
from memforensics.analysis.folder.journals import JournalFile, ProcessJournal, read_processes
from memforensics.analysis.folder.outliers import Outlier, find_outliers
from memforensics.analysis.folder.peer import PeerComparison, compare_with_peer
from memforensics.analysis.folder.ranks import Failure, RankFacts, rank_facts
from memforensics.analysis.folder.scan import DumpRecord, scan_run
from memforensics.analysis.schema import NOT_IN_JSON

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
    """Journal lines that could not be read."""
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

    def rank(self, number: int) -> RankFacts | None:
        """The facts of rank ``number``, if it left anything."""
        return next((r for r in self.ranks if r.rank == number), None)


def build_overview(root: str | Path, *, workers: int | None = None) -> Overview:
    """Read every journal and sidecar under ``root``; ``workers`` processes (None: the CPUs)."""
    folder = Path(root)
    if not folder.is_dir():
        raise SnapshotLoadError(f"{folder}: not a folder")
    files = scan_run(str(folder))
    journals = read_all(list(files.journals.values()), workers)
    by_rank: dict[int, list[ProcessJournal]] = {}
    for journal in sorted(journals, key=_first_time):
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
    )


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


def _first_time(journal: ProcessJournal) -> tuple[float, int]:
    return (journal.times[0] if journal.times else float("inf"), journal.pid)


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
        restarts={r: tuple(j.pid for j in group) for r, group in by_rank.items() if len(group) > 1},
        torn_last_lines=tuple(sorted({j.rank for j in journals if j.torn_last_line})),
        bad_lines=sum(j.bad_lines for j in journals),
        not_closed=tuple(
            sorted(r for r, group in by_rank.items() if not group[-1].events.endswith("c"))
        ),
        unreadable=tuple(errors + [e for j in journals for e in j.errors]),
        absurd_claims=tuple(absurd),
    )
