"""Taking and writing the three kinds of dump: window, OOM and manual; and window retention.

Every path that touches the device or the disk for a dump lives here, where each failure becomes
a warning. Nothing here synchronizes the device: ``snapshot()`` and ``memory_stats()`` only read
allocator state. OOM and manual dumps are written inline (the process may be about to die);
a window dump is the one kind that may be serialized by a forked child while training goes on,
so its outcome (the ``dump_written`` event, ``dumps``, ``keep_last`` retention) lands when the
child is reaped.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from memforensics._layout import NEAR_OOM
from memforensics.backends._protocol import DeviceBackend
from memforensics.capture import atomic, background
from memforensics.capture.config import ForensicsConfig
from memforensics.capture.journal import Journal
from memforensics.capture.log import guarded, safe_log, warn_once
from memforensics.capture.oom import (
    allocation_bytes_from_message,
    device_from_message,
    python_stack,
)
from memforensics.capture.sidecar import (
    SidecarContext,
    allocated_peak,
    build_sidecar,
    requested_from_trace,
    trace_length,
)
from memforensics.capture.track import TrackedTensors, Tracker
from memforensics.capture.window import Window, windows_to_delete

WriterMode = Literal["auto", "inline", "fork"]
"""``config.writer`` (``"auto"``, ``"inline"``); ``"fork"`` forces a child (tests only)."""


class Dumper:
    """Writes one process's dumps under ``out_dir`` and applies window retention.

    OOM and manual dumps are written inline: the process may be about to die, and the caller
    wants the file. Window dumps are snapshotted inline (the snapshot is the state at that
    moment) and, with ``writer="auto"``, serialized by a forked child when the snapshot is
    above ``background.MIN_FORK_WEIGHT`` and that is predicted to cost the training thread less
    (``background.WriteCosts``); ``writer="inline"`` never forks. Retention and ``dumps``
    follow each window once it has landed.
    """

    def __init__(
        self,
        config: ForensicsConfig,
        out_dir: Path,
        rank: int,
        backend: DeviceBackend,
        context: SidecarContext,
        *,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        """``ready``: asked before each dump whether ``out_dir`` takes files now (it may try the
        disk again); a dump it refuses is skipped whole, snapshot included."""
        self.config = config
        self.out_dir = out_dir
        self.rank = rank
        self.backend = backend
        self.context = context
        self.dumps: list[Path] = []
        self._completed: list[Window] = []
        self._lock = threading.Lock()
        self.writer: WriterMode = config.writer
        self._background = background.BackgroundWriter()
        self.name_token: Callable[[], str] = _no_token
        """The token this process's file names carry: the journal's, set when another live
        process shares its rank and pid (see ``Journal.identity``); empty otherwise."""
        self._window_tokens: dict[str, str] = {}
        self._tracker: Tracker | None = None
        self._ready = ready if ready is not None else _always

    def disk_ready(self, kind: str) -> bool:
        """Whether a ``kind`` dump may be written now; a refused one is logged at debug."""
        if self._ready():
            return True
        safe_log("debug", "dump_skipped", kind=kind, rank=self.rank, reason="out_dir unwritable")
        return False

    def named_by(self, journal: Journal) -> Journal:
        """Name dumps apart as ``journal`` does (its token); return ``journal``."""
        self.name_token = journal.identity
        return journal

    def tracking(self, tracker: Tracker) -> None:
        """Record ``tracker``'s tensors in every sidecar from now on (``tensors``)."""
        self._tracker = tracker

    def tracked_tensors(self) -> TrackedTensors | None:
        """The tracked tensors on this backend's device, read now (right after a snapshot, so
        their addresses are the snapshot's); None when nothing is tracked or the walk failed."""
        tracker = self._tracker
        if tracker is None:
            return None
        return self.attempt("tensors_failed", tracker.tensors, self.backend.name)  # type: ignore[no-any-return]

    def allocated_peak(self) -> int | None:
        """The allocator's peak allocated bytes, read now for a dump's sidecar (its statistics
        only: no device synchronize); None when they do not say or the read failed."""
        return allocated_peak(self.attempt("peak_stats_failed", self.backend.memory_stats))

    def attempt(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn``; on failure warn once under ``what`` and return None."""
        return guarded(what, fn, *args, device=self.backend.name, rank=self.rank)

    def _write(
        self,
        paths: atomic.DumpPaths,
        snapshot: Any,
        sidecar: Callable[[int], dict[str, Any]],
        **fields: Any,
    ) -> bool:
        start = time.perf_counter()
        try:
            size = atomic.write_dump(paths, snapshot, sidecar)
        except Exception as exc:  # noqa: BLE001 - a full disk must not stop training
            self._failed(paths, f"{type(exc).__name__}: {exc}", fields)
            return False
        self._background.costs.observed_write(
            time.perf_counter() - start, background.snapshot_weight(snapshot)
        )
        self._landed(paths, size, fields)
        return True

    def _landed(self, paths: atomic.DumpPaths, size: int, fields: dict[str, Any]) -> None:
        with self._lock:
            self.dumps.append(paths.snapshot)
        safe_log(
            "info", "dump_written", path=str(paths.snapshot), bytes=size, rank=self.rank, **fields
        )

    def _failed(self, paths: atomic.DumpPaths, error: str, fields: dict[str, Any]) -> None:
        safe_log(
            "warning",
            "dump_failed",
            path=str(paths.snapshot),
            rank=self.rank,
            error=error,
            **fields,
        )

    def flush(self) -> None:
        """Wait for a window dump still being written in the background (no-op otherwise)."""
        try:
            self._background.flush()
        except Exception as exc:  # noqa: BLE001 - nothing raises into training
            warn_once("background_flush_failed", "background_flush_failed", error=repr(exc))

    def current_device(self) -> int | None:
        """The device current now: a rank may have switched since ``install()``."""
        return self.attempt("device_index_failed", self.backend.device_index)  # type: ignore[no-any-return]

    # -- window --------------------------------------------------------------------------------
    def _use_background(self, snapshot: Any) -> tuple[bool, int]:
        """Whether to fork a writer for ``snapshot``, and its weight (for learning costs)."""
        weight = background.snapshot_weight(snapshot)
        if self.writer == "inline" or not background.fork_supported():
            return False, weight
        if self.writer == "fork":
            return True, weight
        if weight < background.MIN_FORK_WEIGHT:
            return False, weight  # below the floor: never worth a fork, whatever was learned
        return self._background.costs.prefer_fork(weight, background.resident_bytes()), weight

    def window(self, window: Window, *, may_fork: bool = True) -> bool:
        """Dump a completed (or partial) window; True when its files landed or are on their way.

        With ``may_fork`` the write may go to a forked child; its outcome (retention, the
        ``dump_written`` event, ``dumps``) is applied when the child is reaped: by the next
        window dump, ``flush()``, or the facade's ``dumps`` and ``close()``.
        """
        self.flush()  # one window in flight at most, landed in order
        if not self.disk_ready("window"):
            return False
        token = self._window_tokens[window.name] = self.name_token()
        paths = atomic.window_paths(self.out_dir, window.name, self.rank, self.context.pid, token)
        snapshot = self.attempt("window_snapshot_failed", self.backend.snapshot)
        if snapshot is None:
            return False
        tensors = self.tracked_tensors()
        peak = self.allocated_peak()
        device_index = self.current_device()
        entries = trace_length(snapshot)
        truncated = entries is not None and entries >= self.config.max_entries
        if truncated:
            safe_log(
                "warning",
                "window_truncated",
                window=window.name,
                rank=self.rank,
                max_entries=self.config.max_entries,
                hint="raise max_entries to keep the whole window's history",
            )

        def sidecar(size: int) -> dict[str, Any]:
            return build_sidecar(
                self.context,
                kind="window",
                snapshot_file=paths.snapshot,
                snapshot_bytes=size,
                created_at=atomic.utc_now(),
                device_index=device_index,
                steps=(window.first_step, window.last_step),
                step=window.last_step,
                partial=window.partial,
                truncated=truncated,
                trace_entries=entries,
                tensors=tensors,
                peak_allocated_bytes=peak,
            )

        fields: dict[str, Any] = {"kind": "window", "window": window.name}
        if may_fork:
            fork, weight = self._use_background(snapshot)
            if fork and self._submit(paths, snapshot, sidecar, window, fields, weight):
                return True
        if not self._write(paths, snapshot, sidecar, **fields):
            return False
        self._window_landed(window)
        return True

    def _submit(
        self,
        paths: atomic.DumpPaths,
        snapshot: Any,
        sidecar: Callable[[int], dict[str, Any]],
        window: Window,
        fields: dict[str, Any],
        weight: int,
    ) -> bool:
        def done(result: background.WriteResult) -> None:
            if result.ok:
                self._landed(paths, result.size, fields)
                self._window_landed(window)
            else:
                self._failed(paths, result.error, fields)

        started = self.attempt(
            "background_write_failed",
            self._background.submit,
            paths,
            snapshot,
            sidecar,
            done,
            weight,
        )
        if not started:
            warn_once(
                "background_write_unavailable",
                "background_write_unavailable",
                rank=self.rank,
                reason="could not fork a writer; window dumps are written inline",
            )
        return started is True

    def _window_landed(self, window: Window) -> None:
        self._completed.append(window)
        self._apply_retention()

    def _apply_retention(self) -> None:
        for old in windows_to_delete(self._completed, self.config.keep_last):
            token = self._window_tokens.pop(old.name, "")
            self.attempt(
                "retention_failed",
                atomic.remove_dump_folder,
                self.out_dir,
                old.name,
                self.rank,
                self.context.pid,
                token,
            )
            self._completed.remove(old)
            gone = atomic.window_paths(self.out_dir, old.name, self.rank, self.context.pid, token)
            gone_snapshot = gone.snapshot
            with self._lock:
                if gone_snapshot in self.dumps:
                    self.dumps.remove(gone_snapshot)

    # -- OOM -----------------------------------------------------------------------------------
    def oom(
        self,
        *,
        step: int | None,
        allocation_bytes: int | None,
        device_total_bytes: int | None,
        device_free_bytes: int | None,
        device_index: int | None,
        source: str,
        error: str | None = None,
        stack: list[dict[str, Any]] | None = None,
    ) -> None:
        """Log the structured ERROR event first, then snapshot and write with a full sidecar.

        ``allocation_bytes``, ``device_total_bytes`` and ``device_free_bytes`` are the
        observer's arguments (or what the step() fallback found); the user's request comes from
        the snapshot's trace.
        """
        now = atomic.utc_now()
        if stack is None:
            stack = self.attempt("oom_stack_failed", python_stack)
        stats = self.attempt("oom_stats_failed", self.backend.memory_stats)
        safe_log(
            "error",
            "out_of_memory",
            device=self.backend.name,
            device_index=device_index,
            allocation_bytes=allocation_bytes,
            device_total_bytes=device_total_bytes,
            device_free_bytes=device_free_bytes,
            rank=self.rank,
            step=step,
            source=source,
        )
        if not self.disk_ready("oom"):
            return
        snapshot = self.attempt("oom_snapshot_failed", self.backend.snapshot)
        if snapshot is None:
            return
        oom = {
            "requested_bytes": requested_from_trace(snapshot, device_index),
            "allocation_bytes": allocation_bytes,
            "device_total_bytes": device_total_bytes,
            "device_free_bytes": device_free_bytes,
            "stack": stack,
            "allocator": stats,
            "source": source,
            "error": error,
        }
        self._event_dump("oom", snapshot, step, now, oom, device_index, allocated_peak(stats))

    def oom_from_exception(self, exc: BaseException, step: int | None) -> None:
        """The step() fallback: figures from the message and ``mem_get_info``, stack from the
        traceback so it ends at the line that failed, not at the ``with`` statement.

        The limit respects a per-process memory fraction where the framework exposes one, as
        the allocator's own limit does (``fraction * total``).
        """
        info = self.attempt("mem_get_info_failed", self.backend.mem_get_info)
        free, total = info if info is not None else (None, None)
        fraction = self.attempt("memory_fraction_failed", self.backend.memory_fraction)
        limit = total
        if total is not None and isinstance(fraction, float) and 0.0 < fraction < 1.0:
            limit = int(fraction * total)
        message = str(exc)
        device_index = device_from_message(message)
        self.oom(
            step=step,
            allocation_bytes=allocation_bytes_from_message(message),
            device_total_bytes=limit,
            device_free_bytes=free,
            device_index=device_index if device_index is not None else self.current_device(),
            source="exception",
            error=message[:4000],
            stack=self.attempt("oom_stack_failed", exception_stack, exc),
        )

    # -- near-OOM ------------------------------------------------------------------------------
    def near_oom(
        self, step: int | None, record: Callable[[float, dict[str, Any] | None], dict[str, Any]]
    ) -> Path | None:
        """A snapshot of a moment memory got tight (kind ``"near-oom"``), written inline.

        ``record`` builds the sidecar's ``near_oom`` object (why, and the figures) from the
        configured fraction and the allocator statistics read here.
        """
        if not self.disk_ready(NEAR_OOM):
            return None
        stats = self.attempt("near_oom_stats_failed", self.backend.memory_stats)
        snapshot = self.attempt("near_oom_snapshot_failed", self.backend.snapshot)
        if snapshot is None:
            return None
        near = record(self.config.near_oom_fraction, stats)
        now = atomic.utc_now()
        return self._event_dump(
            NEAR_OOM, snapshot, step, now, None, self.current_device(), allocated_peak(stats),
            near_oom=near,
        )  # fmt: skip

    # -- manual --------------------------------------------------------------------------------
    def manual(self, step: int | None) -> Path | None:
        """A snapshot on request (``mf.dump()``), kind ``"manual"``."""
        if not self.disk_ready("manual"):
            return None
        snapshot = self.attempt("manual_snapshot_failed", self.backend.snapshot)
        if snapshot is None:
            return None
        now = atomic.utc_now()
        peak = self.allocated_peak()
        return self._event_dump(
            "manual", snapshot, step, now, None, self.current_device(), peak
        )  # fmt: skip

    def _event_dump(
        self,
        kind: str,
        snapshot: Any,
        step: int | None,
        now: datetime,
        oom: dict[str, Any] | None,
        device_index: int | None,
        peak: int | None,
        near_oom: dict[str, Any] | None = None,
    ) -> Path | None:
        """Write an OOM, near-OOM or manual dump synchronously (the process may be about to
        die), with the tracked tensors read now, right after its snapshot was taken; ``peak``
        the allocator's peak allocated bytes, from the statistics the caller read."""
        tensors = self.tracked_tensors()
        token = self.name_token()
        paths = atomic.event_paths(
            self.out_dir, kind, self.rank, self.context.pid, step, now, token
        )
        entries = trace_length(snapshot)

        def sidecar(size: int) -> dict[str, Any]:
            return build_sidecar(
                self.context,
                kind=kind,
                snapshot_file=paths.snapshot,
                snapshot_bytes=size,
                created_at=now,
                device_index=device_index,
                step=step,
                trace_entries=entries,
                truncated=entries is not None and entries >= self.config.max_entries,
                oom=oom,
                near_oom=near_oom,
                tensors=tensors,
                peak_allocated_bytes=peak,
            )

        return (
            paths.snapshot if self._write(paths, snapshot, sidecar, kind=kind, step=step) else None
        )


def exception_stack(exc: BaseException) -> list[dict[str, Any]]:
    """Outermost-first stack from the caller of ``with mf.step()`` down to where ``exc`` rose."""
    outer = python_stack()
    inner = [
        {"filename": f.filename, "line": f.lineno, "name": f.name}
        for f in traceback.extract_tb(exc.__traceback__)
    ]
    own = os.path.dirname(os.path.dirname(__file__)) + os.sep  # the whole package
    inner = [f for f in inner if not str(f["filename"]).startswith(own)]
    if (
        outer
        and inner
        and outer[-1]["filename"] == inner[0]["filename"]
        and (outer[-1]["name"] == inner[0]["name"])
    ):
        outer = outer[:-1]  # the frame holding the ``with`` appears in both
    return outer + inner


def _no_token() -> str:
    return ""


def _always() -> bool:
    return True
