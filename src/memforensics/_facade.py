"""``install()`` and ``MemoryForensics``: the one object a training script talks to.

It wires config, rank, backend, window schedule, OOM path and writer together, and holds the
promise the whole library makes: after ``install()`` returns, nothing here raises into the
training loop, blocks it on a device synchronize, or changes how it fails.
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from memforensics import _writer
from memforensics._config import ForensicsConfig, build_config
from memforensics._errors import ConfigError
from memforensics._log import safe_log, warn_once
from memforensics._oom import (
    REGISTRY,
    OomGuard,
    attach_error_reason,
    is_oom_error,
    python_stack,
    requested_bytes_from_message,
)
from memforensics._rank import resolve_rank, resolve_world_size
from memforensics._sidecar import SidecarContext, build_sidecar, trace_length
from memforensics._window import Window, WindowSchedule, windows_to_delete
from memforensics.backends._protocol import DeviceBackend, HistoryMode
from memforensics.backends.none import NoneBackend

_install_lock = threading.RLock()
_current: MemoryForensics | None = None


class _NullStep:
    """The step context of a rank that captures nothing: as cheap as a context can be."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


_NULL_STEP = _NullStep()


class _StepContext:
    """``with mf.step(n):`` for a capturing rank."""

    __slots__ = ("_mf", "_number")

    def __init__(self, mf: MemoryForensics, number: int | None) -> None:
        self._mf = mf
        self._number = number

    def __enter__(self) -> None:
        self._mf._enter_step(self._number)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._mf._exit_step(exc)
        return False  # never swallow: the user's exception leaves unchanged


class MemoryForensics:
    """The process-wide flight recorder; create it with ``memforensics.install()``."""

    def __init__(self, config: ForensicsConfig, *, backend: DeviceBackend | None = None) -> None:
        self.config = config
        self.rank = resolve_rank(config.rank)
        self.world_size = resolve_world_size()
        self.out_dir = Path(config.out_dir).expanduser().resolve()
        self.capturing = config.captures(self.rank)
        self.closed = False
        self.dumps: list[Path] = []
        """Snapshot files this facade wrote, oldest first (retention removes deleted ones)."""
        self.oom_attached = False
        self.current_step: int | None = None
        self._last_step: int | None = None
        self._depth = 0
        self._fired_at_enter = 0
        self._completed: list[Window] = []
        self._schedule: WindowSchedule | None = None
        self._history: HistoryMode = None
        self._annotate = False
        self._guard = OomGuard(config.max_oom_snapshots)
        self._lock = threading.RLock()
        self.backend: DeviceBackend = NoneBackend()
        if not self.capturing:
            return  # fully inert: no observer, no history, no files
        self._prepare_out_dir()
        self.backend = backend if backend is not None else _create_backend(config.device)
        self._context = SidecarContext.collect(
            rank=self.rank,
            world_size=self.world_size,
            device=self.backend.name,
            device_index=self.backend.device_index(),
            torch_version=self.backend.framework_version(),
        )
        if not self.backend.available():
            self._warn_unavailable()
            return
        if config.records_windows(self.rank) and config.steps is not None:
            self._schedule = WindowSchedule(
                config.steps,
                every=config.every,
                skip_first=config.skip_first,
                max_windows=config.max_windows,
            )
        self._start_history()
        self._annotate = config.annotate_steps and self._try(
            "annotate_unsupported", self.backend.set_step_metadata, ""
        ) is True
        if config.oom:
            self._attach_observer()
        atexit.register(self._at_exit)

    # -- install-time helpers ------------------------------------------------------------------
    def _prepare_out_dir(self) -> None:
        try:
            _writer.check_writable(self.out_dir)
        except OSError as exc:
            raise ConfigError(
                f"memforensics: invalid config field 'out_dir': cannot create or write "
                f"{str(self.out_dir)!r} ({exc.strerror or exc})",
                field="out_dir",
            ) from None
        removed = _writer.clean_stale_temp_files(self.out_dir)
        if removed:
            safe_log("info", "stale_temp_files_removed", count=len(removed), out_dir=str(self.out_dir))

    def _warn_unavailable(self) -> None:
        if self.config.device == "none":
            return  # asked for nothing, gets nothing: not worth a warning
        if self.config.device == "auto":
            reason = "no CUDA or NPU device found; memforensics will capture nothing"
        else:
            reason = f"device {self.config.device!r} is not available; nothing will be captured"
        warn_once(f"unavailable:{self.config.device}", "device_unavailable", reason=reason,
                  device=self.config.device, rank=self.rank)

    def _start_history(self) -> None:
        if self._schedule is not None:
            mode: HistoryMode = "all"
        else:
            mode = None if self.config.oom_history == "off" else self.config.oom_history  # type: ignore[assignment]
        if mode is None:
            return
        if self._record(mode, clear=True):
            self._history = mode

    def _attach_observer(self) -> None:
        try:
            REGISTRY.ensure_attached(self.backend)
            self.oom_attached = True
        except Exception as exc:  # noqa: BLE001 - each refusal is a warning, never fatal
            warn_once(f"attach:{self.backend.name}:{exc}", "oom_observer_not_attached",
                      device=self.backend.name, reason=attach_error_reason(exc),
                      consequence="OOM dumps come only from exceptions leaving mf.step()")
        REGISTRY.set_handler(self._on_oom_observer)

    # -- run-time helpers: every one of these swallows and logs --------------------------------
    def _try(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - run-time failures become warnings
            warn_once(f"{what}:{type(exc).__name__}", what, error=f"{type(exc).__name__}: {exc}",
                      device=self.backend.name, rank=self.rank)
            return None

    def _record(self, mode: HistoryMode, *, clear: bool) -> bool:
        return self._try("history_failed", self._record_now, mode, clear) is True

    def _record_now(self, mode: HistoryMode, clear: bool) -> bool:
        self.backend.record_history(mode, max_entries=self.config.max_entries,
                                    stacks=self.config.stacks, clear=clear)
        return True

    # -- steps ---------------------------------------------------------------------------------
    def step(self, step: int | None = None) -> Any:
        """Context manager around one training step; ``step`` defaults to the last one + 1."""
        if not self.capturing or self.closed:
            return _NULL_STEP
        return _StepContext(self, step)

    def _enter_step(self, number: int | None) -> None:
        try:
            self._depth += 1
            if self._depth > 1:
                warn_once("nested_step", "nested_step", rank=self.rank,
                          reason="mf.step() entered inside another step; the inner one is ignored")
                return
            last = self._last_step
            if number is None:
                number = 0 if last is None else last + 1
            elif last is not None and number <= last:
                warn_once("step_not_increasing", "step_not_increasing", rank=self.rank,
                          given=number, last=last, used=last + 1,
                          reason="step numbers must increase; using last + 1")
                number = last + 1
            self._last_step = number
            self.current_step = number
            self._fired_at_enter = self._guard.fired
            schedule = self._schedule
            if schedule is not None and schedule.begin(number):
                self._record("all", clear=True)
            if self._annotate:
                self.backend.set_step_metadata(f"step={number}")
        except Exception as exc:  # noqa: BLE001
            warn_once("step_enter_failed", "step_enter_failed", error=repr(exc))

    def _exit_step(self, exc: BaseException | None) -> None:
        try:
            if self._depth > 1:
                return
            if exc is not None and is_oom_error(exc) and self._guard.fired == self._fired_at_enter:
                self._capture_from_exception(exc)
            schedule = self._schedule
            if schedule is not None:
                window = schedule.end()
                if window is not None:
                    self._dump_window(window)
            if self._annotate:
                self.backend.set_step_metadata("")
        except Exception as error:  # noqa: BLE001
            warn_once("step_exit_failed", "step_exit_failed", error=repr(error))
        finally:
            self._depth = max(self._depth - 1, 0)
            if self._depth == 0:
                self.current_step = None

    # -- dumps ---------------------------------------------------------------------------------
    def _dump_window(self, window: Window) -> None:
        paths = _writer.window_paths(self.out_dir, window.name, self.rank, os.getpid())
        snapshot = self._try("window_snapshot_failed", self.backend.snapshot)
        if snapshot is None:
            return
        entries = trace_length(snapshot)
        truncated = entries is not None and entries >= self.config.max_entries
        if truncated:
            safe_log("warning", "window_truncated", window=window.name, rank=self.rank,
                     max_entries=self.config.max_entries,
                     hint="raise max_entries to keep the whole window's history")

        def sidecar(size: int) -> dict[str, Any]:
            return build_sidecar(self._context, kind="window", snapshot_file=paths.snapshot,
                                 snapshot_bytes=size, created_at=_writer.utc_now(),
                                 steps=(window.first_step, window.last_step),
                                 step=window.last_step, partial=window.partial,
                                 truncated=truncated, trace_entries=entries)

        if self._write(paths, snapshot, sidecar, kind="window", window=window.name):
            self._completed.append(window)
            self._apply_retention()

    def _apply_retention(self) -> None:
        for old in windows_to_delete(self._completed, self.config.keep_last):
            self._try("retention_failed", _writer.remove_dump_folder, self.out_dir, old.name,
                      self.rank, os.getpid())
            self._completed.remove(old)
            gone = _writer.window_paths(self.out_dir, old.name, self.rank, os.getpid()).snapshot
            if gone in self.dumps:
                self.dumps.remove(gone)

    def _write(self, paths: _writer.DumpPaths, snapshot: Any, sidecar: Any, **fields: Any) -> bool:
        try:
            size = _writer.write_dump(paths, snapshot, sidecar)
        except Exception as exc:  # noqa: BLE001 - a full disk must not stop training
            safe_log("warning", "dump_failed", path=str(paths.snapshot), rank=self.rank,
                     error=f"{type(exc).__name__}: {exc}", **fields)
            return False
        with self._lock:
            self.dumps.append(paths.snapshot)
        safe_log("info", "dump_written", path=str(paths.snapshot), bytes=size, rank=self.rank,
                 **fields)
        return True

    def _on_oom_observer(self, device: int, requested: int, total: int, free: int) -> None:
        """The registry calls this from inside the allocator's failing malloc."""
        if self.closed or not self._guard.admit():
            return
        try:
            self._capture_oom(requested=requested, total=total, free=free, device_index=device,
                              source="observer", error=None)
        finally:
            self._guard.release()

    def _capture_from_exception(self, exc: BaseException) -> None:
        """step() fallback for OOMs the observer never saw (CANN, NCCL, no hook)."""
        if not self.backend.available() or not self._guard.admit():
            return
        try:
            info = self._try("mem_get_info_failed", self.backend.mem_get_info)
            free, total = info if info is not None else (None, None)
            message = str(exc)
            self._capture_oom(requested=requested_bytes_from_message(message), total=total,
                              free=free, device_index=self._context.device_index,
                              source="exception", error=message[:4000])
        finally:
            self._guard.release()

    def _capture_oom(self, *, requested: int | None, total: int | None, free: int | None,
                     device_index: int | None, source: str, error: str | None) -> None:
        now = _writer.utc_now()
        step = self.current_step
        stack = self._try("oom_stack_failed", python_stack)
        stats = self._try("oom_stats_failed", self.backend.memory_stats)
        safe_log("error", "out_of_memory", device=self.backend.name, device_index=device_index,
                 requested_bytes=requested, device_total_bytes=total, device_free_bytes=free,
                 rank=self.rank, step=step, source=source)
        snapshot = self._try("oom_snapshot_failed", self.backend.snapshot)
        if snapshot is None:
            return
        paths = _writer.event_paths(self.out_dir, "oom", self.rank, os.getpid(), step, now)
        oom = {"requested_bytes": requested, "device_total_bytes": total,
               "device_free_bytes": free, "stack": stack, "allocator": stats,
               "source": source, "error": error}

        def sidecar(size: int) -> dict[str, Any]:
            return build_sidecar(self._context, kind="oom", snapshot_file=paths.snapshot,
                                 snapshot_bytes=size, created_at=now, step=step,
                                 trace_entries=trace_length(snapshot), oom=oom)

        self._write(paths, snapshot, sidecar, kind="oom", step=step)

    def dump(self) -> Path | None:
        """Write a snapshot now (sidecar kind ``"manual"``); the path, or None if nothing."""
        if not self.capturing or self.closed or not self.backend.available():
            return None
        snapshot = self._try("manual_snapshot_failed", self.backend.snapshot)
        if snapshot is None:
            return None
        now = _writer.utc_now()
        paths = _writer.event_paths(self.out_dir, "manual", self.rank, os.getpid(),
                                    self.current_step, now)

        def sidecar(size: int) -> dict[str, Any]:
            return build_sidecar(self._context, kind="manual", snapshot_file=paths.snapshot,
                                 snapshot_bytes=size, created_at=now, step=self.current_step,
                                 trace_entries=trace_length(snapshot))

        return paths.snapshot if self._write(paths, snapshot, sidecar, kind="manual") else None

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        """Dump a partial window if one is open, stop recording, stop observing. Idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        if not self.capturing:
            return
        try:
            atexit.unregister(self._at_exit)
            if self._schedule is not None:
                window = self._schedule.close()
                if window is not None:
                    self._dump_window(window)
            if self._history is not None:
                self._record(None, clear=False)
                self._history = None
            if self._annotate:
                self._try("annotate_failed", self.backend.set_step_metadata, "")
            REGISTRY.set_handler(None)
        except Exception as exc:  # noqa: BLE001
            warn_once("close_failed", "close_failed", error=repr(exc))

    def _at_exit(self) -> None:
        self.close()

    def __enter__(self) -> MemoryForensics:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("capturing" if self.capturing else "inert")
        return (f"<MemoryForensics rank={self.rank} device={self.backend.name} {state} "
                f"out_dir={str(self.out_dir)!r}>")


def _create_backend(device: str) -> DeviceBackend:
    from memforensics.backends._select import create_backend

    return create_backend(device)


def install(**config: Any) -> MemoryForensics:
    """Validate ``config`` (ForensicsConfig fields, over ``MEMFORENSICS_*`` env vars) and start.

    The same configuration returns the live facade; a different one closes it first. A process
    attaches at most one OOM observer per device hook, ever.
    """
    global _current  # noqa: PLW0603 - the process-wide facade is the design
    validated = build_config(config)
    with _install_lock:
        if _current is not None and not _current.closed and _current.config == validated:
            return _current
        if _current is not None:
            _current.close()
            _current = None
        _current = MemoryForensics(validated)
        return _current


def uninstall() -> None:
    """Close the live facade, if any (the observer stays attached but goes quiet)."""
    global _current  # noqa: PLW0603
    with _install_lock:
        if _current is not None:
            _current.close()
            _current = None


def current() -> MemoryForensics | None:
    """The live facade, if ``install()`` was called and it is not closed."""
    facade = _current
    return facade if facade is not None and not facade.closed else None
