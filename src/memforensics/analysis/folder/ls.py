"""``ls``: every dump of a run folder across ranks, and which rank hit an OOM first.

A 2,000-rank job leaves thousands of files; the first question is which rank failed first, since
the others usually fail in sympathy (a collective waits, a retry allocates). Listing reads only
sidecars and file names, never the pickles, so it stays fast on a shared file system. Stray files,
half-written temporaries and dumps without a sidecar are tolerated.
"""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from memforensics import _layout
from memforensics._errors import SnapshotLoadError
from memforensics._layout import snapshot_stem
from memforensics._units import outside_pytorch_bytes
from memforensics.analysis.diagnosis import Diagnosis
from memforensics.analysis.dump import read_sidecar_file
from memforensics.analysis.dump.load import head_marked_predicted
from memforensics.analysis.dump.meta import dump_meta, read_sidecar
from memforensics.analysis.folder.journals import JournalFile, list_journals

# One pass over a run folder for ``overview``: journal files and dump sidecars, no pickle.
#
# A run folder on a shared file system holds thousands of files; a ``stat`` each is what makes
# tools crawl there. So every folder is listed exactly once with ``os.scandir`` (whose entries
# know file from folder without a ``stat`` on Linux), journal files are only named, and the
# sidecars, small JSON files, are the only other thing read.


@dataclass(frozen=True, slots=True)
class DumpRecord:
    """One dump as its sidecar (else its name) tells it: enough to link to and to place."""

    path: str  # relative to the run folder, "/"-separated
    kind: str | None
    rank: int | None
    step: int | None
    time: float | None  # Unix seconds, from the sidecar's created_at


@dataclass
class RunFiles:
    """What the listing found: journal files grouped per process, dumps, and a world size."""

    journals: dict[tuple[int, int], list[JournalFile]] = field(default_factory=dict)
    dumps: list[DumpRecord] = field(default_factory=list)
    world_size: int | None = None
    errors: list[str] = field(default_factory=list)
    absurd: list[str] = field(default_factory=list)
    """Claims no run can make (a world size or rank of 2^31 or more), ignored, for ``problems``."""


def scan_run(root: str) -> RunFiles:
    """List ``root`` (and each subfolder once); read the sidecars. Never raises on content."""
    found = RunFiles()
    groups: dict[tuple[int, int], list[JournalFile]] = defaultdict(list)
    journal_files = list_journals(root)  # a journal folder given directly
    try:
        with os.scandir(root) as entries:
            folders = [entry for entry in entries if entry.is_dir(follow_symlinks=False)]
    except OSError as exc:
        found.errors.append(f"{root}: {exc.strerror or exc}")
        folders = []
    for folder in folders:
        if folder.name == _layout.JOURNAL_FOLDER:
            journal_files.extend(list_journals(folder.path))
        elif not folder.name.startswith("."):
            _scan_dump_folder(folder.path, folder.name, found)
    for item in journal_files:
        if item.rank >= _layout.RANK_LIMIT:
            found.absurd.append(f"{os.path.basename(item.path)}: rank above {_layout.RANK_LIMIT:,}")
            continue
        groups[(item.rank, item.pid)].append(item)
    found.journals = dict(groups)
    return found


def _scan_dump_folder(path: str, name: str, found: RunFiles) -> None:
    snapshots: dict[str, str] = {}
    sidecars: list[str] = []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue  # temporaries of a writer still at work, or killed
                if entry.name.endswith(_layout.SIDECAR_SUFFIX):
                    sidecars.append(entry.name[: -len(_layout.SIDECAR_SUFFIX)])
                stem = _layout.snapshot_stem(entry.name)
                if stem is not None:
                    snapshots[stem] = entry.name
    except OSError as exc:
        found.errors.append(f"{name}: {exc.strerror or exc}")
        return
    for stem, file_name in sorted(snapshots.items()):
        side = os.path.join(path, _layout.sidecar_name(stem))
        sidecar = _read_sidecar(side, found) if stem in sidecars else None
        record = _record(f"{name}/{file_name}", name, stem, sidecar)
        if record.kind == "oom" and _is_empty(os.path.join(path, file_name), sidecar):
            found.errors.append(f"{record.path}: empty (0 bytes), not counted as an OOM")
            record = dataclasses.replace(record, kind=EMPTY)
        found.dumps.append(record)
        world = sidecar.get("world_size") if sidecar else None
        if type(world) is int and world >= _layout.RANK_LIMIT:
            found.absurd.append(f"{name}/{file_name}: world_size above {_layout.RANK_LIMIT:,}")
        elif type(world) is int and world > 0:
            found.world_size = max(found.world_size or 0, world)


Diagnose = Callable[[Path], "Diagnosis | None"]
"""What a dump's story says is its cause (``explain(path).diagnosis``), passed in by the caller
(the CLI answers from its cache): ``overview`` and ``watch`` tell the story every command
tells of a failed rank's dump."""


def oom_dumps(root: str | Path) -> list[DumpRecord]:
    """The dumps of the run's ``oom`` folder, as :func:`scan_run` records them (a 0-byte file
    is no OOM): what ``watch`` lists to find a failed rank's dump, without scanning the run."""
    found = RunFiles()
    _scan_dump_folder(os.path.join(root, "oom"), "oom", found)
    return found.dumps


def first_oom_dump(dumps: Iterable[DumpRecord], rank: int) -> DumpRecord | None:
    """The earliest OOM dump of ``rank`` (by its sidecar's time, unknown last, then path): the
    one whose story ``overview`` and ``watch`` tell for a failed rank."""
    ooms = [d for d in dumps if d.kind == "oom" and d.rank == rank]
    return min(
        ooms, key=lambda d: (d.time if d.time is not None else float("inf"), d.path), default=None
    )


EMPTY = "empty"
"""The kind a 0-byte dump file gets: it holds no snapshot, so it is no OOM."""


def _is_empty(path: str, sidecar: dict[str, object] | None) -> bool:
    """An OOM dump of 0 bytes: as its sidecar's ``snapshot_bytes`` says (written after the
    whole pickle), else as a ``stat`` says, the one ``stat`` the scan makes, for an OOM dump
    without a sidecar (a writer killed between the two, or a file from elsewhere)."""
    size = sidecar.get("snapshot_bytes") if sidecar is not None else None
    if type(size) is int and size > 0:
        return False
    try:
        return os.stat(path).st_size == 0
    except OSError:
        return False


def _read_sidecar(path: str, found: RunFiles) -> dict[str, object] | None:
    """The sidecar at ``path`` by the one sidecar reader; an unreadable one is a problem."""
    try:
        return read_sidecar_file(Path(path))
    except SnapshotLoadError as exc:
        found.errors.append(str(exc))
        return None


def _record(path: str, folder: str, stem: str, sidecar: dict[str, object] | None) -> DumpRecord:
    """A dump in a folder of no known kind counts as a window (it has no OOM to mark)."""
    side = sidecar or {}
    named = _layout.parse_stem(stem)
    kind = side.get("kind")
    if not isinstance(kind, str):
        kind = _layout.folder_kind(folder) or _layout.WINDOW
    rank = side.get("rank")
    step = side.get("step")
    return DumpRecord(
        path=path,
        kind=kind,
        rank=_plausible(rank if type(rank) is int else named.rank),
        step=step if type(step) is int else named.step,
        time=_timestamp(side.get("created_at")),
    )


def _plausible(rank: int | None) -> int | None:
    """A rank a run can have, else None (the dump is listed, not placed)."""
    return rank if rank is not None and 0 <= rank < _layout.RANK_LIMIT else None


def _timestamp(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


SCHEMA = 2
"""``ls --json``'s ``schema`` (docs/json.md: adding keys keeps it; renaming or removing one
bumps it)."""


@dataclass(frozen=True, slots=True)
class DumpEntry:
    """One dump file in a run folder: what its sidecar (else its path) says, and its size.

    ``external_bytes`` (OOM dumps): device memory outside PyTorch's allocator then
    (limit - free - reserved), from the sidecar's observer figures and allocator statistics.
    """

    path: Path
    kind: str | None
    rank: int | None
    step: int | None
    steps: tuple[int, int] | None
    device_index: int | None
    snapshot_bytes: int  # the file's size, under the sidecar's name for it
    created_at: str | None
    partial: bool | None
    truncated: bool | None
    has_sidecar: bool
    sidecar_error: str | None
    external_bytes: int | None
    empty: bool = False
    """A file of 0 bytes: a writer that never wrote (not memforensics', whose files appear
    whole), or a disk that was full. No OOM, whatever its name or sidecar say."""
    predicted: bool = False
    """Its sidecar says ``memforensics plan`` wrote it: a prediction, not a GPU's record."""


@dataclass(frozen=True)
class RunListing:
    """All dumps under a folder, oldest first, and the earliest OOM among them (by sidecar
    time, else file-name time, else mtime)."""

    root: Path
    dumps: tuple[DumpEntry, ...]
    first_oom: DumpEntry | None


def external_from_sidecar(sidecar: dict[str, Any]) -> int | None:
    """The memory outside PyTorch at a sidecar's OOM (its ``oom`` object), else None."""
    oom = sidecar.get("oom")
    if not isinstance(oom, dict):
        return None
    stats = oom.get("allocator")
    reserved = stats.get("reserved_bytes.all.current") if isinstance(stats, dict) else None
    total, free = oom.get("device_total_bytes"), oom.get("device_free_bytes")
    return outside_pytorch_bytes(_int(total), _int(free), _int(reserved))


def _int(value: object) -> int | None:
    """``value`` if it is an int (JSON true is not a size), else None."""
    return value if type(value) is int else None


def list_dumps(root: str | Path) -> RunListing:
    """Find every ``*.pickle`` / ``*.pkl`` dump (or ``.gz`` of either) under ``root``."""
    folder = Path(root)
    if not folder.is_dir():
        raise SnapshotLoadError(f"{folder}: not a folder")
    entries = [_entry(path) for path in _snapshot_files(folder)]
    entries.sort(key=_order)
    first_oom = next((e for e in entries if e.kind == "oom" and not e.empty), None)  # by time
    return RunListing(folder, tuple(entries), first_oom)


def _snapshot_files(folder: Path) -> list[Path]:
    found: list[Path] = []
    for directory, _dirs, files in os.walk(folder, onerror=None):
        for name in files:
            path = Path(directory, name)
            if not name.startswith(".") and snapshot_stem(name) is not None and path.is_file():
                found.append(path)
    return found


def _entry(path: Path) -> DumpEntry:
    error: str | None = None
    try:
        sidecar = read_sidecar(path)
    except SnapshotLoadError as exc:
        sidecar, error = None, str(exc)
    said = sidecar is not None and _layout.PREDICTED in sidecar
    meta = dump_meta(path, sidecar, marked=not said and head_marked_predicted(path))
    try:
        stat = path.stat()
        size, mtime = stat.st_size, datetime.fromtimestamp(stat.st_mtime, tz=timezone.utc)
    except OSError:
        size, mtime = -1, None
    return DumpEntry(
        path=path,
        kind=meta.kind,
        rank=meta.rank,
        step=meta.step,
        steps=meta.steps,
        device_index=meta.device_index,
        snapshot_bytes=max(size, 0),
        created_at=meta.created_at or (mtime.isoformat() if mtime else None),
        partial=meta.partial,
        truncated=meta.truncated,
        has_sidecar=meta.has_sidecar,
        sidecar_error=error,
        external_bytes=external_from_sidecar(meta.sidecar),
        empty=size == 0,
        predicted=meta.predicted,
    )


def _order(entry: DumpEntry) -> tuple[float, int, str]:
    """Sort by time (unknown last), then rank, then path: a stable, meaningful order."""
    moment = float("inf")
    if entry.created_at is not None:
        try:
            parsed = datetime.fromisoformat(entry.created_at.replace("Z", "+00:00"))
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=timezone.utc)
            moment = parsed.timestamp()
        except ValueError:
            pass
    rank = entry.rank if entry.rank is not None else 1 << 62
    return (moment, rank, str(entry.path))
