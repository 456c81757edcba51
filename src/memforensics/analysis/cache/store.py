"""The analysis cache: answers computed from a dump, kept as checked plain text.

One entry is one answer (a command's output for given arguments) about one file, named by a
hash of the file's identity (:func:`file_key`) and the question. Entries are plain JSON behind
a checksum line; nothing read back is ever unpickled, and an entry whose checksum, file key or
question does not match is ignored and replaced. Writes go to a temporary file in the cache
folder, renamed into place, so a reader sees a whole entry or none; never into a dump's folder.

The folder is bounded: after each write, entries are evicted least recently used first (an
entry's modification time is set each time it is served) until the total is under
``max_bytes`` (``MEMFORENSICS_CACHE_MAX_BYTES``, else the smaller of 2 GiB and a tenth of the
free space where the cache lives). A folder that cannot be read or written is never an error:
the cache turns itself off and keeps one warning for the caller to print.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from memforensics.analysis.cache import working
from memforensics.analysis.cache.identity import FORMAT, file_key
from memforensics.analysis.dump import read_regular

MAX_BYTES_ENV = "MEMFORENSICS_CACHE_MAX_BYTES"
_DEFAULT_CAP = 2 * 1024**3
_SUFFIX = ".entry"
ENTRY_LIMIT = 256 << 20
"""Bytes read of one entry at most: an answer is tens of KiB, a report page a few MiB."""
_MAGIC = f"memforensics-cache {FORMAT}"


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/memforensics``, else ``~/.cache/memforensics``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memforensics"


def default_max_bytes(folder: Path) -> int:
    """The size cap: the environment's, else min(2 GiB, 10% of the free space at ``folder``)."""
    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    if text.isdigit():
        return int(text)
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return _DEFAULT_CAP
    return min(_DEFAULT_CAP, free // 10)


@dataclass(frozen=True)
class CacheInfo:
    """Where the cache is, how many entries it holds and their total size."""

    folder: Path
    entries: int
    bytes: int
    max_bytes: int

    def to_dict(self) -> dict[str, object]:
        """The figures for ``--json``."""
        return {
            "folder": str(self.folder),
            "entries": self.entries,
            "bytes": self.bytes,
            "max_bytes": self.max_bytes,
        }


class AnswerCache:
    """Checked answers about dump files, in ``folder``; ``folder=None`` caches nothing."""

    def __init__(self, folder: Path | None, *, max_bytes: int | None = None) -> None:
        self.folder = folder
        self.max_bytes = (
            max_bytes if max_bytes is not None or folder is None else default_max_bytes(folder)
        ) or 0
        self.warning: str | None = None
        self._keys: dict[Path, str] = {}
        self._claim: working.Claim | None = None

    @property
    def enabled(self) -> bool:
        """Whether answers are read and written (a folder given, and no failure yet)."""
        return self.folder is not None and self.warning is None

    def lookup(self, paths: Sequence[Path], question: str) -> str | None:
        """The stored answer to ``question`` about ``paths`` (one dump, or the dumps compared),
        or None when there is none, or it is stale or damaged."""
        found = self._entry(paths, question)
        if found is None:
            return None
        entry, key = found
        try:
            raw = read_regular(entry, ENTRY_LIMIT)
        except OSError:
            return None
        answer = _checked(raw, key, question)
        if answer is not None:
            with contextlib.suppress(OSError):
                os.utime(entry)  # last use, for eviction
        return answer

    def lookup_settled(
        self, paths: Sequence[Path], question: str, on_wait: Callable[[], None] = lambda: None
    ) -> str | None:
        """:meth:`lookup`, and on a miss, once a look-ahead in another process that will answer
        ``question`` about ``paths`` has kept its answer (``on_wait()`` is called if one is at
        work), :meth:`lookup` again."""
        found = self.lookup(paths, question)
        if found is not None or self.folder is None:
            return found
        keys = self._file_keys(paths)
        waited = [
            key for key in keys if self._claim is None or not self._claim.holds(key, question)
        ]
        if not waited:
            return None
        working.await_answer(self.folder, waited, question, on_wait)
        return self.lookup(paths, question)

    def claim(self, paths: Sequence[Path], questions: Sequence[str]) -> working.Claim | None:
        """Mark ``questions`` about ``paths`` as being answered by this process (and any child
        it forks, which inherits the claim's lock descriptors) until :meth:`finish` lets go of
        each; None when another process is at it already or the cache cannot hold locks. A
        command asking one of ``questions`` waits for that answer's lock."""
        if not self.enabled or self.folder is None or not working.can_claim():
            return None
        keys = self._file_keys(paths)
        if len(keys) != len(paths):
            return None
        self._claim = working.claim(self.folder, keys, questions)
        return self._claim

    def finish(self, paths: Sequence[Path], questions: Sequence[str]) -> None:
        """Let go of this process's claim on ``questions`` about ``paths``: their answers are
        kept (or will not be); a command waiting for one wakes and reads it."""
        if self._claim is not None:
            self._claim.finish(self._file_keys(paths), questions)

    def settle(self) -> None:
        """Return once no look-ahead is working on any dump in this cache (all its answers are
        kept, or it has gone)."""
        if self.folder is not None:
            working.await_all(self.folder)

    def store(self, paths: Sequence[Path], question: str, answer: str) -> None:
        """Keep ``answer``; a folder that cannot be written turns the cache off, with a warning."""
        found = self._entry(paths, question)
        if found is None or self.folder is None:
            return
        entry, key = found
        body = json.dumps({"file": key, "question": question, "answer": answer})
        payload = body.encode("utf-8")
        head = f"{_MAGIC} {hashlib.blake2b(payload).hexdigest()}\n".encode()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle, temp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=_SUFFIX)
            try:
                with os.fdopen(handle, "wb") as out:
                    out.write(head + payload)
                os.replace(temp, entry)
            except BaseException:
                Path(temp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            self._fail(f"cannot write the cache in {self.folder} ({exc.strerror or exc})")
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

    def clear(self) -> int:
        """Remove every entry (and stray temporary files); return how many entries went."""
        entries = self._listing(temporaries=True)
        removed = 0
        for _, _, entry in entries:
            try:
                entry.unlink()
                removed += not entry.name.startswith(".tmp-")
            except OSError:
                pass
        if self.folder is not None:  # a lock's holder keeps its descriptor: removing is safe
            with contextlib.suppress(OSError):
                shutil.rmtree(self.folder / working.FOLDER)
        return removed

    def info(self) -> CacheInfo:
        """Entries and bytes held now."""
        folder = self.folder or default_cache_dir()
        entries = self._listing()
        return CacheInfo(folder, len(entries), sum(s for _, s, _ in entries), self.max_bytes)

    def _file_keys(self, paths: Sequence[Path]) -> list[str]:
        """Each readable path's :func:`file_key`, computed once per path (unreadable: left out,
        the load reports an unreadable dump in its own words)."""
        keys = []
        for path in paths:
            key = self._keys.get(path)
            if key is None:
                try:
                    key = self._keys[path] = file_key(path)
                except OSError:
                    continue
            keys.append(key)
        return keys

    def _entry(self, paths: Sequence[Path], question: str) -> tuple[Path, str] | None:
        """The entry file for ``question`` about ``paths``, and the files' joint key."""
        if not self.enabled or self.folder is None:
            return None
        keys = self._file_keys(paths)
        if len(keys) != len(paths):
            return None
        joint = ",".join(keys)
        name = hashlib.blake2b(f"{joint}\n{question}".encode(), digest_size=20).hexdigest()
        return self.folder / f"{name}{_SUFFIX}", joint

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
            if child.name.startswith(".tmp-") and not temporaries:
                continue
            try:
                info = child.lstat()
            except OSError:
                continue
            found.append((info.st_mtime_ns, info.st_size, child))
        return found

    def _fail(self, message: str) -> None:
        if self.warning is None:
            self.warning = f"{message}; running without it"


def _checked(raw: bytes, key: str, question: str) -> str | None:
    """The answer in an entry's bytes, if its checksum, file key and question all match."""
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
    if not isinstance(body, dict) or body.get("file") != key or body.get("question") != question:
        return None
    answer = body.get("answer")
    return answer if isinstance(answer, str) else None
