"""Opening a file someone else may have planted: regular files only, read with a size cap.

A run folder is written by other jobs and users. A FIFO named like a sidecar would block a
plain ``open`` forever (no writer ever comes), and a sidecar symlinked to ``/dev/zero`` would
be read until memory runs out. So every reader opens with ``O_NONBLOCK`` (a FIFO opens at
once), checks with ``fstat`` that what it got is a regular file (a symlink to a regular file
is fine: the target is what is read), and reads small files up to a cap.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import IO, BinaryIO

# A file object that reports how many bytes were read from it, for progress while loading.
#
# The unpickler reads its input through ``read``/``readinto``/``readline`` (64 KiB frames at a
# time for protocol 4), so counting there costs nothing measurable and needs no second pass.

BytesRead = Callable[[int], None]
"""Called with the running total of bytes read so far."""


class CountingReader:
    """Wraps a binary file; calls ``on_read(total)`` after each read, ``total`` being the
    position reached (so bytes read again after a rewind are not counted twice)."""

    def __init__(self, raw: IO[bytes], on_read: BytesRead) -> None:
        self._raw = raw
        self._on_read = on_read
        self.total = 0

    def read(self, size: int = -1) -> bytes:
        """Read up to ``size`` bytes (all with -1)."""
        return self._count(self._raw.read(size))

    def readline(self, size: int = -1) -> bytes:
        """Read one line."""
        return self._count(self._raw.readline(size))

    def readinto(self, buffer: bytearray | memoryview) -> int:
        """Fill ``buffer``; return the number of bytes read."""
        data = self._raw.read(len(buffer))
        buffer[: len(data)] = data
        self._count(data)
        return len(data)

    def peek(self, size: int = 0) -> bytes:
        """Bytes ahead without consuming them (what gzip and the unpickler may ask)."""
        peek = getattr(self._raw, "peek", None)
        return peek(size) if peek is not None else b""

    def seek(self, offset: int, whence: int = 0) -> int:
        """Move the position (the loader rewinds after sniffing for gzip): the count follows."""
        self.total = self._raw.seek(offset, whence)
        return self.total

    def tell(self) -> int:
        """The position in the file."""
        return self._raw.tell()

    def _count(self, data: bytes) -> bytes:
        self.total += len(data)
        self._on_read(self.total)
        return data


class NotRegularFileError(OSError):
    """The path is a FIFO, a device, a socket: nothing a reader of dumps should open."""


class FileTooLargeError(OSError):
    """The file is larger than what its kind can hold (a sidecar, a journal)."""


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for binary reading if it is (or links to) a regular file; else
    ``IsADirectoryError``, ``NotRegularFileError`` or the ``OSError`` of the open."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a folder", str(path))
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(errno.EINVAL, "not a regular file", str(path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The whole of regular file ``path``; ``FileTooLargeError`` past ``limit`` bytes (never
    more than ``limit + 1`` bytes are read)."""
    with open_regular(path) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise FileTooLargeError(errno.EFBIG, f"larger than {limit:,} bytes", str(path))
    return data
