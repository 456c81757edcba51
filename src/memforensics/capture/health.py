"""When capture stands down without stopping training: a disk that takes no files, a worker.

Two conditions a real cluster meets at ``install()`` are not the user's mistake and must not
kill the job:

* **The disk.** ``out_dir`` on a full file system (``ENOSPC``), over quota (``EDQUOT``) or
  mounted read-only (``EROFS``): a restarted job lands on the scratch disk the old one filled.
  :class:`OutDir` warns once and writes nothing until the disk takes files again. It tries
  again each time capture has something to write (a dump, a journal line), never on a timer,
  so a blocked disk costs one failed probe per write and nothing between them. A path the user
  may not write (``EACCES``) or that cannot be a folder (``ENOTDIR``) is still a config error.
* **The process.** A DataLoader worker or a ``ProcessPoolExecutor`` child re-imports the training
  script, and with it a module-level ``install()``. Such a child is no rank: it would write a
  journal of one ``close`` line that reads as a restart. :func:`worker_of_installer` tells it
  from a rank by a marker ``install()`` leaves in the environment (the installing pid) together
  with ``multiprocessing.parent_process()``, never by ``RANK``, which workers inherit.

:class:`CaptureStatus` is what ``mf.status`` says about both.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from memforensics import _layout
from memforensics.capture import atomic
from memforensics.capture.config import distributed_initialized
from memforensics.capture.log import safe_log, warn_once

DISK_CONDITIONS = frozenset(
    code for code in (errno.ENOSPC, getattr(errno, "EDQUOT", None), errno.EROFS) if code
)
"""Errors of the disk, not of the path: capture pauses on them instead of failing install."""

INSTALLER_ENV = "MEMFORENSICS_INSTALLER_PID"
"""Set by ``install()`` to the installing process's pid, for the processes it starts."""


def is_disk_condition(exc: OSError) -> bool:
    """True when ``exc`` says the disk takes no files (full, over quota, read-only)."""
    return exc.errno in DISK_CONDITIONS


def describe(exc: OSError) -> str:
    """``"No space left on device (ENOSPC)"``: the reason and the code people search for."""
    code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return f"{exc.strerror or exc} ({code})"


class OutDir:
    """``out_dir`` and whether it takes files now; only ``prepare()`` ever raises.

    ``blocked`` is the disk condition seen at the last attempt (None: writable). Reading it
    touches nothing; :meth:`ready` is what tries the disk again.
    """

    def __init__(self, path: Path, rank: int) -> None:
        self.path = path
        self.rank = rank
        self.blocked: str | None = None

    def prepare(self) -> None:
        """Create ``out_dir`` and prove it writable; on a disk condition warn once and pause.

        Raises ``OSError`` for anything else (``EACCES``, ``ENOTDIR``): the caller makes it a
        config error. Then warns about folders others could write and removes this rank's
        stale temporary files.
        """
        try:
            atomic.check_writable(self.path)
        except OSError as exc:
            if not is_disk_condition(exc):
                raise
            self._pause(exc)
            return
        self._settle()

    def ready(self) -> bool:
        """True when capture may write now: at once when the disk took files last time, else
        after one more probe (the next write is the only moment anything is tried)."""
        if self.blocked is None:
            return True
        try:
            atomic.check_writable(self.path)
        except OSError as exc:
            self.blocked = describe(exc)
            safe_log(
                "debug", "out_dir_still_unwritable", out_dir=str(self.path), error=self.blocked
            )
            return False
        safe_log("info", "out_dir_writable_again", out_dir=str(self.path), rank=self.rank)
        self.blocked = None
        self._settle()
        return True

    def _pause(self, exc: OSError) -> None:
        self.blocked = describe(exc)
        warn_once(
            f"out_dir_unwritable:{self.path}",
            "out_dir_unwritable",
            out_dir=str(self.path),
            error=self.blocked,
            rank=self.rank,
            reason="the disk takes no files: capture writes nothing until it does, and tries"
            " again at each dump or journal line; training goes on",
        )

    def _settle(self) -> None:
        unsafe = _layout.unsafe_folders(self.path)
        if unsafe:
            warn_once(
                "out_dir_unsafe",
                "out_dir_unsafe",
                folders="; ".join(unsafe),
                advice="another user could replace a dump here: use a private out_dir (mode"
                " 0700, or umask 077) under a folder only you and root can write (docs/guide.md)",
            )
        removed = atomic.clean_stale_temp_files(self.path, self.rank)
        if removed:
            safe_log("info", "stale_temp_files_removed", count=len(removed), out_dir=str(self.path))


def worker_of_installer(*, explicit_rank: bool, inherited: object = None) -> str | None:
    """Why this process must not capture, or None when it may.

    A process ``install()`` leaves inert is a child of a process that installed memforensics:
    its ``multiprocessing`` parent's pid is the one in ``INSTALLER_ENV`` (spawn, forkserver,
    fork, after the child started); or it is re-importing the training script as
    ``__mp_main__`` (a spawn or forkserver child before it knows its parent, or the forkserver
    itself) under another process's marker; or it holds a facade a plain ``os.fork()`` copied
    from its parent (``inherited``: that facade's pid, when it is not ours). It still captures
    when it names its rank (``explicit_rank``) or when ``torch.distributed`` is initialised:
    then it is a rank ``mp.spawn`` started, not a worker.
    """
    if explicit_rank or distributed_initialized():
        return None
    marker = os.environ.get(INSTALLER_ENV, "")
    if marker and marker != str(os.getpid()):
        parent = multiprocessing.parent_process()
        if (parent is not None and marker == str(parent.pid)) or _reimporting_main():
            return f"a worker process of pid {marker}, which installed memforensics"
    if isinstance(inherited, int) and inherited != os.getpid():
        return f"a forked child of pid {inherited}, which installed memforensics"
    return None


def _reimporting_main() -> bool:
    """True while ``multiprocessing`` runs the training script as ``__mp_main__`` (a spawn or
    forkserver child, or the forkserver, importing it): ``__mp_main__`` is then a module of its
    own, where otherwise ``multiprocessing`` makes it another name for ``__main__``."""
    reimported = sys.modules.get("__mp_main__")
    return reimported is not None and reimported is not sys.modules.get("__main__")


def mark_installer() -> None:
    """Leave this process's pid for the processes it starts from now on."""
    os.environ[INSTALLER_ENV] = str(os.getpid())


def unmark_installer() -> None:
    """Take this process's marker back (``uninstall()``): its later children may capture."""
    if os.environ.get(INSTALLER_ENV) == str(os.getpid()):
        del os.environ[INSTALLER_ENV]


@dataclass(frozen=True, slots=True)
class CaptureStatus:
    """What ``mf.status`` says: whether this process captures, and whether its disk takes files.

    ``inert`` says why a process captures nothing (``None`` while it captures):
    ``"closed"``, ``"rank not selected"``, ``"device unavailable"`` or the worker it is.
    ``out_dir_error`` is the disk condition seen at the last write attempt (``None``: the
    disk took files); capture writes nothing while it is set and tries again at the next write.
    """

    capturing: bool
    inert: str | None
    out_dir: Path
    out_dir_error: str | None

    @property
    def writing(self) -> bool:
        """True when files would land now, as far as the last attempt knows."""
        return self.capturing and self.out_dir_error is None
