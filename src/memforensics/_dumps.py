"""Taking and writing the three kinds of dump: window, OOM and manual.

Kept apart from the facade so the facade stays about lifecycle and steps, and so every path that
touches the device or the disk lives in one place where each failure becomes a warning. Nothing
here synchronizes the device: ``snapshot()`` and ``memory_stats()`` only read allocator state.
"""

from __future__ import annotations

import os
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memforensics import _writer
from memforensics._config import ForensicsConfig
from memforensics._log import safe_log, warn_once
from memforensics._oom import python_stack, requested_bytes_from_message
from memforensics._sidecar import SidecarContext, build_sidecar, trace_length
from memforensics._window import Window, windows_to_delete
from memforensics.backends._protocol import DeviceBackend


class Dumper:
    """Writes one process's dumps under ``out_dir`` and applies window retention."""

    def __init__(
        self,
        config: ForensicsConfig,
        out_dir: Path,
        rank: int,
        backend: DeviceBackend,
        context: SidecarContext,
    ) -> None:
        self.config = config
        self.out_dir = out_dir
        self.rank = rank
        self.backend = backend
        self.context = context
        self.dumps: list[Path] = []
        self._completed: list[Window] = []
        self._lock = threading.Lock()

    def attempt(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn``; on failure warn once under ``what`` and return None."""
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - run-time failures become warnings
            warn_once(
                f"{what}:{type(exc).__name__}",
                what,
                error=f"{type(exc).__name__}: {exc}",
                device=self.backend.name,
                rank=self.rank,
            )
            return None

    def _write(
        self,
        paths: _writer.DumpPaths,
        snapshot: Any,
        sidecar: Callable[[int], dict[str, Any]],
        **fields: Any,
    ) -> bool:
        try:
            size = _writer.write_dump(paths, snapshot, sidecar)
        except Exception as exc:  # noqa: BLE001 - a full disk must not stop training
            safe_log(
                "warning",
                "dump_failed",
                path=str(paths.snapshot),
                rank=self.rank,
                error=f"{type(exc).__name__}: {exc}",
                **fields,
            )
            return False
        with self._lock:
            self.dumps.append(paths.snapshot)
        safe_log(
            "info", "dump_written", path=str(paths.snapshot), bytes=size, rank=self.rank, **fields
        )
        return True

    # -- windows -------------------------------------------------------------------------------
    def window(self, window: Window) -> bool:
        """Dump a completed (or partial) window; True when its files landed."""
        paths = _writer.window_paths(self.out_dir, window.name, self.rank, os.getpid())
        snapshot = self.attempt("window_snapshot_failed", self.backend.snapshot)
        if snapshot is None:
            return False
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
                created_at=_writer.utc_now(),
                steps=(window.first_step, window.last_step),
                step=window.last_step,
                partial=window.partial,
                truncated=truncated,
                trace_entries=entries,
            )

        if not self._write(paths, snapshot, sidecar, kind="window", window=window.name):
            return False
        self._completed.append(window)
        self._apply_retention()
        return True

    def _truncated(self, snapshot: Any) -> bool:
        """True when the trace filled its ring buffer, so its oldest events were dropped."""
        entries = trace_length(snapshot)
        return entries is not None and entries >= self.config.max_entries

    def _apply_retention(self) -> None:
        for old in windows_to_delete(self._completed, self.config.keep_last):
            self.attempt(
                "retention_failed",
                _writer.remove_dump_folder,
                self.out_dir,
                old.name,
                self.rank,
                os.getpid(),
            )
            self._completed.remove(old)
            gone = _writer.window_paths(self.out_dir, old.name, self.rank, os.getpid()).snapshot
            with self._lock:
                if gone in self.dumps:
                    self.dumps.remove(gone)

    # -- OOM -----------------------------------------------------------------------------------
    def oom(
        self,
        *,
        step: int | None,
        requested: int | None,
        total: int | None,
        free: int | None,
        device_index: int | None,
        source: str,
        error: str | None = None,
        stack: list[dict[str, Any]] | None = None,
    ) -> None:
        """Log the structured ERROR event first, then snapshot and write with a full sidecar."""
        now = _writer.utc_now()
        if stack is None:
            stack = self.attempt("oom_stack_failed", python_stack)
        stats = self.attempt("oom_stats_failed", self.backend.memory_stats)
        safe_log(
            "error",
            "out_of_memory",
            device=self.backend.name,
            device_index=device_index,
            requested_bytes=requested,
            device_total_bytes=total,
            device_free_bytes=free,
            rank=self.rank,
            step=step,
            source=source,
        )
        snapshot = self.attempt("oom_snapshot_failed", self.backend.snapshot)
        if snapshot is None:
            return
        paths = _writer.event_paths(self.out_dir, "oom", self.rank, os.getpid(), step, now)
        oom = {
            "requested_bytes": requested,
            "device_total_bytes": total,
            "device_free_bytes": free,
            "stack": stack,
            "allocator": stats,
            "source": source,
            "error": error,
        }

        def sidecar(size: int) -> dict[str, Any]:
            return build_sidecar(
                self.context,
                kind="oom",
                snapshot_file=paths.snapshot,
                snapshot_bytes=size,
                created_at=now,
                step=step,
                trace_entries=trace_length(snapshot),
                truncated=self._truncated(snapshot),
                oom=oom,
            )

        self._write(paths, snapshot, sidecar, kind="oom", step=step)

    def oom_from_exception(self, exc: BaseException, step: int | None) -> None:
        """The step() fallback: figures from the message and ``mem_get_info``, stack from the
        traceback so it ends at the line that failed, not at the ``with`` statement."""
        info = self.attempt("mem_get_info_failed", self.backend.mem_get_info)
        free, total = info if info is not None else (None, None)
        message = str(exc)
        self.oom(
            step=step,
            requested=requested_bytes_from_message(message),
            total=total,
            free=free,
            device_index=self.context.device_index,
            source="exception",
            error=message[:4000],
            stack=self.attempt("oom_stack_failed", exception_stack, exc),
        )

    # -- manual --------------------------------------------------------------------------------
    def manual(self, step: int | None) -> Path | None:
        """A snapshot on request (``mf.dump()``), kind ``"manual"``."""
        snapshot = self.attempt("manual_snapshot_failed", self.backend.snapshot)
        if snapshot is None:
            return None
        now = _writer.utc_now()
        paths = _writer.event_paths(self.out_dir, "manual", self.rank, os.getpid(), step, now)

        def sidecar(size: int) -> dict[str, Any]:
            return build_sidecar(
                self.context,
                kind="manual",
                snapshot_file=paths.snapshot,
                snapshot_bytes=size,
                created_at=now,
                step=step,
                trace_entries=trace_length(snapshot),
                truncated=self._truncated(snapshot),
            )

        return paths.snapshot if self._write(paths, snapshot, sidecar, kind="manual") else None


def exception_stack(exc: BaseException) -> list[dict[str, Any]]:
    """Outermost-first stack from the caller of ``with mf.step()`` down to where ``exc`` rose."""
    outer = python_stack()
    inner = [
        {"filename": f.filename, "line": f.lineno, "name": f.name}
        for f in traceback.extract_tb(exc.__traceback__)
    ]
    own = os.path.dirname(__file__) + os.sep
    inner = [f for f in inner if not str(f["filename"]).startswith(own)]
    if (
        outer
        and inner
        and outer[-1]["filename"] == inner[0]["filename"]
        and (outer[-1]["name"] == inner[0]["name"])
    ):
        outer = outer[:-1]  # the frame holding the ``with`` appears in both
    return outer + inner
