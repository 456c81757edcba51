"""Which file a cache entry is about: its identity on disk and a hash of its ends.

A cached answer may be served only for the very file it was computed from. The key covers what
changes whenever a dump is rewritten (size, modification time in nanoseconds, inode), a blake2b
of its first and last 64 KiB (so a rewrite that restores size and mtime, or lands on a reused
inode, still differs where a pickle's header and its trailing segments and trace end are), and
the memforensics version with the cache format, so a new release never reads an old answer.
The dump's sidecar (kind, steps, the OOM's sizes) is part of its identity: its whole content is
hashed, or its absence noted, so a sidecar written or changed after the dump is a new key.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from memforensics._layout import sidecar_path
from memforensics._version import __version__
from memforensics.analysis.dump import SIDECAR_LIMIT, open_regular, read_regular

FORMAT = 2  # 2: a summary entry holds both renderings of its result
"""The layout of cache entries; raised whenever an entry's contents change meaning."""
_ENDS = 64 * 1024


def file_key(path: Path) -> str:
    """The identity of the dump ``path`` and its sidecar, as a hex digest (OSError if the dump
    cannot be read or is not a regular file)."""
    digest = hashlib.blake2b(digest_size=20)
    try:
        digest.update(b"sidecar:" + read_regular(sidecar_path(path), SIDECAR_LIMIT))
    except OSError:
        digest.update(b"no sidecar")  # read_sidecar says what it makes of an unreadable one
    with open_regular(path) as handle:  # a FIFO or a device is refused, never waited on
        info = os.fstat(handle.fileno())
        digest.update(
            f"{__version__}|{FORMAT}|{info.st_size}|{info.st_mtime_ns}|{info.st_ino}|".encode()
        )
        digest.update(handle.read(_ENDS))
        if info.st_size > _ENDS:
            handle.seek(max(info.st_size - _ENDS, _ENDS))
            digest.update(handle.read(_ENDS))
    return digest.hexdigest()
