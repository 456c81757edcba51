"""Who is working out answers about a dump right now: one lock file per dump in the cache folder.

A command that has read a dump may leave the answers other commands would give about it to a
background process (the CLI's look-ahead). That process holds an exclusive ``flock`` on
``working/<file key>.lock``, which names the answers it will keep, while it works; a command
that misses the cache on one of those answers waits for the lock before reading the dump
itself, and is then served what the look-ahead stored instead of doing the same work a second
time. The look-ahead removes its lock file when done. The kernel releases a ``flock`` when its
holder exits, however it exits, so a look-ahead that crashed or was killed never leaves a
command waiting, and the lock file it left behind holds nothing (``cache clear`` removes it).
Where ``flock`` is missing (not POSIX), nobody works ahead.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

if sys.platform != "win32":
    import fcntl

FOLDER = "working"
_SUFFIX = ".lock"


def can_claim() -> bool:
    """Whether this platform has the locks a look-ahead needs."""
    return sys.platform != "win32"


def lock_path(folder: Path, key: str) -> Path:
    """The lock file of the dump whose cache key is ``key``."""
    return folder / FOLDER / f"{key}{_SUFFIX}"


def claim(folder: Path, keys: Iterable[str], questions: Iterable[str]) -> list[int] | None:
    """Exclusive locks on every key's file (their descriptors), each file naming the
    ``questions`` its holder will answer, one per line; None when any lock is held by another
    process or cannot be made (nothing is then kept)."""
    if sys.platform == "win32":
        return None
    named = "".join(f"{question}\n" for question in questions).encode()
    held: list[int] = []
    try:
        (folder / FOLDER).mkdir(parents=True, exist_ok=True)
        for key in keys:
            handle = os.open(lock_path(folder, key), os.O_RDWR | os.O_CREAT, 0o644)
            held.append(handle)
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.ftruncate(handle, 0)
            os.write(handle, named)
    except OSError:
        release(held)
        return None
    return held


def release(handles: Iterable[int]) -> None:
    """Close lock descriptors (a lock goes when the last descriptor sharing it is closed)."""
    for handle in handles:
        with contextlib.suppress(OSError):
            os.close(handle)


def await_answer(
    folder: Path, keys: Iterable[str], question: str, on_wait: Callable[[], None]
) -> None:
    """Return once no other process holds the lock of a key whose holder will answer
    ``question``; ``on_wait()`` is called before the first wait (so a command can say what it
    waits for). A missing lock file is no lock; a holder answering other questions is not
    waited for."""
    if sys.platform == "win32":
        return
    told = False
    for key in keys:
        try:
            handle = os.open(lock_path(folder, key), os.O_RDONLY)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                if question not in _named(handle):
                    continue
                if not told:
                    on_wait()
                    told = True
                fcntl.flock(handle, fcntl.LOCK_SH)
        except OSError:
            pass
        finally:
            os.close(handle)


def _named(handle: int) -> list[str]:
    """The questions a lock's holder said it will answer."""
    chunks = []
    while chunk := os.read(handle, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace").splitlines()
