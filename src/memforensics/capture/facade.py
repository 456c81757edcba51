"""``install()`` and ``MemoryForensics``: the one object a training script talks to.

It wires config, rank, backend, window schedule, OOM path and writer together, and holds the
promise the whole library makes: after ``install()`` returns, nothing here raises into the
training loop, blocks it on a device synchronize, or changes how it fails.

The per-step hot path lives in :mod:`memforensics.capture.step`; the facade's OOM hooks, history
switching and journal hooks are mixins in :mod:`memforensics.capture.oom_hooks`,
:mod:`memforensics.capture.history` and :mod:`memforensics.capture.journal_hooks`, so this module
keeps install, manual dumps and close.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memforensics._errors import ConfigError
from memforensics.backends._protocol import DeviceBackend, HistoryMode
from memforensics.backends.none import NoneBackend
from memforensics.capture import atomic as _writer
from memforensics.capture.config import ForensicsConfig, blame_environment, build_config
from memforensics.capture.dumps import Dumper
from memforensics.capture.history import HistorySwitch
from memforensics.capture.journal import NO_JOURNAL, Journal
from memforensics.capture.journal_hooks import JournalHooks
from memforensics.capture.log import guarded, safe_log, warn_once
from memforensics.capture.oom import REGISTRY, OomGuard
from memforensics.capture.oom_hooks import OomHooks
from memforensics.capture.rank import resolve_rank, resolve_world_size
from memforensics.capture.sidecar import SidecarContext
from memforensics.capture.step import NULL_STEP, StepContext
from memforensics.capture.window import Window, WindowSchedule

_install_lock = threading.RLock()
_current: MemoryForensics | None = None


class MemoryForensics(OomHooks, HistorySwitch, JournalHooks):
    """The process-wide flight recorder; create it with ``memforensics.install()``."""

    def __init__(self, config: ForensicsConfig, *, backend: DeviceBackend | None = None) -> None:
        self.config = config
        self.rank = resolve_rank(config.rank)
        self.world_size = resolve_world_size()
        self.out_dir = Path(config.out_dir).expanduser().resolve()
        self.capturing = config.captures(self.rank)
        self.closed = False
        self.oom_attached = False
        self._device_ready = False  # set once the backend proved available at install
        self.current_step: int | None = None
        self._last_step: int | None = None
        self._depth = 0
        self._fired_at_enter = 0
        self._schedule: WindowSchedule | None = None
        self._history: HistoryMode = None
        self._annotate = False
        self._begin_window: Callable[[int], bool] | None = None
        self._end_window: Callable[[], Window | None] | None = None
        self._tag: Callable[[str], object] | None = None
        """The backend's metadata setter, bound once: None when steps are not annotated."""
        self._guard = OomGuard(config.max_oom_snapshots)
        self._pid = os.getpid()
        self._journal: Journal | None = None
        self._journal_next = NO_JOURNAL
        """The next step number that writes a journal line: one comparison per step."""
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
            torch_version=self.backend.framework_version(),
        )
        self._dumper = Dumper(config, self.out_dir, self.rank, self.backend, self._context)
        if not self.backend.available():
            self._warn_unavailable()
            return
        self._device_ready = True
        if config.journal_every is not None:
            self._journal = Journal(self.out_dir, self.rank, self.backend.journal_stats)
            self._journal_next = 0
        if config.records_windows(self.rank) and config.steps is not None:
            self._schedule = WindowSchedule(
                config.steps,
                every=config.every,
                skip_first=config.skip_first,
                max_windows=config.max_windows,
            )
            self._begin_window = self._schedule.begin
            self._end_window = self._schedule.end
        self._start_history()
        self._annotate = (
            config.annotate_steps
            and self._try("annotate_unsupported", self.backend.set_step_metadata, "") is True
        )
        if self._annotate:
            self._tag = self.backend.set_step_metadata
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
        removed = _writer.clean_stale_temp_files(self.out_dir, self.rank)
        if removed:
            safe_log(
                "info", "stale_temp_files_removed", count=len(removed), out_dir=str(self.out_dir)
            )

    def _warn_unavailable(self) -> None:
        if self.config.device == "none":
            return  # asked for nothing, gets nothing: not worth a warning
        if self.config.device == "auto":
            reason = "no CUDA or NPU device found; memforensics will capture nothing"
        else:
            reason = f"device {self.config.device!r} is not available; nothing will be captured"
        warn_once(
            f"unavailable:{self.config.device}",
            "device_unavailable",
            reason=reason,
            device=self.config.device,
            rank=self.rank,
        )

    # -- run-time helpers: every one of these swallows and logs --------------------------------
    def _try(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        return guarded(what, fn, *args, device=self.backend.name, rank=self.rank)

    # -- steps ---------------------------------------------------------------------------------
    def step(self, step: int | None = None) -> Any:
        """Context manager around one training step; ``step`` defaults to the last one + 1."""
        if not self._device_ready or self.closed:
            return NULL_STEP  # an inert rank, or no device: nothing a step could capture
        return StepContext(self, step)

    def _nested_step(self) -> None:
        warn_once(
            "nested_step",
            "nested_step",
            rank=self.rank,
            reason="mf.step() entered inside another step; the inner one is ignored",
        )

    def _step_not_increasing(self, given: int, last: int) -> int:
        warn_once(
            "step_not_increasing",
            "step_not_increasing",
            rank=self.rank,
            given=given,
            last=last,
            used=last + 1,
            reason="step numbers must increase; using last + 1",
        )
        return last + 1

    # -- manual dumps ------------------------------------------------------------------------------
    def dump(self) -> Path | None:
        """Write a snapshot now (sidecar kind ``"manual"``); the path, or None if nothing."""
        if not self._device_ready or self.closed:
            return None
        return self._dumper.manual(self.current_step)

    @property
    def dumps(self) -> list[Path]:
        """Snapshot files this facade wrote, in the order they landed (retention removes the
        deleted ones). Waits for a window dump still being written in the background."""
        dumper = getattr(self, "_dumper", None)
        if dumper is None:
            return []
        dumper.flush()
        return list(dumper.dumps)

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        """Dump a partial window if one is open, stop recording, stop observing. Idempotent."""
        with _install_lock:  # a late close on another thread never undoes a newer install
            self._close()

    def _close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
        if not self.capturing or os.getpid() != self._pid:
            return  # inert, or a forked child (DataLoader worker): the device is not ours
        try:
            atexit.unregister(self._at_exit)
            if self._schedule is not None:
                window = self._schedule.close()
                if window is not None:
                    self._dumper.window(window, background=False)
            self._dumper.flush()  # evidence lands before the interpreter exits
            self._journal_close()
            if self._history is not None:
                self._record(None, clear=False)
                self._history = None
            if self._annotate:
                self._try("annotate_failed", self.backend.set_step_metadata, "")
            REGISTRY.clear_handler(self._on_oom_observer)
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
        return (
            f"<MemoryForensics rank={self.rank} device={self.backend.name} {state} "
            f"out_dir={str(self.out_dir)!r}>"
        )


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
        try:
            _current = MemoryForensics(validated)
        except ConfigError as exc:
            raise blame_environment(exc, explicit=config) from None
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
