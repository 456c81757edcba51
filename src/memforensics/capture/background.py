"""Window dumps written by a forked child, so serializing never stalls the training thread.

Pickling a snapshot is CPU-bound Python work that holds the GIL from start to end: in a writer
*thread* it still takes that time away from the training loop (see docs/performance.md for
the measurements). A forked child has its own interpreter and GIL and a copy-on-write view of
the snapshot, so the training thread pays only for ``fork()`` itself. The child never touches
the device, the logger or any lock another thread might hold: it pickles, writes atomically
(temporary name, fsync, rename; sidecar last), reports one JSON line through a pipe and leaves
with ``os._exit``, so it runs no atexit handler and flushes no inherited buffer.

``fork()`` costs time in proportion to the parent's resident memory (page tables are copied),
so ``WriteCosts`` forks only when the write it saves is clearly larger, learning both costs
from what it observes. Below ``MIN_FORK_WEIGHT`` it never forks, whatever it learned: a small
window's write time is mostly fixed costs (an fsync on a busy disk can take half a second for
611 bytes), which say nothing about the per-entry cost: learned from, they would make every
later tiny window fork. A window under the floor is therefore always on disk when ``step()``
returns.

The parent drops its reference to the snapshot right after the fork, as an inline write would:
keeping it until the child exits would spare copy-on-write faults but keep it alive across the
next window's allocations, which fragments the heap and holds 5-7 MiB of RSS for good (measured
by bench_memory.py; freeing at once holds none and keeps the training-thread cost within
target, see docs/performance.md). A small reaper thread, blocked in ``waitpid``
without the GIL, notices the child's exit; the outcome (retention, logging, ``dumps``) is
applied on the training thread by the next ``poll``/``flush``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from memforensics.capture import atomic

FORK_SECONDS_PER_GIB = 0.015
"""Initial guess of fork() cost per GiB of resident memory, until one is measured (Linux on a
VM copies page tables at roughly 10-15 ms per GiB; bare metal is faster)."""
WRITE_SECONDS_PER_ENTRY = 0.5e-6
"""Initial guess of pickle + write time per trace entry or block, until one is measured."""
MIN_FORK_WEIGHT = 5_000
"""Snapshots with fewer trace entries plus blocks are always written inline, and their write
times are not learned from. Measured: a real CUDA snapshot with Python stacks on every event
(cuda-transformer-forward, 8,227 events) pickles at about 3.6 µs per entry, sim snapshots at
about 0.5 µs, so 5,000 entries cost the training thread at most ~18 ms inline: under
``MIN_BACKGROUND_SECONDS``, where a fork could never pay off anyway."""
MIN_BACKGROUND_SECONDS = 0.02
"""Writes predicted shorter than this stay synchronous: the training loop barely notices them."""
FORK_MARGIN = 2.0
"""Fork only when the write it saves is this many times the predicted fork cost."""

_GIB = float(1 << 30)
_REPORT_LIMIT = 4000


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What became of one dump: landed with ``size`` bytes, or failed with ``error``."""

    ok: bool
    size: int = 0
    seconds: float = 0.0
    error: str = ""


class WriteCosts:
    """Predicts, from what was observed so far, whether forking a writer beats writing inline."""

    def __init__(self) -> None:
        self.fork_seconds_per_byte = FORK_SECONDS_PER_GIB / _GIB
        self.write_seconds_per_entry = WRITE_SECONDS_PER_ENTRY

    def prefer_fork(self, weight: int, rss_bytes: int) -> bool:
        """True when writing ``weight`` entries inline would clearly cost more than a fork
        (never below ``MIN_FORK_WEIGHT``)."""
        if weight < MIN_FORK_WEIGHT:
            return False
        write = weight * self.write_seconds_per_entry
        fork = rss_bytes * self.fork_seconds_per_byte
        return write >= MIN_BACKGROUND_SECONDS and write > FORK_MARGIN * fork

    def observed_fork(self, seconds: float, rss_bytes: int) -> None:
        """Learn the fork cost per resident byte from one measured fork."""
        if rss_bytes > 0 and seconds > 0:
            self.fork_seconds_per_byte = seconds / rss_bytes

    def observed_write(self, seconds: float, weight: int) -> None:
        """Learn the write cost per entry from one measured write (inline or in a child).

        Writes below ``MIN_FORK_WEIGHT`` are ignored: their time is fixed costs (open, fsync,
        rename), not per entry, and one slow fsync would make every later window look huge.
        """
        if weight >= MIN_FORK_WEIGHT and seconds > 0:
            self.write_seconds_per_entry = seconds / weight


def snapshot_weight(snapshot: Any) -> int:
    """Trace entries plus blocks: what pickling time grows with (0 for an unexpected shape)."""
    try:
        traces = sum(len(trace) for trace in snapshot.get("device_traces") or ())
        blocks = sum(len(seg.get("blocks") or ()) for seg in snapshot.get("segments") or ())
    except (AttributeError, TypeError):
        return 0
    return int(traces + blocks)


def resident_bytes() -> int:
    """This process's resident memory (0 where ``/proc`` is not there)."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def fork_supported() -> bool:
    """Linux with ``os.fork``: elsewhere (macOS frameworks, Windows) writes stay inline."""
    return hasattr(os, "fork") and sys.platform.startswith("linux")


@dataclass(slots=True)
class _Child:
    pid: int
    report_fd: int
    on_done: Callable[[WriteResult], None]
    weight: int
    exited: threading.Event
    status: int | None = None


def _wait_for(child: _Child) -> None:
    """Reaper thread: wait for the child without the GIL, then flag that it is gone."""
    try:
        child.status = os.waitpid(child.pid, 0)[1]
    except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored, a stray os.wait())
        child.status = None
    finally:
        child.exited.set()


class BackgroundWriter:
    """At most one forked writer in flight for one process; reaped, never orphaned.

    The owner is the process that created it: in a forked child of that process (a DataLoader
    worker) it neither waits for nor reaps anything, and writes nothing in the background.
    """

    def __init__(self) -> None:
        self._owner = os.getpid()
        self._lock = threading.RLock()
        self._child: _Child | None = None
        self.costs = WriteCosts()

    @property
    def pending(self) -> bool:
        """True while a child is writing (or has finished but not been reaped)."""
        return self._child is not None and os.getpid() == self._owner

    def submit(
        self,
        paths: atomic.DumpPaths,
        snapshot: Any,
        make_sidecar: Callable[[int], dict[str, Any]],
        on_done: Callable[[WriteResult], None],
        weight: int,
    ) -> bool:
        """Fork a child that writes ``paths``; False (nothing started) when it cannot fork.

        Waits first for a child still writing the previous dump: one in flight at a time keeps
        memory and disk use bounded when windows complete faster than they can be written.
        """
        if os.getpid() != self._owner:
            return False
        with self._lock:
            self.flush()
            rss = resident_bytes()
            read_fd, write_fd = os.pipe()
            start = time.perf_counter()
            try:
                with warnings.catch_warnings():
                    # Python 3.12+ warns that forking a multi-threaded process can deadlock the
                    # child; ours takes no lock another thread could hold, so the warning (which
                    # `-W error` would turn into a lost child) does not apply.
                    warnings.simplefilter("ignore", DeprecationWarning)
                    pid = os.fork()
            except OSError:
                os.close(read_fd)
                os.close(write_fd)
                return False
            if pid == 0:  # pragma: no cover - the child leaves through os._exit
                _child_main(write_fd, paths, snapshot, make_sidecar)
            os.close(write_fd)
            self.costs.observed_fork(time.perf_counter() - start, rss)
            child = _Child(pid, read_fd, on_done, weight, threading.Event())
            self._child = child
            threading.Thread(
                target=_wait_for, args=(child,), name="memforensics-reaper", daemon=True
            ).start()
            return True

    def poll(self) -> None:
        """Reap the child if it has finished; never blocks."""
        self._reap(block=False)

    def flush(self) -> None:
        """Wait until the child in flight, if any, has finished and been reaped."""
        self._reap(block=True)

    def _reap(self, *, block: bool) -> None:
        if os.getpid() != self._owner:
            self._child = None  # a forked copy of the owner: that child is not ours to wait for
            return
        with self._lock:
            child = self._child
            if child is None:
                return
            if not block and not child.exited.is_set():
                return
            child.exited.wait()
            self._child = None
            result = _read_report(child.report_fd, child.status)
            if result.ok:
                self.costs.observed_write(result.seconds, child.weight)
        child.on_done(result)


def _read_report(fd: int, status: int | None) -> WriteResult:
    """The child's one-line JSON report, or why there is none."""
    data = b""
    with contextlib.suppress(OSError):
        os.set_blocking(fd, False)  # a later fork may hold the write end open: never wait
        data = os.read(fd, 1 << 16)
    os.close(fd)
    try:
        report = json.loads(data)
        if report.get("ok"):
            return WriteResult(True, int(report["bytes"]), float(report["seconds"]))
        return WriteResult(False, error=str(report.get("error")))
    except (ValueError, TypeError, KeyError, AttributeError):
        pass
    if status is not None and os.WIFSIGNALED(status):
        return WriteResult(False, error=f"writer process killed by signal {os.WTERMSIG(status)}")
    code = os.WEXITSTATUS(status) if status is not None else "unknown"
    return WriteResult(False, error=f"writer process exited ({code}) without a report")


def _child_main(
    report_fd: int,
    paths: atomic.DumpPaths,
    snapshot: Any,
    make_sidecar: Callable[[int], dict[str, Any]],
) -> NoReturn:  # pragma: no cover - runs in the forked child; tests see its files and report
    """Write the dump, report, and leave without running anything inherited."""
    code = 1
    try:
        gc.disable()  # a collection would touch, and so copy, every object of the parent
        with contextlib.suppress(OSError):
            os.nice(19)  # use idle cores only: never compete with the training thread for one
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
            # The training script's handlers (checkpoint on SIGTERM...) must not run here.
            with contextlib.suppress(OSError, ValueError):
                signal.signal(signum, signal.SIG_DFL)
        start = time.perf_counter()
        size = atomic.write_dump(paths, snapshot, make_sidecar)
        report: dict[str, Any] = {
            "ok": True,
            "bytes": size,
            "seconds": time.perf_counter() - start,
        }
        code = 0
    except BaseException as exc:  # noqa: BLE001 - everything becomes the report
        report = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:_REPORT_LIMIT]}
    try:
        os.write(report_fd, json.dumps(report).encode())
    finally:
        os._exit(code)
