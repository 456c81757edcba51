"""``leaks``: sites whose live bytes grow from window to window of a rank, steadily.

``diff`` compares two dumps; a leak shows as a trend over many. Every window dump of a rank is
taken at the same point of training (the end of the window's last step, between steps, where
activations and temporaries are gone), so a site's live bytes there should not move once
training is warm. For each site this tracks those bytes over a rank's windows, fits bytes
against step, and scores how *steady* the growth is: the share of window-to-window changes that
are increases times the fit's r². One-off growth (a cache filled once, the optimizer's state
made in the first step) scores low; a site that grew in every window scores near 1. A site that
grew over the last three or more windows with a confidence of at least one half is a suspect.
Bytes are the *requested* sizes: what the program holds, not how the allocator rounded or
placed it (a block split differently in one window must not look like growth).

Dumps are loaded one at a time and reduced to per-site totals (:func:`window_totals`, a pure
function of one dump whose result is a plain value), so a folder of large dumps needs the memory
of one of them, and a caller may keep each dump's totals (the CLI caches them per file) so a
later ``leaks`` over a grown folder reads only the windows it has not seen.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from itertools import pairwise
from pathlib import Path

from memforensics._errors import SnapshotLoadError
from memforensics.analysis.dump import Dump, load_dump
from memforensics.analysis.filled import Filled, main_kind, what_filled
from memforensics.analysis.filled.kinds import UNKNOWN as UNKNOWN_KIND
from memforensics.analysis.folder import MISSING, ProcessJournal, list_dumps, read_run_journals
from memforensics.analysis.schema import json_key
from memforensics.analysis.summary import live_blocks, scan_trace

MIN_WINDOWS = 3
MIN_CONFIDENCE = 0.5

LEAKS_SCHEMA = 2
"""``leaks --json``'s ``schema`` (docs/json.md: adding keys keeps it; renaming or removing one
bumps it)."""


@dataclass(frozen=True, slots=True)
class SiteTrend:
    """One site's live bytes at the end of each window of one rank, and its growth; ``kind``:
    the kind of most of its bytes in the last window holding any."""

    rank: int | None
    site: str
    steps: tuple[int, ...]  # the last step of each window: where the bytes were measured
    bytes: tuple[int, ...]
    growth_per_step: float = field(metadata=json_key("growth_per_step_bytes"))  # bytes a step
    first_step: int | None
    confidence: float
    suspect: bool
    kind: str = "unknown"


@dataclass(frozen=True, slots=True)
class RankWindows:
    """The window dumps read of one rank: the last step of each, in order."""

    rank: int | None
    steps: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class JournalTrend:
    """One rank's live bytes over the whole run, from its journal: the trend between and
    beyond the windows (its newest process, over the steps its lines cover)."""

    rank: int
    steps: tuple[int, int] | None
    growth_per_1k_steps: float | None = field(metadata=json_key("allocated_growth_per_1k_steps"))


@dataclass(frozen=True)
class Leaks:
    """What ``memforensics leaks`` prints: trends for every site of every rank with window
    dumps, suspects first; unreadable files listed apart. Its ``--json`` object is derived from
    the fields (:func:`~memforensics.analysis.schema.document`, see docs/json.md)."""

    root: str
    windows: tuple[RankWindows, ...]
    trends: tuple[SiteTrend, ...] = field(metadata=json_key("sites"))
    unreadable: tuple[str, ...] = ()
    journal: tuple[JournalTrend, ...] = ()
    """Each rank's trend from its journal, fastest growing first (empty without journals)."""
    journal_skipped_lines: int = 0
    """Journal lines skipped by the rule every journal reader applies (``readable_line``)."""

    @property
    def suspects(self) -> tuple[SiteTrend, ...]:
        """The trends flagged as suspects, most confident and fastest growing first."""
        return tuple(trend for trend in self.trends if trend.suspect)


@dataclass
class LeakTracker:
    """Collects per-site totals from window dumps fed one at a time (the report reuses it)."""

    points: dict[int | None, dict[int, dict[str, int]]] = field(default_factory=dict)
    first_steps: dict[tuple[int | None, str], int] = field(default_factory=dict)
    kinds: dict[int | None, dict[int, dict[str, str]]] = field(default_factory=dict)

    def add(self, dump: Dump) -> bool:
        """Record ``dump`` if it is a window dump with known steps; True if it was used."""
        totals = window_totals(dump)
        if totals is None:
            return False
        self.add_totals(totals)
        return True

    def add_totals(self, window: WindowTotals) -> None:
        """Record one window's totals (fed in the windows' order: steps are merged by min)."""
        for site, step in window.first_steps.items():
            key = (window.rank, site)
            self.first_steps[key] = min(self.first_steps.get(key, step), step)
        self.points.setdefault(window.rank, {})[window.step] = window.totals
        self.kinds.setdefault(window.rank, {})[window.step] = window.kinds

    def result(self, root: str, unreadable: Iterable[str] = ()) -> Leaks:
        """Fit every site of every rank; suspects first."""
        trends: list[SiteTrend] = []
        windows: list[RankWindows] = []
        for rank in sorted(self.points, key=lambda r: (r is None, r or 0)):
            by_step = self.points[rank]
            steps = tuple(sorted(by_step))
            windows.append(RankWindows(rank, steps))
            sites = {site for totals in by_step.values() for site in totals}
            for site in sites:
                series = tuple(by_step[step].get(site, 0) for step in steps)
                first = self.first_steps.get((rank, site))
                if first is None:
                    # the first window holding any of it; a site of zero-byte blocks: the first
                    first = next((s for s, b in zip(steps, series, strict=True) if b), steps[0])
                kinds = self.kinds.get(rank, {})
                kind = next(
                    (kinds[step][site] for step in reversed(steps) if site in kinds.get(step, {})),
                    UNKNOWN_KIND,
                )
                trends.append(_trend(rank, site, steps, series, first, kind))
        trends.sort(key=lambda t: (not t.suspect, -t.confidence * t.growth_per_step, t.site))
        return Leaks(root, tuple(windows), tuple(trends), tuple(unreadable))


def _trend(
    rank: int | None,
    site: str,
    steps: tuple[int, ...],
    series: tuple[int, ...],
    first: int,
    kind: str,
) -> SiteTrend:
    slope, r2 = _fit(steps, series)
    deltas = [b - a for a, b in pairwise(series)]
    up = sum(1 for delta in deltas if delta > 0)
    confidence = (up / len(deltas)) * r2 if deltas and slope > 0 else 0.0
    run = 0
    for delta in reversed(deltas):
        if delta <= 0:
            break
        run += 1
    suspect = run + 1 >= MIN_WINDOWS and confidence >= MIN_CONFIDENCE
    return SiteTrend(rank, site, steps, series, slope, first, confidence, suspect, kind)


def _fit(xs: tuple[int, ...], ys: tuple[int, ...]) -> tuple[float, float]:
    """Least-squares slope of ``ys`` over ``xs`` and its r² (0 when either is flat)."""
    count = len(xs)
    if count < 2:
        return 0.0, 0.0
    mean_x, mean_y = sum(xs) / count, sum(ys) / count
    sxx = sum((x - mean_x) ** 2 for x in xs)
    syy = sum((y - mean_y) ** 2 for y in ys)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    if sxx == 0:
        return 0.0, 0.0
    slope = sxy / sxx
    r2 = (sxy * sxy) / (sxx * syy) if syy else 0.0
    return slope, r2


@dataclass(frozen=True)
class WindowTotals:
    """What one window dump adds to the fit: live requested bytes per site at its last step,
    the first step each site's live blocks were made at, and the kind of most of each site's
    bytes (small, so a worker can send it)."""

    rank: int | None
    step: int
    totals: dict[str, int]
    first_steps: dict[str, int]
    kinds: dict[str, str] = field(default_factory=dict)


def window_totals(dump: Dump, filled: Filled | None = None) -> WindowTotals | None:
    """``dump``'s totals, or None when it is not a window dump with known steps.

    ``filled``: the dump classified, when the caller has done it already (None: classified
    here).
    """
    steps = dump.meta.steps
    if dump.meta.kind != "window" or steps is None:
        return None
    if filled is None:
        filled = what_filled(dump)
    kind_of_block = filled.kind_of_blocks()
    live = live_blocks(dump, filled.lifetimes)
    _oom, block_steps = scan_trace(dump, [block for block, _ in live])
    totals: dict[str, int] = {}
    first: dict[str, int] = {}
    by_kind: dict[str, dict[str, int]] = {}
    for block, site in live:
        totals[site] = totals.get(site, 0) + block.requested_size
        step = block_steps.get(block.address)
        if step is not None:
            first[site] = min(first.get(site, step), step)
        kinds = by_kind.setdefault(site, {})
        kind = kind_of_block.get(block.address, UNKNOWN_KIND)
        kinds[kind] = kinds.get(kind, 0) + block.size
    found = {site: main_kind(kinds) for site, kinds in by_kind.items()}
    return WindowTotals(dump.meta.rank, steps[1], totals, first, found)


def _read_window(path: Path) -> WindowTotals | str | None:
    """One window dump's totals, or the one-line reason it could not be read."""
    try:
        return window_totals(load_dump(path))
    except SnapshotLoadError as exc:
        return str(exc)


def find_leaks(root: str | Path, *, jobs: int = 1) -> Leaks:
    """Read every window dump under ``root`` (:func:`window_paths`) and fit each site's trend
    (``jobs``: as :func:`read_windows`)."""
    listing = list_dumps(root)
    paths = window_paths(listing.root)
    return fit_windows(str(listing.root), read_windows(paths, jobs=jobs))


def window_paths(root: str | Path) -> list[Path]:
    """The window dumps under ``root``, in the listing's order."""
    return [entry.path for entry in list_dumps(root).dumps if entry.kind == "window"]


def read_windows(paths: Sequence[Path], *, jobs: int = 1) -> list[WindowTotals | str | None]:
    """Each dump's totals (None: not a window dump with known steps), or the one-line reason
    it could not be read, in the order given. ``jobs`` > 1 reads that many dumps at once, each
    in its own process (so at most ``jobs`` dumps are in memory together); the pool is joined
    before this returns."""
    with _workers(jobs, len(paths)) as pool:
        results = pool.map(_read_window, paths) if pool is not None else map(_read_window, paths)
        return list(results)


def fit_windows(root: str, found: Iterable[WindowTotals | str | None]) -> Leaks:
    """Each site's trend over the windows' totals, fed in the order given (a reason a dump
    could not be read is listed as unreadable)."""
    tracker = LeakTracker()
    unreadable: list[str] = []
    for result in found:
        if isinstance(result, str):
            unreadable.append(result)
        elif result is not None:
            tracker.add_totals(result)
    leaks = tracker.result(root, unreadable)
    trends, skipped = journal_trends(root)
    return replace(leaks, journal=trends, journal_skipped_lines=skipped)


def journal_trends(root: str) -> tuple[tuple[JournalTrend, ...], int]:
    """Each rank's allocated-bytes trend from the run's journals (its newest process that ran
    steps), fastest growing first, and how many journal lines were skipped."""
    journals = read_run_journals(root)
    newest: dict[int, ProcessJournal] = {}
    for journal in journals:
        if not journal.ran_steps:
            continue
        held = newest.get(journal.rank)
        if held is None or journal.times[0] > held.times[0]:
            newest[journal.rank] = journal
    trends = []
    for rank, journal in newest.items():
        steps = [step for step in journal.steps if step != MISSING]
        span = (steps[0], steps[-1]) if steps else None
        trends.append(JournalTrend(rank, span, journal.growth.get("allocated_bytes")))
    trends.sort(key=lambda t: (-(t.growth_per_1k_steps or 0.0), t.rank))
    return tuple(trends), sum(journal.bad_lines for journal in journals)


@contextmanager
def _workers(jobs: int, tasks: int) -> Iterator[ProcessPoolExecutor | None]:
    """A process pool of up to ``jobs`` workers, or None to work in this process."""
    if jobs <= 1 or tasks <= 1:
        yield None
        return
    with ProcessPoolExecutor(max_workers=min(jobs, tasks)) as pool:
        yield pool
