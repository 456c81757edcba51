"""Window dumps: snapshot inline, write inline or in a forked child, then apply retention.

Split from :mod:`memforensics.capture.dumps`: a window is the one dump kind that may be written in the
background (the training thread keeps going while a child serializes a large snapshot), and its
outcome (the ``dump_written`` event, ``dumps``, ``keep_last`` retention) lands later, when the
child is reaped. OOM and manual dumps stay inline in ``_dumps``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from memforensics.backends._protocol import DeviceBackend
from memforensics.capture import atomic as _writer
from memforensics.capture import background as _background
from memforensics.capture.config import ForensicsConfig
from memforensics.capture.log import safe_log, warn_once
from memforensics.capture.sidecar import SidecarContext, build_sidecar, trace_length
from memforensics.capture.window import Window, windows_to_delete

WriterMode = Literal["auto", "inline", "fork"]
"""``config.writer`` (``"auto"``, ``"inline"``); ``"fork"`` forces a child (tests only)."""


class WindowDumps:
    """The window methods of :class:`~memforensics.capture.dumps.Dumper` (which provides the state)."""

    config: ForensicsConfig
    out_dir: Path
    rank: int
    backend: DeviceBackend
    context: SidecarContext
    dumps: list[Path]
    writer: WriterMode
    _completed: list[Window]
    _lock: threading.Lock
    _background: _background.BackgroundWriter

    # provided by Dumper (annotations only: the real methods are found by the MRO)
    attempt: Callable[..., Any]
    flush: Callable[[], None]
    current_device: Callable[[], int | None]
    _write: Callable[..., bool]
    _landed: Callable[[_writer.DumpPaths, int, dict[str, Any]], None]
    _failed: Callable[[_writer.DumpPaths, str, dict[str, Any]], None]

    def _use_background(self, snapshot: Any) -> tuple[bool, int]:
        """Whether to fork a writer for ``snapshot``, and its weight (for learning costs)."""
        weight = _background.snapshot_weight(snapshot)
        if self.writer == "inline" or not _background.fork_supported():
            return False, weight
        if self.writer == "fork":
            return True, weight
        if weight < _background.MIN_FORK_WEIGHT:
            return False, weight  # below the floor: never worth a fork, whatever was learned
        return self._background.costs.prefer_fork(weight, _background.resident_bytes()), weight

    def window(self, window: Window, *, background: bool = True) -> bool:
        """Dump a completed (or partial) window; True when its files landed or are on their way.

        With ``background`` the write may go to a forked child; its outcome (retention, the
        ``dump_written`` event, ``dumps``) is applied when the child is reaped: by the next
        window dump, ``flush()``, or the facade's ``dumps`` and ``close()``.
        """
        self.flush()  # one window in flight at most, landed in order
        paths = _writer.window_paths(self.out_dir, window.name, self.rank, self.context.pid)
        snapshot = self.attempt("window_snapshot_failed", self.backend.snapshot)
        if snapshot is None:
            return False
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
                created_at=_writer.utc_now(),
                device_index=device_index,
                steps=(window.first_step, window.last_step),
                step=window.last_step,
                partial=window.partial,
                truncated=truncated,
                trace_entries=entries,
            )

        fields: dict[str, Any] = {"kind": "window", "window": window.name}
        if background:
            fork, weight = self._use_background(snapshot)
            if fork and self._submit(paths, snapshot, sidecar, window, fields, weight):
                return True
        if not self._write(paths, snapshot, sidecar, **fields):
            return False
        self._window_landed(window)
        return True

    def _submit(
        self,
        paths: _writer.DumpPaths,
        snapshot: Any,
        sidecar: Callable[[int], dict[str, Any]],
        window: Window,
        fields: dict[str, Any],
        weight: int,
    ) -> bool:
        def done(result: _background.WriteResult) -> None:
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
            self.attempt(
                "retention_failed",
                _writer.remove_dump_folder,
                self.out_dir,
                old.name,
                self.rank,
                self.context.pid,
            )
            self._completed.remove(old)
            gone = _writer.window_paths(self.out_dir, old.name, self.rank, self.context.pid)
            gone_snapshot = gone.snapshot
            with self._lock:
                if gone_snapshot in self.dumps:
                    self.dumps.remove(gone_snapshot)
