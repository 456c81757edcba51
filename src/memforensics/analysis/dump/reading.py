"""A file object that reports how many bytes were read from it, for progress while loading.

The unpickler reads its input through ``read``/``readinto``/``readline`` (64 KiB frames at a
time for protocol 4), so counting there costs nothing measurable and needs no second pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

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
