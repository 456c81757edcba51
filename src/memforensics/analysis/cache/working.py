"""Who is working out an answer about a dump right now: one lock file per dump and question in
the cache folder.

A command that has read a dump may leave the answers other commands would give about it to a
background process (the CLI's look-ahead). That process holds an exclusive ``flock`` on
``working/<file key>-<question hash>.lock`` for each answer it will keep, and lets go of each
(removing its file) as soon as that answer is kept; a command that misses the cache on one of
those answers waits for its lock before reading the dump itself, and is then served what the
look-ahead stored instead of doing the same work a second time; a command asking anything else
never waits. The kernel releases a ``flock`` when its holder exits, however it exits, so a
look-ahead that crashed or was killed never leaves a command waiting, and the lock files it
left behind hold nothing (``cache clear`` removes them). Where ``flock`` is missing (not
POSIX), nobody works ahead.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

if sys.platform != "win32":
    import fcntl

FOLDER = "working"
_SUFFIX = ".lock"


def can_claim() -> bool:
    """Whether this platform has the locks a look-ahead needs."""
    return sys.platform != "win32"


def lock_path(folder: Path, key: str, question: str) -> Path:
    """The lock file of ``question`` about the dump whose cache key is ``key``."""
    named = hashlib.blake2b(question.encode(), digest_size=8).hexdigest()
    return folder / FOLDER / f"{key}-{named}{_SUFFIX}"


@dataclass
class Claim:
    """The locks a process holds, by (file key, question): their descriptors."""

    folder: Path
    handles: dict[tuple[str, str], int] = field(default_factory=dict)

    def holds(self, key: str, question: str) -> bool:
        """Whether this claim covers ``question`` about the dump keyed ``key``."""
        return (key, question) in self.handles

    def close(self) -> None:
        """Close every descriptor here (a forked child holding its own keeps the locks)."""
        for handle in self.handles.values():
            with contextlib.suppress(OSError):
                os.close(handle)
        self.handles.clear()

    def finish(self, keys: Iterable[str], questions: Iterable[str]) -> None:
        """Let go of these answers for good (they are kept, or will not be): each lock file is
        removed, then released, so a command waiting on it wakes and one arriving later finds
        none."""
        asked = list(questions)
        for key in keys:
            for question in asked:
                handle = self.handles.pop((key, question), None)
                if handle is None:
                    continue
                with contextlib.suppress(OSError):
                    lock_path(self.folder, key, question).unlink()
                with contextlib.suppress(OSError):
                    os.close(handle)

    def finish_all(self) -> None:
        """:meth:`finish` every answer still held."""
        for key, question in list(self.handles):
            self.finish([key], [question])


def claim(folder: Path, keys: Iterable[str], questions: Iterable[str]) -> Claim | None:
    """Exclusive locks on every (key, question); None when any is held by another process or
    cannot be made (nothing is then kept)."""
    if sys.platform == "win32":
        return None
    held = Claim(folder)
    asked = list(questions)
    try:
        (folder / FOLDER).mkdir(parents=True, exist_ok=True)
        for key in keys:
            for question in asked:
                path = lock_path(folder, key, question)
                handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(handle)
                    raise
                held.handles[(key, question)] = handle
    except OSError:
        held.close()
        return None
    return held


def await_answer(
    folder: Path, keys: Iterable[str], question: str, on_wait: Callable[[], None]
) -> None:
    """Return once no other process holds the lock of ``question`` about any of ``keys``;
    ``on_wait()`` is called before the first wait (so a command can say what it waits for).
    A missing lock file is no lock."""
    if sys.platform == "win32":
        return
    told = False
    for key in keys:
        try:
            handle = os.open(lock_path(folder, key, question), os.O_RDONLY)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                if not told:
                    on_wait()
                    told = True
                fcntl.flock(handle, fcntl.LOCK_SH)
        except OSError:
            pass
        finally:
            os.close(handle)


def await_all(folder: Path) -> None:
    """Return once no process holds any claim in ``folder`` (a holder removes each lock file
    before releasing it, so a lock acquired here is one no longer wanted)."""
    if sys.platform == "win32":
        return
    for lock in sorted((folder / FOLDER).glob(f"*{_SUFFIX}")):
        try:
            handle = os.open(lock, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(handle, fcntl.LOCK_SH)
        except OSError:
            pass
        finally:
            os.close(handle)
