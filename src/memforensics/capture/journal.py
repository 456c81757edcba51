"""The per-rank memory journal: one JSON line per ``journal_every`` steps, window end, OOM, close.

A dump explains one rank at one moment; a 2,000-rank job also needs to know whether the others
were close behind and which rank started to drift, and when. Every capturing rank therefore
appends a line of allocator figures to ``<out_dir>/journal/rank{R}_pid{P}.jsonl``: the shape of
structlog's JSON output and of every log shipper, read afterwards by ``memforensics overview``.

Promises, in the order a reader relies on them:

* **Whole lines.** The file is opened ``O_APPEND`` and each line goes out in one ``os.write()``,
  so a line is never interleaved with another. A short write (a full disk) is cut back with
  ``ftruncate`` to where the line began, so the file never ends in half a line; only a process
  killed inside its one ``write()`` can leave a torn last line, which readers skip.
* **Cheap.** Only ``memory_stats()`` and ``mem_get_info()`` (neither synchronizes the device; the
  allocator's peak counters are read, never reset), one ``json.dumps`` and one ``write``: a few
  microseconds (docs/performance.md). The file opens lazily on the first line.
* **Bounded.** A file that would pass ``MAX_FILE_BYTES`` (4 MiB, about 10,000 lines) is renamed to
  ``rank{R}_pid{P}.1.jsonl`` (replacing an older one) and a fresh file started: at most 8 MiB per
  process, the newest lines kept, since the lines before a failure matter most.
* **Owned.** Only the process that opened it writes: a forked child (a DataLoader worker, the
  window writer) inherits the descriptor but never uses it. The training process never reads it.
  The writer holds an ``flock`` on its file; a process that finds the file of its rank and pid
  locked (another container of the host with the same pid) writes ``rank{R}_pid{P}_<token>.jsonl``
  instead, so two processes never share one journal.
"""

from __future__ import annotations

import errno
import os
import secrets
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from memforensics import _layout
from memforensics._units import outside_pytorch_bytes
from memforensics.backends._torch import JOURNAL_STATS
from memforensics.capture.atomic import try_lock as _try_lock
from memforensics.capture.log import guarded, warn_once

MAX_FILE_BYTES = 4 << 20
KEYS: tuple[str, ...] = (
    "time",
    "step",
    "rank",
    "event",
    *JOURNAL_STATS,
    "external_bytes",
    "allocation_bytes",
)
"""Every line has exactly these keys, in this order; unknown values are null.

``allocation_bytes`` is set only on an ``oom`` line the observer wrote; that line's
``device_total_bytes`` and ``device_free_bytes`` are then the observer's figures too, the same
ones the OOM dump's sidecar carries."""

EVENTS = ("step", "window", "oom", "close")
MAX_OOM_LINES = 100
"""``oom`` lines per process at most: a retry loop that fails ten thousand times would otherwise
rotate the history before the failure out of the journal (``ooms`` still counts every one)."""
NO_JOURNAL = 1 << 62
"""A step number no run reaches: ``JournalSchedule.next_step`` when the journal is off."""
_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
_OPEN_FLAGS |= getattr(os, "O_NOFOLLOW", 0)  # a planted symlink is refused, not followed
_FILE_MODE = 0o644


_TEMPLATE = (
    '{"time":%r,"step":%s,"rank":%s,"event":"%s",'
    + ",".join(f'"{key}":%s' for key in KEYS[4:])
    + "}\n"
)
_FREE, _TOTAL, _RESERVED = (
    JOURNAL_STATS.index(key)
    for key in ("device_free_bytes", "device_total_bytes", "reserved_bytes")
)


def format_line(
    event: str,
    step: int | None,
    rank: int,
    stats: Mapping[str, int | None],
    now: float,
    allocation_bytes: int | None = None,
) -> bytes:
    """One journal line, newline included, keys in ``KEYS`` order.

    Formatted from a template rather than by ``json.dumps`` (which costs twice as much): every
    value is an int, null, a finite float or one of ``EVENTS``, so the text is valid JSON.
    """
    if event not in EVENTS:
        raise ValueError(f"unknown journal event {event!r}")
    get = stats.get
    values = [get(key) for key in JOURNAL_STATS]
    free, total, reserved = values[_FREE], values[_TOTAL], values[_RESERVED]
    # external: device memory outside PyTorch's allocator (contexts, NCCL/HCCL, other processes)
    values.append(outside_pytorch_bytes(total, free, reserved))
    values.append(allocation_bytes)
    text = _TEMPLATE % (
        float(now),
        "null" if step is None else int(step),
        int(rank),
        event,
        *["null" if value is None else int(value) for value in values],
    )
    return text.encode()


_forks = 0
"""Forks this process descends through. A journal writes only in the process (fork generation)
that created it, so a forked child (a DataLoader worker, the window writer) never writes its
parent's journal, while a journal created in a child works. Counted by an at-fork hook, so a
line costs no ``getpid()`` system call."""


def _after_fork_in_child() -> None:
    global _forks  # noqa: PLW0603 - one counter per process is the point
    _forks += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Journal:
    """Appends this process's journal lines; every failure surfaces to the caller to log."""

    def __init__(
        self,
        out_dir: Path,
        rank: int,
        stats: Callable[[], dict[str, int | None]],
        *,
        max_bytes: int = MAX_FILE_BYTES,
    ) -> None:
        self.rank = rank
        self.pid = os.getpid()
        self._generation = _forks
        self.folder = _layout.journal_folder(out_dir)
        self.path = self.folder / _layout.journal_name(rank, self.pid)
        self.max_bytes = max_bytes
        self._stats = stats
        self._fd = -1
        self._size = 0
        self.token = ""
        """Set when another live process held this rank and pid's journal (see ``_open``)."""
        self.lines = 0
        self.oom_lines = 0

    def write(
        self, event: str, step: int | None, observed: Mapping[str, int] | None = None
    ) -> bool:
        """Append one line of current figures; False in a forked child, once closed, or past
        ``MAX_OOM_LINES`` OOM lines. ``observed``: the OOM observer's figures (``allocation_bytes``,
        ``device_total_bytes``, ``device_free_bytes``), which replace the ones read now."""
        if self._generation != _forks or self._fd == -2:
            return False
        if event == "oom":
            self.oom_lines += 1
            if self.oom_lines > MAX_OOM_LINES:
                return False
        stats = self._stats()
        allocation_bytes = None
        if observed is not None:
            stats = {**stats, **observed}
            allocation_bytes = observed.get("allocation_bytes")
        data = format_line(event, step, self.rank, stats, time.time(), allocation_bytes)
        if self._fd < 0:
            self._open()
        elif self._size + len(data) > self.max_bytes:
            self._rotate()
        written = os.write(self._fd, data)
        if written < len(data):  # disk full mid-line: take the part back, never leave it torn
            os.ftruncate(self._fd, self._size)
            raise OSError(errno.ENOSPC, f"journal line cut short ({written} of {len(data)} bytes)")
        self._size += len(data)
        self.lines += 1
        return True

    def identity(self) -> str:
        """The token this process's names carry ("" unless another live process holds the
        journal of this rank and pid): opens the journal now if no line did yet, so the first
        dump is already named apart. Never raises: a journal that cannot open says ""."""
        if self._fd == -1 and self._generation == _forks:
            try:
                self._open()
            except OSError:
                return self.token
        return self.token

    def _open(self) -> None:
        self.folder.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd = os.open(self.path, _OPEN_FLAGS, _FILE_MODE)
        if not _try_lock(fd) and not self.token:  # a live process with our rank and pid
            os.close(fd)
            self.token = secrets.token_hex(3)
            self.path = self.folder / _layout.journal_name(self.rank, self.pid, 0, self.token)
            fd = os.open(self.path, _OPEN_FLAGS, _FILE_MODE)
            _try_lock(fd)
        self._fd = fd
        self._size = os.fstat(self._fd).st_size  # a reused pid appends to its old file

    def _rotate(self) -> None:
        os.close(self._fd)
        self._fd = -1
        rotated = _layout.journal_name(self.rank, self.pid, 1, self.token)
        os.replace(self.path, self.folder / rotated)
        self._open()

    def close(self) -> None:
        """Close the file; later writes do nothing. Only the owning process closes it."""
        fd, self._fd = self._fd, -2
        if fd >= 0 and self._generation == _forks:
            os.close(fd)


class JournalSchedule:
    """When this rank appends a journal line, and the appending, which never raises.

    A ``step`` line every ``journal_every`` steps, on step numbers aligned to multiples of it so
    every rank writes the same steps, plus a line at each window end, OOM and close. The step
    loop reads ``next_step`` and compares: one comparison per step decides.
    """

    def __init__(
        self,
        journal: Journal | None,
        every: int | None,
        *,
        device: str,
        rank: int,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        """``ready``: asked before each line whether ``out_dir`` takes files now (it may try
        the disk again); a line it refuses is not written."""
        self._journal = journal
        self._ready = ready
        self._every = every
        self._device = device
        self._rank = rank
        self.next_step = NO_JOURNAL if journal is None else 0
        """The next step number that writes a ``step`` line (``NO_JOURNAL``: none will)."""

    def line(
        self,
        event: str,
        step: int | None,
        *,
        periodic: bool = True,
        observed: Mapping[str, int] | None = None,
    ) -> None:
        """Append an ``event`` line for ``step``, never raising; a periodic one sets the next.
        ``observed``: the OOM observer's figures, written in place of the current ones."""
        journal = self._journal
        if journal is None:
            return
        ready = self._ready
        try:
            if ready is None or ready():
                journal.write(event, step, observed)
        except Exception as exc:  # noqa: BLE001 - a full disk must not stop training
            warn_once(f"journal_failed:{type(exc).__name__}", "journal_failed", error=repr(exc))
        every = self._every
        if periodic and every is not None and step is not None:
            self.next_step = (step // every + 1) * every  # aligned: ranks share columns

    def close(self, last_step: int | None) -> None:
        """Append the ``close`` line (``last_step``: the last step run) and close the file."""
        journal = self._journal
        if journal is None:
            return
        self.line("close", last_step, periodic=False)
        self.next_step = NO_JOURNAL
        guarded("journal_failed", journal.close, device=self._device, rank=self._rank)
