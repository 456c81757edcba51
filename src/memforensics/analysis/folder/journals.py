"""Reading journals: one process's ``journal/rank{R}_pid{P}[.1].jsonl`` files into compact series.

A 2,048-rank run leaves 2,048 journals of about a thousand lines each, on a shared file system
that punishes a ``stat`` per file and a reader per line. So the folder is listed once
(``os.scandir``), each file is read whole and parsed with one ``json.loads`` of the lines joined
into a JSON array (a per-line parse only when that fails, to find and skip the bad lines), and
what comes back is a few ``array`` columns that pickle as bytes: cheap to send back from the
worker processes ``overview`` fans the files out to.

Nothing here raises on bad input: a torn last line (a process killed mid-write), a bad line in
the middle, a file that vanished or cannot be read are counted and reported with the series.
"""

from __future__ import annotations

import json
import os
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import islice
from math import isfinite, isnan
from operator import itemgetter, le, mul
from pathlib import Path
from typing import Any, TypeGuard

from memforensics import _layout
from memforensics.analysis.dump import read_regular
from memforensics.analysis.folder.forecast import Forecast, forecast_columns

READ_LIMIT = 64 << 20
"""Bytes read of one journal file at most: the writer rotates at 4 MiB, so a larger file is
not one (a link to ``/dev/zero``, a planted giant) and is reported as unreadable."""

MISSING = -(1 << 63)
"""Stands for null in the integer columns (arrays hold no None)."""

COLUMNS = (
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "peak_reserved_bytes",
    "alloc_retries",
    "ooms",
    "device_free_bytes",
    "external_bytes",
    "device_total_bytes",
)
_EVENT_CODES = {"step": "s", "window": "w", "oom": "o", "close": "c"}
_OLD_TOTAL_KEY, _TOTAL_KEY = b'"device_limit_bytes"', b'"device_total_bytes"'


def upgrade_keys(data: bytes) -> bytes:
    """Journal text with 0.1's key names replaced by today's: 0.1 wrote ``device_total_bytes``
    as ``device_limit_bytes`` (the same length, so byte offsets stay true)."""
    if _OLD_TOTAL_KEY not in data:
        return data
    return data.replace(_OLD_TOTAL_KEY, _TOTAL_KEY)


@dataclass(frozen=True, slots=True)
class JournalFile:
    """One file of one process's journal, from the folder listing (no ``stat``)."""

    path: str
    rank: int
    pid: int
    generation: int  # 1: the rotated, older file; 0: the current one


def list_journals(folder: str) -> list[JournalFile]:
    """Every journal file in ``folder`` (one ``scandir``; a missing folder gives none)."""
    found: list[JournalFile] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                parsed = _layout.parse_journal_name(entry.name)
                if parsed is not None:
                    found.append(JournalFile(entry.path, *parsed))
    except OSError:
        return []
    return found


@dataclass(slots=True)
class ProcessJournal:
    """The lines of one (rank, pid), oldest first, as columns; null values are ``MISSING``."""

    rank: int
    pid: int
    files: list[str]
    times: array[float] = field(default_factory=lambda: array("d"))
    steps: array[int] = field(default_factory=lambda: array("q"))
    events: str = ""
    columns: dict[str, array[int]] = field(
        default_factory=lambda: {name: array("q") for name in COLUMNS}
    )
    stepless: set[int] = field(default_factory=set)
    """Indices of lines written outside a step (their step column repeats the last one)."""
    growth: dict[str, float | None] = field(default_factory=dict)
    """Least-squares slope of a column against step, in bytes per 1,000 steps."""
    bad_lines: int = 0
    torn_last_line: bool = False
    errors: list[str] = field(default_factory=list)
    forecast: Forecast | None = None
    """When this process's live plus outside-PyTorch bytes reach its limit (computed where the
    file is read, in the worker, like ``growth``)."""

    @property
    def lines(self) -> int:
        """Lines read."""
        return len(self.times)

    @property
    def ran_steps(self) -> bool:
        """True when the process wrote a step or window line: it trained. A journal of only
        ``close`` (and ``oom``) lines is a process that ran no step, such as a worker an older
        release let write one: never a restart of its rank."""
        return "s" in self.events or "w" in self.events

    @property
    def peak_reserved(self) -> int | None:
        """The allocator's peak reserved bytes (its own peak, else the largest value seen)."""
        for name in ("peak_reserved_bytes", "reserved_bytes"):
            column = self.columns[name]
            top = max(column, default=MISSING)  # MISSING is the smallest int64: never the max
            if top != MISSING:
                return top
        return None

    def last(self, column: str) -> int | None:
        """The newest non-null value of ``column``."""
        for value in reversed(self.columns[column]):
            if value != MISSING:
                return value
        return None


def read_process(files: list[JournalFile]) -> list[ProcessJournal]:
    """Read one process's files (rotated generation first), one ``ProcessJournal`` per run.

    Usually one; more when the step number goes back: a restarted job whose process got the
    same pid (containers number from 1) appended to the old file.
    """
    ordered = sorted(files, key=lambda f: -f.generation)
    journal = ProcessJournal(ordered[0].rank, ordered[0].pid, [f.path for f in ordered])
    events: list[str] = []
    for item in ordered:
        rows = _read_rows(item.path, journal)
        _append(journal, rows, events)
    journal.events = "".join(events)
    steps = journal.steps
    parts = [journal] if all(map(le, steps, islice(steps, 1, None))) else _split_restarts(journal)
    for part in parts:
        for column in TREND_COLUMNS:
            part.growth[column] = growth_per_1k(part.steps, part.columns[column])
        columns = part.columns
        part.forecast = forecast_columns(
            part.rank,
            part.steps,
            columns["allocated_bytes"],
            columns["external_bytes"],
            columns["device_total_bytes"],
            MISSING,
        )
    return parts


def _split_restarts(journal: ProcessJournal) -> list[ProcessJournal]:
    steps = journal.steps
    cuts = [i for i in range(1, len(steps)) if steps[i] < steps[i - 1]]
    if not cuts:
        return [journal]
    parts = []
    for start, end in zip([0, *cuts], [*cuts, len(steps)], strict=True):
        part = ProcessJournal(journal.rank, journal.pid, journal.files)
        part.times = journal.times[start:end]
        part.steps = steps[start:end]
        part.events = journal.events[start:end]
        part.columns = {name: column[start:end] for name, column in journal.columns.items()}
        part.stepless = {i - start for i in journal.stepless if start <= i < end}
        parts.append(part)
    parts[0].bad_lines, parts[0].errors = journal.bad_lines, journal.errors
    parts[-1].torn_last_line = journal.torn_last_line
    return parts


TREND_COLUMNS = ("reserved_bytes", "allocated_bytes")


def growth_per_1k(steps: Sequence[int], values: Sequence[int]) -> float | None:
    """The least-squares slope of ``values`` over ``steps``, times 1,000; None if undefined.

    A slope rather than last minus first: one spike at either end does not make a trend.
    Computed on Python ints, exactly (bytes x steps overflow a float's precision), with the
    sums done by ``map`` so that no Python loop runs per line.
    """
    xs: Sequence[int] = steps
    ys: Sequence[int] = values
    if MISSING in xs or MISSING in ys:
        kept = [(x, y) for x, y in zip(xs, ys, strict=True) if MISSING not in (x, y)]
        xs, ys = [x for x, _ in kept], [y for _, y in kept]
    n = len(xs)
    sx, sy = sum(xs), sum(ys)
    denominator = n * sum(map(mul, xs, xs)) - sx * sx
    if n < 2 or denominator == 0:
        return None
    return float(1000 * (n * sum(map(mul, xs, ys)) - sx * sy) / denominator)


def _read_rows(path: str, journal: ProcessJournal) -> list[dict[str, object]]:
    try:
        data = read_regular(path, READ_LIMIT)
    except OSError as exc:
        journal.errors.append(f"{os.path.basename(path)}: {exc.strerror or exc}")
        return []
    end = data.rfind(b"\n") + 1
    if end < len(data):  # a torn last line: the writer died inside its one write()
        journal.torn_last_line = True
        data = data[:end]
    if not data:
        return []
    data = upgrade_keys(data)
    try:
        text = data.decode("utf-8")
        rows: list[dict[str, object]] = json.loads("[" + text[:-1].replace("\n", ",") + "]")
    except (ValueError, RecursionError):
        return _read_rows_one_by_one(data, journal)
    return rows  # not checked to be objects yet: _append does that, column by column


def _read_rows_one_by_one(data: bytes, journal: ProcessJournal) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for raw in data.split(b"\n")[:-1]:
        try:
            row = json.loads(raw)
        except (ValueError, RecursionError):
            row = None
        if type(row) is dict:
            rows.append(row)
        else:
            journal.bad_lines += 1
    return rows


_FIELDS = ("time", "step", "event", *COLUMNS)
_ROW = itemgetter(*_FIELDS)


def _append(journal: ProcessJournal, rows: list[dict[str, object]], events: list[str]) -> None:
    """Add ``rows`` as columns: transposed by ``zip`` and checked by ``array``, both in C, so
    no Python code runs per line on a well-formed journal (two million lines on 2,048 ranks).
    Anything unexpected (a missing key, a null, a non-object line) takes the careful path."""
    try:
        table = list(zip(*map(_ROW, rows), strict=True))
        if not table:
            return
        times = array("d", table[0])
        if any(map(isnan, times)) or min(times) < 0 or max(times) > TIME_LIMIT:
            raise TypeError("a time out of range")
        steps = array("q", table[1])
        columns = [array("q", column) for column in table[3:]]
        if min(steps) < 0 or min(map(min, columns)) < 0:
            raise TypeError("a negative figure")
        codes = "".join([_EVENT_CODES.get(event, "?") for event in table[2]])
    except (KeyError, TypeError, OverflowError):
        _append_carefully(journal, rows, events)
        return
    journal.times.extend(times)
    journal.steps.extend(steps)
    events.append(codes)
    for name, column in zip(COLUMNS, columns, strict=True):
        journal.columns[name].extend(column)


def _append_carefully(
    journal: ProcessJournal, rows: list[dict[str, object]], events: list[str]
) -> None:
    """Row by row: drops what :func:`readable_line` refuses, nulls become ``MISSING``."""
    good = [row for row in rows if readable_line(row)]
    journal.bad_lines += len(rows) - len(good)
    if not good:
        return
    journal.times.extend([float(row["time"]) for row in good])
    steps = [_int64(row.get("step")) for row in good]
    if MISSING in steps:  # an OOM outside a step: the last step
        base = len(journal.steps)
        last = journal.steps[-1] if journal.steps else MISSING
        for index, step in enumerate(steps):
            if step == MISSING:
                journal.stepless.add(base + index)
            last = step if step != MISSING else last
            steps[index] = last
    journal.steps.extend(steps)
    events.append("".join([_EVENT_CODES.get(str(row.get("event")), "?") for row in good]))
    for name in COLUMNS:
        journal.columns[name].extend([_int64(row.get(name)) for row in good])


TIME_LIMIT = 1e13
"""Larger Unix times are no times (year 318,857): such lines are skipped as unreadable."""

FIGURES = ("step", *COLUMNS, "allocation_bytes")
"""A line's numbers besides its time: none of them is ever negative or non-finite."""


def readable_line(row: object) -> TypeGuard[dict[str, Any]]:
    """Whether a journal line is read: an object whose time is a finite Unix time (0 to
    ``TIME_LIMIT``) and whose figures are none of them negative or non-finite.

    The one rule every journal reader applies (``overview``, ``watch``): a NaN time or a
    ``-5`` byte count is no line a writer made, and read as one it would make a rank fail, or
    hold negative memory. A figure of another type (a string) reads as null, as null always did.
    """
    if type(row) is not dict:
        return False
    when = row.get("time")
    if not isinstance(when, float | int) or isinstance(when, bool):
        return False
    if not 0 <= when <= TIME_LIMIT:
        return False  # NaN fails the comparison too
    for key in FIGURES:
        value = row.get(key)
        if isinstance(value, bool) or not isinstance(value, float | int):
            continue  # null, or a type that reads as null
        if value < 0 or (isinstance(value, float) and not isfinite(value)):
            return False
    return True


def _int64(value: object) -> int:
    """``value`` if it is an int an ``array("q")`` holds (and not ``MISSING``), else ``MISSING``."""
    if type(value) is int and MISSING < value < (1 << 63):
        return value
    return MISSING


def read_run_journals(root: str) -> list[ProcessJournal]:
    """Every process's journal under ``root`` (a run folder, or its journal folder itself),
    read in this process: for a command that wants the journals alone, without ``overview``'s
    sidecars and worker processes."""
    groups: dict[tuple[int, int], list[JournalFile]] = {}
    for item in list_journals(root) + list_journals(str(_layout.journal_folder(Path(root)))):
        groups.setdefault((item.rank, item.pid), []).append(item)
    return read_processes(list(groups.values()))


def read_processes(groups: list[list[JournalFile]]) -> list[ProcessJournal]:
    """``read_process`` for each group: the unit of work one worker process does."""
    return [journal for group in groups for journal in read_process(group)]
