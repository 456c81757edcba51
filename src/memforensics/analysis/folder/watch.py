"""``watch``'s figures: every rank of a running job, from the new bytes of each journal.

:class:`JournalWatch` keeps, per journal file, the byte offset read so far and, per process,
the figures of its newest line and the points its forecast needs. Each :meth:`~JournalWatch.poll`
lists the journal folder once and reads only what each file gained since, so a job of
thousands of ranks costs a ``scandir`` plus one ``open``/``fstat`` per file per refresh, and
parsing only the new lines. A read takes at most ``READ_CHUNK`` bytes of a file per poll, and
each byte once: a line still being written (no newline yet) is kept, up to ``MAX_LINE`` bytes,
until its end arrives; a longer one is no journal line and is skipped to its newline. A file
that shrank or was replaced (rotation) is read again from its start. Lines
:func:`~memforensics.analysis.folder.journals.readable_line` refuses are skipped and counted.
:meth:`~JournalWatch.view` turns the state into rows, most urgent first. No rich here: the
command renders.
"""

from __future__ import annotations

import json
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memforensics import _layout
from memforensics._errors import SnapshotLoadError
from memforensics.analysis.diagnosis import Diagnosis
from memforensics.analysis.dump import open_regular
from memforensics.analysis.folder.forecast import WINDOW, Forecast, forecast_line
from memforensics.analysis.folder.journals import readable_line, upgrade_keys
from memforensics.analysis.folder.ls import Diagnose, first_oom_dump, oom_dumps
from memforensics.analysis.schema import json_key

SCHEMA = 2
"""``watch --once --json``'s ``schema`` (docs/json.md: adding keys keeps it; renaming or
removing one bumps it)."""

_KEEP = 2 * WINDOW
"""Points kept per process for its forecast (the fit uses the newest ``WINDOW``)."""

READ_CHUNK = 1 << 20
"""Bytes read of one journal file per poll at most (a journal line is about 400 bytes; the
writer rotates at 4 MiB): a file that grew more is caught up over the next polls."""
MAX_LINE = 64 << 10
"""A line still without its newline past this many bytes is no journal line: skipped."""


@dataclass(slots=True)
class _Tail:
    """How far one journal file has been read, and the start of a line not yet whole."""

    inode: int = -1
    offset: int = 0
    pending: bytes = b""
    discarding: bool = False
    """Inside a line over ``MAX_LINE``: what comes up to its newline is dropped."""


@dataclass(slots=True)
class _Process:
    """One process's newest figures, its failure and its recent points."""

    rank: int
    pid: int
    time: float = 0.0
    step: int | None = None
    allocated: int | None = None
    reserved: int | None = None
    peak_reserved: int | None = None
    retries: int | None = None
    ooms: int = 0
    external: int | None = None
    limit: int | None = None
    first_oom: tuple[float, int | None] | None = None
    closed: bool = False
    points: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=_KEEP))
    forecast: Forecast | None = None
    stale: bool = False
    """New points arrived since the forecast was computed."""


@dataclass(frozen=True, slots=True)
class WatchRow:
    """One rank as ``watch`` shows it (its newest process's figures)."""

    rank: int
    step: int | None
    allocated_bytes: int | None
    reserved_bytes: int | None
    peak_reserved_bytes: int | None
    headroom_bytes: int | None
    """``limit - reserved - outside PyTorch`` on the newest line: what is left to reserve."""
    alloc_retries: int | None
    ooms: int
    failed: bool
    failed_step: int | None
    closed: bool
    forecast: Forecast | None

    def urgency(self) -> tuple[int, float, float, int]:
        """Sort key, most urgent first: failed ranks (earliest step first), then ranks with a
        forecast (fewest steps left), then the rest by least headroom."""
        if self.failed:
            return (0, float(self.failed_step or 0), 0.0, self.rank)
        steps_left = float(self.forecast.steps_left) if self.forecast else float("inf")
        headroom = float(self.headroom_bytes) if self.headroom_bytes is not None else float("inf")
        return (1, steps_left, headroom, self.rank)


@dataclass(frozen=True, slots=True)
class FirstOom:
    """The earliest OOM any journal line records."""

    rank: int
    step: int | None
    time: float


@dataclass(frozen=True, slots=True)
class WatchView:
    """What one refresh shows: the totals, the first OOM and the rows, most urgent first."""

    ranks_seen: int
    allocated_bytes: int
    reserved_bytes: int
    failed_ranks: int
    ooms: int
    first_oom: FirstOom | None
    torn_lines: int
    """Files whose last line is still being written (left for the next poll)."""
    skipped_lines: int
    """Lines skipped: unreadable, over ``MAX_LINE``, or refused by ``readable_line``."""
    rows: tuple[WatchRow, ...] = field(metadata=json_key("ranks"))
    first_oom_diagnosis: Diagnosis | None = None
    """The first failed rank's causes, from its earliest OOM dump (the story ``summary`` tells
    of it); None before that dump is written, or when no ``diagnose`` was given."""


class JournalWatch:
    """Follows a run folder's journals, reading only what each file gained since last time.

    ``diagnose``: asked the causes of the first failed rank's earliest OOM dump, once it is
    written (and once more when its sidecar arrives after it); None: no dump is ever opened.
    """

    def __init__(self, root: str | Path, *, diagnose: Diagnose | None = None) -> None:
        self.root = Path(root)
        self.diagnose = diagnose
        self._story: tuple[Path, bool, Diagnosis | None] | None = None
        """The dump last diagnosed, whether its sidecar was there, and its diagnosis."""
        self._tails: dict[str, _Tail] = {}
        self._processes: dict[tuple[int, int], _Process] = {}
        self._torn: set[str] = set()
        self.bytes_read = 0
        """Bytes read from journal files so far (new bytes only: what the offsets save)."""
        self.skipped_lines = 0

    def poll(self) -> int:
        """Read what every current journal file gained; the number of new lines."""
        folder = self.folder
        try:
            with os.scandir(folder) as entries:
                names = [e.name for e in entries]
        except OSError:
            return 0  # the job has not written its first line yet
        lines = 0
        for name in names:
            parsed = _layout.parse_journal_name(name)
            if parsed is None or parsed[2] != 0:
                continue  # rotated generations hold older lines, read before they rotated
            lines += self._read(os.path.join(folder, name), parsed[0], parsed[1])
        return lines

    @property
    def folder(self) -> Path:
        """The journal folder: ``root`` itself when it is one, else ``root/journal`` (which a
        starting job may not have created yet)."""
        if self.root.name == _layout.JOURNAL_FOLDER:
            return self.root
        return _layout.journal_folder(self.root)

    @property
    def run_folder(self) -> Path:
        """The run folder (``root``, or the folder above it when ``root`` is its journal)."""
        return self.root.parent if self.root.name == _layout.JOURNAL_FOLDER else self.root

    def _diagnosis(self, rank: int) -> Diagnosis | None:
        """The causes of ``rank``'s earliest OOM dump, asked once it exists and again only
        when its sidecar arrives after it (a dump is written before its sidecar)."""
        if self.diagnose is None:
            return None
        if self._story is not None and self._story[1]:
            return self._story[2]
        record = first_oom_dump(oom_dumps(self.run_folder), rank)
        if record is None:
            return None
        path = self.run_folder / record.path
        sidecar = _layout.sidecar_path(path).exists()
        if self._story is None or self._story[0] != path or sidecar:
            try:
                self._story = (path, sidecar, self.diagnose(path))
            except SnapshotLoadError:
                self._story = None  # still being written, or unreadable: asked again next time
                return None
        return self._story[2]

    def _read(self, path: str, rank: int, pid: int) -> int:
        tail = self._tails.setdefault(path, _Tail())
        try:
            with open_regular(path) as handle:  # a FIFO or a device link is never read
                info = os.fstat(handle.fileno())
                if info.st_ino != tail.inode or info.st_size < tail.offset:
                    self._tails[path] = tail = _Tail(info.st_ino)  # new or rotated: from the start
                if info.st_size == tail.offset:
                    return 0
                handle.seek(tail.offset)
                data = handle.read(min(info.st_size - tail.offset, READ_CHUNK))
        except OSError:
            return 0
        self.bytes_read += len(data)
        tail.offset += len(data)
        whole = self._whole_lines(tail, data)
        if tail.pending or tail.discarding:
            self._torn.add(path)  # still being written: the rest comes with the next polls
        else:
            self._torn.discard(path)
        process = self._processes.setdefault((rank, pid), _Process(rank, pid))
        count = 0
        for raw in upgrade_keys(whole).split(b"\n")[:-1]:
            try:
                line = json.loads(raw)
            except (ValueError, RecursionError):
                line = None
            if readable_line(line):
                _apply(process, line)
                count += 1
            else:
                self.skipped_lines += 1
        return count

    def _whole_lines(self, tail: _Tail, data: bytes) -> bytes:
        """The whole lines ``data`` completes (newline ended); keep the rest in ``tail``."""
        if tail.discarding:
            cut = data.find(b"\n")
            if cut < 0:
                return b""
            data, tail.discarding = data[cut + 1 :], False
        else:
            data = tail.pending + data
        end = data.rfind(b"\n") + 1
        rest = data[end:]
        if len(rest) > MAX_LINE:
            self.skipped_lines += 1
            tail.discarding, rest = True, b""
        tail.pending = rest
        return data[:end]

    def view(self) -> WatchView:
        """Rows for every rank (its newest process), most urgent first, with the totals."""
        newest: dict[int, _Process] = {}
        failures: list[FirstOom] = []
        for process in self._processes.values():
            if process.stale:
                process.forecast = _forecast(process)
                process.stale = False
            if process.first_oom is not None:
                when, step = process.first_oom
                failures.append(FirstOom(process.rank, step, when))
            best = newest.get(process.rank)
            if best is None or process.time > best.time:
                newest[process.rank] = process
        failed = {f.rank: f for f in sorted(failures, key=lambda f: -f.time)}
        rows = sorted((_row(p, failed.get(p.rank)) for p in newest.values()), key=WatchRow.urgency)
        first = min(failures, key=lambda f: (f.time, f.rank)) if failures else None
        return WatchView(
            first_oom_diagnosis=self._diagnosis(first.rank) if first is not None else None,
            ranks_seen=len(rows),
            allocated_bytes=sum(r.allocated_bytes or 0 for r in rows),
            reserved_bytes=sum(r.reserved_bytes or 0 for r in rows),
            failed_ranks=len(failed),
            ooms=sum(p.ooms for p in newest.values()),
            first_oom=first,
            torn_lines=len(self._torn),
            skipped_lines=self.skipped_lines,
            rows=tuple(rows),
        )


def _int(value: object) -> int | None:
    """An int a journal writes (int64), else None: a hostile line cannot overflow the fit."""
    return value if type(value) is int and -(1 << 63) < value < (1 << 63) else None


def _apply(process: _Process, line: dict[str, Any]) -> None:
    """Fold one journal line into its process's figures."""
    when = line.get("time")
    if isinstance(when, int | float) and not isinstance(when, bool):
        process.time = float(when)
    step = _int(line.get("step"))
    process.step = step if step is not None else process.step
    event = line.get("event")
    if event == "oom" and process.first_oom is None:
        process.first_oom = (process.time, step)
    if event == "close":
        process.closed = True
    for name, key in (
        ("allocated", "allocated_bytes"),
        ("reserved", "reserved_bytes"),
        ("peak_reserved", "peak_reserved_bytes"),
        ("retries", "alloc_retries"),
        ("external", "external_bytes"),
        ("limit", "device_total_bytes"),
    ):
        value = _int(line.get(key))
        if value is not None:
            setattr(process, name, value)
    ooms = _int(line.get("ooms"))
    process.ooms = max(process.ooms, ooms or 0, 1 if event == "oom" else 0)  # a monotonic count
    allocated = _int(line.get("allocated_bytes"))
    if step is not None and allocated is not None:
        process.points.append((step, allocated + (_int(line.get("external_bytes")) or 0)))
        process.stale = True


def _forecast(process: _Process) -> Forecast | None:
    if process.limit is None or process.first_oom is not None:
        return None
    steps = [step for step, _ in process.points]
    used = [value for _, value in process.points]
    return forecast_line(process.rank, steps, used, process.limit)


def _row(process: _Process, failure: FirstOom | None) -> WatchRow:
    headroom = None
    if process.limit is not None and process.reserved is not None:
        headroom = max(process.limit - process.reserved - (process.external or 0), 0)
    return WatchRow(
        rank=process.rank,
        step=process.step,
        allocated_bytes=process.allocated,
        reserved_bytes=process.reserved,
        peak_reserved_bytes=process.peak_reserved,
        headroom_bytes=headroom,
        alloc_retries=process.retries,
        ooms=process.ooms,
        failed_step=None if failure is None else failure.step,
        failed=failure is not None,
        forecast=process.forecast,
        closed=process.closed,
    )
