"""The CLI's cache of results: what a command computed, kept as checked JSON so the same
question about the same files is answered without reading them again.

A result is kept under the identity of every file it was computed from (:func:`file_key`),
the question (the command and the arguments that change its answer) and the code that computed
it (:func:`code_key`: a hash of the installed package's files, so a changed source file never
serves an old answer). It is stored as :func:`memforensics.analysis.schema.to_json` of a frozen
dataclass behind a checksum line and read back with :func:`~memforensics.analysis.schema.from_json`;
anything that does not read back as the asked type is a miss, computed again and overwritten.
Nothing read back is ever unpickled.

The folder must be this user's and writable by nobody else (a folder above it may not let
another user swap it either): otherwise another user could plant an answer, and the cache is
not used, with one warning. Entries are opened without following a symlink and without waiting
on a FIFO, and must be regular files this user owns; writes go to a temporary file in the
folder, renamed into place. The folder is bounded: least recently used entries go first once
the total passes ``max_bytes`` (``MEMFORENSICS_CACHE_MAX_BYTES``, else the smaller of 2 GiB and
a tenth of the free space there). A folder that cannot be used is never an error.

Analysis never imports this module: it exposes pure functions, and the commands cache them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import memforensics
from memforensics._errors import SnapshotLoadError
from memforensics._layout import sidecar_path, unsafe_folders
from memforensics._text import printable
from memforensics.analysis.dump import (
    SIDECAR_LIMIT,
    dump_meta,
    open_regular,
    read_regular,
    read_sidecar_file,
)
from memforensics.analysis.schema import SchemaError, from_json, to_json

T = TypeVar("T")

FORMAT = 3  # 3: typed results keyed by the code's hash
"""The layout of an entry; raised whenever an entry's framing changes meaning."""
MAX_BYTES_ENV = "MEMFORENSICS_CACHE_MAX_BYTES"
ENTRY_LIMIT = 256 << 20
"""Bytes read of one entry at most: an answer is tens of KiB, a report page a few MiB."""
_DEFAULT_CAP = 2 * 1024**3
_SUFFIX = ".entry"
_TEMP = ".tmp-"
_ENDS = 64 * 1024
_MAGIC = f"memforensics-cache {FORMAT}"
_ADVICE = "use a private cache folder (mode 0700, yours) or --no-cache"


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/memforensics``, else ``~/.cache/memforensics``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memforensics"


def default_max_bytes(folder: Path) -> int:
    """The size cap: the environment's, else min(2 GiB, 10% of the free space at ``folder``)."""
    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    if text.isdigit():
        return int(text)
    try:
        free = shutil.disk_usage(_existing(folder)).free
    except OSError:
        return _DEFAULT_CAP
    return min(_DEFAULT_CAP, free // 10)


def code_hash(package: Path) -> str:
    """A hash of every file of the package in ``package`` (sources and package data; compiled
    bytecode left out), by relative path and content."""
    digest = hashlib.blake2b(digest_size=16)
    for path in sorted(package.rglob("*")):
        if "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo") or not path.is_file():
            continue
        digest.update(f"{path.relative_to(package).as_posix()}\0".encode())
        digest.update(hashlib.blake2b(path.read_bytes(), digest_size=16).digest())
    return digest.hexdigest()


@functools.cache
def code_key() -> str:
    """:func:`code_hash` of the installed ``memforensics`` package, computed once per process."""
    return code_hash(Path(memforensics.__file__).resolve().parent)


def file_key(path: Path) -> str:
    """The identity of the file at ``path`` and of its sidecar, as a hex digest: size,
    modification time, inode, a hash of its first and last 64 KiB, and the sidecar's content
    (or its absence). OSError when it cannot be read or is not a regular file."""
    digest = hashlib.blake2b(digest_size=20)
    try:
        digest.update(b"sidecar:" + read_regular(sidecar_path(path), SIDECAR_LIMIT))
    except OSError:
        digest.update(b"no sidecar")  # read_sidecar says what it makes of an unreadable one
    with open_regular(path) as handle:  # a FIFO or a device is refused, never waited on
        info = os.fstat(handle.fileno())
        digest.update(f"{info.st_size}|{info.st_mtime_ns}|{info.st_ino}|".encode())
        digest.update(handle.read(_ENDS))
        if info.st_size > _ENDS:
            handle.seek(max(info.st_size - _ENDS, _ENDS))
            digest.update(handle.read(_ENDS))
    return digest.hexdigest()


SCHEMA = 2
"""``cache info --json``'s and ``cache clear --json``'s ``schema`` (docs/json.md: adding keys
keeps it; renaming or removing one bumps it)."""


@dataclass(frozen=True)
class Named:
    """What an answer says that the path given decides, not the file's bytes: the file's name as
    given, and the kind, rank and steps its folder and name say (a sidecar says them too, and
    its content is part of the file's key). A kept result holds none of them (:data:`UNNAMED`);
    they are applied afresh to each answer, so a hard link or another path to a dump names
    itself."""

    file: str
    kind: str | None
    rank: int | None
    step: int | None
    steps: tuple[int, int] | None


UNNAMED = Named("", None, None, None, None)


def named_by(path: Path) -> Named | None:
    """What ``path`` names; None when its sidecar cannot be read (the load's warning then names
    the path, so such a dump is answered afresh, never from the cache)."""
    try:
        sidecar = read_sidecar_file(sidecar_path(path))
    except SnapshotLoadError:
        return None
    meta = dump_meta(path, sidecar)
    return Named(printable(str(path)), meta.kind, meta.rank, meta.step, meta.steps)


def renamed(value: T, name: Named) -> T:
    """``value`` (a result dataclass) with the fields :class:`Named` holds set to ``name``'s,
    in it and in the results of its own type it holds (a summary's other devices)."""
    own = {spec.name for spec in dataclasses.fields(value)}  # type: ignore[arg-type]
    changes: dict[str, Any] = {
        key: item for key, item in dataclasses.asdict(name).items() if key in own
    }
    for spec in dataclasses.fields(value):  # type: ignore[arg-type]
        held = getattr(value, spec.name)
        if isinstance(held, tuple) and held and all(type(item) is type(value) for item in held):
            changes[spec.name] = tuple(renamed(item, name) for item in held)
    return dataclasses.replace(value, **changes)  # type: ignore[type-var]


@dataclass(frozen=True)
class CacheInfo:
    """Where the cache is, how many entries it holds and their total size."""

    folder: Path
    entries: int
    bytes: int
    max_bytes: int


@dataclass(frozen=True)
class CacheCleared:
    """Which cache folder was emptied, how many entries went, and how many stayed and why."""

    folder: Path
    removed: int
    kept: int = 0
    """Entries that could not be removed (a read-only folder, a file system error)."""
    reason: str | None = None
    """Why the first of them stayed, as the system said it."""


class ResultCache:
    """Checked results about files, in ``folder``; ``folder=None`` keeps nothing.

    ``code`` is the code's key (default :func:`code_key`): an entry made by other code is a miss.
    """

    def __init__(
        self, folder: Path | None, *, max_bytes: int | None = None, code: str | None = None
    ) -> None:
        self.folder = folder
        self.max_bytes = (
            max_bytes if max_bytes is not None or folder is None else default_max_bytes(folder)
        ) or 0
        self.warning: str | None = None
        self._code = code
        self._keys: dict[Path, str | None] = {}
        self._checked = False

    @property
    def enabled(self) -> bool:
        """Whether results are read and written (a folder given, and no failure yet)."""
        return self.folder is not None and self.warning is None

    def result(
        self, kind: type[T], paths: Sequence[Path], question: str, compute: Callable[[], T]
    ) -> T:
        """The kept ``kind`` answering ``question`` about ``paths``, else ``compute()``'s,
        which is then kept. An exception from ``compute`` is raised, and nothing kept."""
        found = self.lookup(kind, paths, question)
        if found is None:
            found = compute()
            self.keep(paths, question, found)
        return found

    def lookup(self, kind: type[T], paths: Sequence[Path], question: str) -> T | None:
        """The kept ``kind`` answering ``question`` about ``paths``; None when there is none,
        or it is damaged, another code's, or not a ``kind``."""
        found = self._entry(paths, question)
        if found is None:
            return None
        entry, key = found
        raw = _read_entry(entry)
        body = _checked(raw, key) if raw is not None else None
        if body is None:
            return None
        try:
            value = from_json(kind, body)
        except (SchemaError, TypeError, ValueError):
            return None
        with contextlib.suppress(OSError):
            os.utime(entry, follow_symlinks=False)  # last use, for eviction
        return value

    def keep(self, paths: Sequence[Path], question: str, value: Any) -> None:
        """Keep ``value`` (a dataclass) as the answer to ``question`` about ``paths``; a folder
        that cannot be written turns the cache off, with a warning."""
        found = self._entry(paths, question)
        if found is None or self.folder is None:
            return
        entry, key = found
        payload = json.dumps({"key": key, "result": to_json(value)}).encode("utf-8")
        head = f"{_MAGIC} {hashlib.blake2b(payload).hexdigest()}\n".encode()
        try:
            handle, temp = tempfile.mkstemp(dir=self.folder, prefix=_TEMP, suffix=_SUFFIX)
            try:
                with os.fdopen(handle, "wb") as out:
                    out.write(head + payload)
                os.replace(temp, entry)
            except BaseException:
                Path(temp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            self._fail(
                f"cannot write the cache in {self.folder} ({exc.strerror or exc});"
                " running without it"
            )
            return
        self.evict()

    def evict(self) -> None:
        """Remove least recently used entries until the folder is within ``max_bytes``."""
        entries = self._listing()
        total = sum(size for _, size, _ in entries)
        for _, size, entry in sorted(entries):
            if total <= self.max_bytes:
                break
            try:
                entry.unlink()
                total -= size
            except OSError:
                pass

    def clear(self) -> CacheCleared:
        """Remove every entry (and stray temporary files); say how many entries went."""
        removed = kept = 0
        reason: str | None = None
        for _, _, entry in self._listing(temporaries=True):
            try:
                entry.unlink()
                removed += not entry.name.startswith(_TEMP)
            except FileNotFoundError:
                continue  # another command cleared it first: gone, as asked
            except OSError as exc:
                kept += not entry.name.startswith(_TEMP)
                reason = reason or f"{entry.name}: {exc.strerror or exc}"
        return CacheCleared(self.folder or default_cache_dir(), removed, kept, reason)

    def info(self) -> CacheInfo:
        """Entries and bytes held now."""
        folder = self.folder or default_cache_dir()
        entries = self._listing()
        return CacheInfo(folder, len(entries), sum(s for _, s, _ in entries), self.max_bytes)

    def _usable(self) -> bool:
        """Create the folder (private) if it is missing, then check, once, that nobody but
        this user can write it or a folder above it; warn and turn off if not."""
        if self._checked or self.folder is None:
            return self.enabled
        self._checked = True
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = os.stat(self.folder)
        except OSError as exc:
            self._fail(
                f"cannot write the cache in {self.folder} ({exc.strerror or exc});"
                " running without it"
            )
            return False
        unsafe = unsafe_folders(self.folder.parent) if self.folder.parent != self.folder else []
        reasons = []
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            reasons.append(f"mode {stat.S_IMODE(info.st_mode):o}, writable by others")
        if info.st_uid != os.geteuid():
            reasons.append(f"owned by uid {info.st_uid}")
        if reasons:
            unsafe.insert(0, f"{self.folder} ({'; '.join(reasons)})")
        if unsafe:
            self._fail(
                f"not using the cache: another user could plant answers in {'; '.join(unsafe)};"
                f" {_ADVICE}"
            )
        return self.enabled

    def _file_key(self, path: Path) -> str | None:
        if path not in self._keys:
            try:
                self._keys[path] = file_key(path)
            except OSError:
                self._keys[path] = None  # the load reports an unreadable file in its own words
        return self._keys[path]

    def _entry(self, paths: Sequence[Path], question: str) -> tuple[Path, str] | None:
        """The entry file for ``question`` about ``paths``, and its full key."""
        if not self.enabled or self.folder is None or not self._usable():
            return None
        keys = [self._file_key(path) for path in paths]
        if None in keys:
            return None
        code = self._code if self._code is not None else code_key()
        key = json.dumps([code, keys, question])
        name = hashlib.blake2b(key.encode(), digest_size=20).hexdigest()
        return self.folder / f"{name}{_SUFFIX}", key

    def _listing(self, *, temporaries: bool = False) -> list[tuple[int, int, Path]]:
        """``(last use ns, size, path)`` of each entry file in the folder."""
        found: list[tuple[int, int, Path]] = []
        if self.folder is None:
            return found
        try:
            children = list(self.folder.iterdir())
        except OSError:
            return found
        for child in children:
            if not child.name.endswith(_SUFFIX):
                continue
            if child.name.startswith(_TEMP) and not temporaries:
                continue
            try:
                info = child.lstat()
            except OSError:
                continue
            found.append((info.st_mtime_ns, info.st_size, child))
        return found

    def _fail(self, message: str) -> None:
        """Turn the cache off; ``message`` is the one warning the command prints."""
        if self.warning is None:
            self.warning = message


def _existing(folder: Path) -> Path:
    """``folder``, or the nearest folder above it that exists."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _read_entry(entry: Path) -> bytes | None:
    """An entry's bytes: None unless it is a regular file of this user's (a symlink is not
    followed, a FIFO not waited on) of at most :data:`ENTRY_LIMIT` bytes."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(entry, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError:  # missing, a symlink (ELOOP), unreadable
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            return None
        if info.st_size > ENTRY_LIMIT:
            return None
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read(ENTRY_LIMIT + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def _checked(raw: bytes, key: str) -> Any:
    """The result's JSON in an entry's bytes, if its checksum and full key match; else None."""
    head, _, payload = raw.partition(b"\n")
    parts = head.decode("ascii", "replace").rsplit(" ", 1)
    if len(parts) != 2 or parts[0] != _MAGIC:
        return None
    if hashlib.blake2b(payload).hexdigest() != parts[1]:
        return None
    try:
        body = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("key") != key or "result" not in body:
        return None
    return body["result"]
