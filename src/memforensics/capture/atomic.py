"""Atomic, collision-free dump files: the snapshot pickle first, then its JSON sidecar.

Evidence is complete or absent: each file is written under a temporary name in its final folder
(created with ``O_CREAT | O_EXCL``, so a planted symlink is never followed), flushed, fsynced and
renamed into place. Readers therefore never see a truncated pickle, and a sidecar only appears
once the pickle it describes is whole. Names carry rank and pid so thousands of ranks can share
one folder on a shared filesystem.

Each temporary file is held under an exclusive ``flock`` from its creation to its rename, and
its name carries a random token besides host and pid. A temporary file is stale, and removed,
only when it is older than ``STALE_AFTER_S`` and nobody holds its lock: pids say nothing across
pid namespaces (two containers of one host, python as pid 1 in each), so no pid is consulted.

A kill -9 mid-write leaves a temporary file behind. To find it again without walking ``out_dir``
(on a shared filesystem, 2,000 ranks each listing a tree of 100,000 files at ``install()`` is a
metadata storm), each write first registers its temporary name as a symlink in the rank's own
in-flight folder, ``<out_dir>/.inflight/rank<R>/``, and removes it once the file is renamed. At
``install()`` a rank reads only that folder: two metadata operations per write, one small
listing per install, whatever else ``out_dir`` holds. The folders go again once empty, so
between writes ``out_dir`` holds nothing but dumps.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from memforensics import _layout

PICKLE_PROTOCOL = 4
"""The protocol ``torch.cuda.memory._dump_snapshot`` uses; memory_viz reads it."""

_FILE_MODE = 0o644  # further reduced by the umask; never group- or world-writable by default
_DIR_MODE = 0o755  # the same for the folders dumps land in: nobody else may swap a dump
_TMP_MARK = ".tmp-"
STALE_AFTER_S = 3600.0
"""A temporary file untouched for an hour and unlocked is a dead writer's: a live one holds its
``flock`` until the rename, and writes (updating the time) far more often than hourly."""
_TMP_RE = re.compile(r"^\..+\.tmp-(?P<host>[^-]+)-(?P<pid>\d+)-(?P<token>[0-9a-f]+)$")
_LINK_RE = re.compile(r"^\.(?P<host>[^-]+)-(?P<pid>\d+)-(?P<token>[0-9a-f]+)$")


@dataclass(frozen=True, slots=True)
class DumpPaths:
    """Where one dump lands: the snapshot pickle and its sidecar beside it, and the rank's
    in-flight folder where its temporary names are registered (None: not registered)."""

    snapshot: Path
    sidecar: Path
    inflight: Path | None = None


def _hostname() -> str:
    return socket.gethostname().replace("-", "_") or "host"


def _dump_paths(out_dir: Path, snapshot: Path, rank: int) -> DumpPaths:
    """The snapshot, its sidecar and the rank's in-flight folder (every name from ``_layout``)."""
    inflight = _layout.inflight_folder(out_dir, rank)
    return DumpPaths(snapshot, _layout.sidecar_path(snapshot), inflight)


def window_paths(out_dir: Path, folder: str, rank: int, pid: int, token: str = "") -> DumpPaths:
    """``<out_dir>/steps4-7/rank0_pid1234.pickle`` and ``.json`` (``token``: see ``_layout``)."""
    return _dump_paths(out_dir, _layout.window_snapshot(out_dir, folder, rank, pid, token), rank)


def event_paths(
    out_dir: Path,
    kind: str,
    rank: int,
    pid: int,
    step: int | None,
    now: datetime,
    token: str = "",
) -> DumpPaths:
    """``<out_dir>/oom/rank3_pid77_step12_<time>.pickle`` and ``.json`` (no ``_stepN`` outside
    steps)."""
    snapshot = _layout.event_snapshot(out_dir, kind, rank, pid, step, now, token)
    return _dump_paths(out_dir, snapshot, rank)


def utc_now() -> datetime:
    """The current time in UTC (sidecars use ISO-8601 UTC)."""
    return datetime.now(timezone.utc)


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable; not every filesystem allows it, which is fine."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _register(inflight: Path | None, name: str, tmp: Path) -> Path | None:
    """Record ``tmp`` in the rank's in-flight folder; None when that is impossible (the write
    goes on regardless: evidence matters more than tidying up after a crash)."""
    if inflight is None:
        return None
    link = inflight / name
    target = os.path.relpath(tmp, inflight.parent.parent)  # relative to out_dir
    for _ in range(3):  # another writer of this rank may remove the empty folder meanwhile
        try:
            os.symlink(target, link)
            return link
        except FileNotFoundError:
            for folder in (inflight.parent, inflight):
                with contextlib.suppress(FileExistsError, OSError):
                    os.mkdir(folder, _DIR_MODE)  # each level with our mode, never 0777
        except OSError:
            return None
    return None


def _unregister(link: Path | None) -> None:
    """Drop the registration, and the rank's folder and ``.inflight`` once they are empty, so
    ``out_dir`` holds nothing but dumps between writes."""
    if link is None:
        return
    with contextlib.suppress(OSError):
        os.unlink(link)
    for folder in (link.parent, link.parent.parent):
        try:
            os.rmdir(folder)
        except OSError:
            return  # not empty (another write in flight, another rank): leave it


@contextlib.contextmanager
def _atomic_file(final: Path, inflight: Path | None = None) -> Iterator[IO[bytes]]:
    """Yield a file that becomes ``final`` only if the block completes; else nothing remains."""
    folder = final.parent
    folder.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    suffix = f"{_hostname()}-{os.getpid()}-{secrets.token_hex(4)}"
    tmp = folder / f".{final.name}{_TMP_MARK}{suffix}"
    link = _register(inflight, f".{suffix}", tmp)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(tmp, flags, _FILE_MODE)
        try:
            with os.fdopen(fd, "wb", buffering=1 << 20) as handle:
                try_lock(handle.fileno())  # held until the file is renamed: never stale
                yield handle
                handle.flush()
                os.fsync(handle.fileno())
                os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    finally:
        _unregister(link)
    _fsync_dir(folder)


def write_snapshot(path: Path, snapshot: Any, inflight: Path | None = None) -> int:
    """Pickle ``snapshot`` atomically to ``path``; return its size in bytes."""
    with _atomic_file(path, inflight) as handle:
        pickle.dump(snapshot, handle, protocol=PICKLE_PROTOCOL)
    return path.stat().st_size


def write_sidecar(path: Path, sidecar: dict[str, Any], inflight: Path | None = None) -> None:
    """Write the JSON sidecar atomically (after its snapshot, so it never describes nothing)."""
    data = json.dumps(sidecar, indent=2, sort_keys=True, default=str).encode() + b"\n"
    with _atomic_file(path, inflight) as handle:
        handle.write(data)


def write_file_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: the one way memforensics writes a file.

    The same temporary name, exclusive create (a planted symlink is refused, never followed),
    fsync and rename as a dump, so a page opened while it is written (a browser refreshing it,
    a colleague on a shared filesystem) never shows half of it. Raises OSError; nothing of a
    failed write remains.
    """
    with _atomic_file(path) as handle:
        handle.write(data)


def write_dump(
    paths: DumpPaths, snapshot: Any, make_sidecar: Callable[[int], dict[str, Any]]
) -> int:
    """Write snapshot then sidecar; ``make_sidecar`` receives the snapshot's size in bytes.

    Complete or absent: when the sidecar cannot be written (a full disk), the snapshot it would
    describe is removed again, so no dump is left that ``mf.dumps`` and the log do not name.
    """
    size = write_snapshot(paths.snapshot, snapshot, paths.inflight)
    try:
        write_sidecar(paths.sidecar, make_sidecar(size), paths.inflight)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(paths.snapshot)
        raise
    return size


def remove_dump_folder(out_dir: Path, folder: str, rank: int, pid: int, token: str = "") -> None:
    """Delete this process's files of one window (other ranks delete their own)."""
    paths = window_paths(out_dir, folder, rank, pid, token)
    for path in (paths.sidecar, paths.snapshot):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    with contextlib.suppress(OSError):
        paths.snapshot.parent.rmdir()  # only succeeds once every rank's files are gone


def try_lock(fd: int) -> bool:
    """Take an exclusive ``flock`` on ``fd`` without waiting; False if another holds one. A
    platform or file system without ``flock`` counts as taken: the age alone decides there."""
    try:
        import fcntl
    except ImportError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


def _old(when: float) -> bool:
    return time.time() - when > STALE_AFTER_S


def _remove_if_stale(temp: Path) -> bool:
    """Unlink ``temp`` if it is older than ``STALE_AFTER_S`` and unlocked (checked and removed
    under its lock, so a writer cannot be mid-way); True when it went."""
    try:
        fd = os.open(temp, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        if not _old(os.fstat(fd).st_mtime) or not try_lock(fd):
            return False
        os.unlink(temp)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def clean_stale_temp_files(out_dir: Path, rank: int) -> list[Path]:
    """Remove the temp files rank ``rank``'s dead writers on this host left (a kill -9
    mid-write), found in its in-flight folder alone: nothing else in ``out_dir`` is listed.

    A temp file goes only when it is provably stale: older than ``STALE_AFTER_S`` and not
    locked (a live writer holds its ``flock`` to the end), so a writer in another container of
    this host, whose pid means nothing here, is never disturbed; other hosts' files are never
    touched. A registration is trusted only as far as it names a temporary file of that same
    writer inside ``out_dir``: a planted link can make this remove nothing else.
    """
    removed: list[Path] = []
    inflight = _layout.inflight_folder(out_dir, rank)
    try:
        names = os.listdir(inflight)
    except OSError:
        return removed
    host = _hostname()
    for name in names:
        link_match = _LINK_RE.match(name)
        if not link_match or link_match["host"] != host:
            continue
        link = inflight / name
        with contextlib.suppress(OSError):
            temp = _registered_temp(out_dir, link, link_match)
            if temp is None:
                _unregister(link)  # planted, or not a temp file's: never a writer's
            elif os.path.lexists(temp):
                if _remove_if_stale(temp):
                    removed.append(temp)
                    _unregister(link)
            elif _old(os.lstat(link).st_mtime):
                _unregister(link)  # its writer is long gone, its file renamed or never made
    return removed


def _registered_temp(out_dir: Path, link: Path, link_match: re.Match[str]) -> Path | None:
    """The temp file ``link`` registers, if it is one this process could have written."""
    target = os.readlink(link)
    parts = Path(target).parts
    if os.path.isabs(target) or ".." in parts or len(parts) < 2:
        return None
    temp = out_dir / target
    match = _TMP_RE.match(temp.name)
    if not match or (match["host"], match["pid"], match["token"]) != (
        link_match["host"],
        link_match["pid"],
        link_match["token"],
    ):
        return None
    if os.path.realpath(temp.parent) != os.path.join(os.path.realpath(out_dir), *parts[:-1]):
        return None  # a folder on the way was swapped for a symlink: not ours to follow
    return temp


def check_writable(out_dir: Path) -> None:
    """Create ``out_dir`` and prove a file can be written there; raise OSError if not."""
    out_dir.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    probe = out_dir / f".probe{_TMP_MARK}{_hostname()}-{os.getpid()}-{secrets.token_hex(4)}"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
    try:
        os.write(fd, b"ok")
    finally:
        os.close(fd)
        probe.unlink()
