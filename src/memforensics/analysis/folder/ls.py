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
from memforensics._layout import snapshot_stem
from memforensics._units import outside_pytorch_bytes
from memforensics.analysis.dump.meta import dump_meta, read_sidecar

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
    first_oom = next((entry for entry in entries if entry.kind == "oom"), None)  # sorted by time
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
    meta = dump_meta(path, sidecar)
    try:
        stat = path.stat()
        size, mtime = stat.st_size, datetime.fromtimestamp(stat.st_mtime, tz=timezone.utc)
    except OSError:
        size, mtime = 0, None
    return DumpEntry(
        path=path,
        kind=meta.kind,
        rank=meta.rank,
        step=meta.step,
        steps=meta.steps,
        device_index=meta.device_index,
        snapshot_bytes=size,
        created_at=meta.created_at or (mtime.isoformat() if mtime else None),
        partial=meta.partial,
        truncated=meta.truncated,
        has_sidecar=meta.has_sidecar,
        sidecar_error=error,
        external_bytes=external_from_sidecar(meta.sidecar),
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
