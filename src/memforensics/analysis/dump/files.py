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
from typing import BinaryIO


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
