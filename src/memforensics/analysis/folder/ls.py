"""``ls``: every dump of a run folder across ranks, and which rank hit an OOM first.

A 2,000-rank job leaves thousands of files; the first question is which rank failed first, since
the others usually fail in sympathy (a collective waits, a retry allocates). Listing reads only
sidecars and file names, never the pickles, so it stays fast on a shared file system. Stray files,
half-written temporaries and dumps without a sidecar are tolerated.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from memforensics._errors import SnapshotLoadError
from memforensics.analysis.dump.meta import DumpMeta, dump_meta, read_sidecar, snapshot_stem


@dataclass(frozen=True, slots=True)
class DumpEntry:
    """One dump file in a run folder."""

    path: Path
    meta: DumpMeta
    size_bytes: int
    created_at: str | None
    sidecar_error: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (one element of ``ls --json``'s ``dumps``)."""
        return {
            "path": str(self.path),
            "kind": self.meta.kind,
            "rank": self.meta.rank,
            "step": self.meta.step,
            "steps": list(self.meta.steps) if self.meta.steps else None,
            "device_index": self.meta.device_index,
            "snapshot_bytes": self.size_bytes,  # the sidecar's name for the file's size
            "created_at": self.created_at,
            "partial": self.meta.partial,
            "truncated": self.meta.truncated,
            "sidecar": self.meta.has_sidecar,
            "sidecar_error": self.sidecar_error,
            "external_bytes": self.external_bytes,
        }

    @property
    def external_bytes(self) -> int | None:
        """OOM dumps: device memory outside PyTorch's allocator then (limit - free - reserved),
        from the sidecar's observer figures and allocator statistics."""
        return external_from_sidecar(self.meta.sidecar)


@dataclass(frozen=True)
class RunListing:
    """All dumps under a folder, oldest first, and the earliest OOM."""

    root: Path
    dumps: tuple[DumpEntry, ...]

    @property
    def first_oom(self) -> DumpEntry | None:
        """The OOM dump with the earliest time (sidecar time, else file-name time, else mtime)."""
        ooms = [entry for entry in self.dumps if entry.meta.kind == "oom"]
        return min(ooms, key=_order, default=None)

    def to_dict(self) -> dict[str, Any]:
        """The ``ls --json`` object."""
        first = self.first_oom
        return {
            "root": str(self.root),
            "dumps": [entry.to_dict() for entry in self.dumps],
            "first_oom": None
            if first is None
            else {"rank": first.meta.rank, "step": first.meta.step, "path": str(first.path)},
        }


def external_from_sidecar(sidecar: dict[str, Any]) -> int | None:
    """``device_total - device_free - reserved`` of a sidecar's ``oom`` object, else None."""
    oom = sidecar.get("oom")
    if not isinstance(oom, dict):
        return None
    stats = oom.get("allocator")
    reserved = stats.get("reserved_bytes.all.current") if isinstance(stats, dict) else None
    figures = (oom.get("device_total_bytes"), oom.get("device_free_bytes"), reserved)
    if not all(type(value) is int for value in figures):
        return None
    total, free, held = (int(str(value)) for value in figures)
    return max(total - free - held, 0)


def list_dumps(root: str | Path) -> RunListing:
    """Find every ``*.pickle`` / ``*.pkl`` dump (or ``.gz`` of either) under ``root``."""
    folder = Path(root)
    if not folder.is_dir():
        raise SnapshotLoadError(f"{folder}: not a folder")
    entries = [_entry(path) for path in _snapshot_files(folder)]
    entries.sort(key=_order)
    return RunListing(folder, tuple(entries))


def _snapshot_files(folder: Path) -> list[Path]:
    found: list[Path] = []
    for directory, _dirs, files in os.walk(folder, onerror=None):
        for name in files:
            path = Path(directory, name)
            if not name.startswith(".") and snapshot_stem(path) is not None and path.is_file():
                found.append(path)
    return found


def _entry(path: Path) -> DumpEntry:
    error: str | None = None
    try:
        sidecar = read_sidecar(path)
    except SnapshotLoadError as exc:
        sidecar, error = None, str(exc)
    meta = dump_meta(path, sidecar)
    try:
        stat = path.stat()
        size, mtime = stat.st_size, datetime.fromtimestamp(stat.st_mtime, tz=timezone.utc)
    except OSError:
        size, mtime = 0, None
    created = meta.created_at or (mtime.isoformat() if mtime else None)
    return DumpEntry(path, meta, size, created, error)


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
    rank = entry.meta.rank if entry.meta.rank is not None else 1 << 62
    return (moment, rank, str(entry.path))
