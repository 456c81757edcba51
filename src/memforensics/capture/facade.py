"""``install()``, ``MemoryForensics`` and its step contexts: what a training script talks to.

The facade wires config, rank, backend, window schedule, history, journal, OOM capture and
dumps together, and holds the promise the whole library makes: after ``install()`` returns,
nothing here raises into the training loop, blocks it on a device synchronize, or changes how it
fails. It holds a collaborator per job and calls it: a ``Dumper`` writes dumps, a
``HistorySwitch`` sets what the allocator records, a ``JournalSchedule`` appends journal lines,
an ``OomCapture`` turns an OOM into a dump and a ``Tracker`` holds the models and optimizers
whose tensors each dump's sidecar lists.

``with mf.step(n):`` runs twice per training step, so the common case (no window opens or
closes) is a handful of attribute reads and integer comparisons in ``begin_step`` and
``end_step``, with everything prepared at install time (bound methods, or None when there is
nothing to do). See docs/performance.md for what this costs.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from memforensics._errors import ConfigError
from memforensics.backends._protocol import DeviceBackend
from memforensics.backends.none import NoneBackend
from memforensics.capture.config import (
    ForensicsConfig,
    blame_environment,
    build_config,
    resolve_rank,
    resolve_world_size,
)
from memforensics.capture.dumps import Dumper
from memforensics.capture.health import (
    CaptureStatus,
    OutDir,
    mark_installer,
    unmark_installer,
    worker_of_installer,
)
from memforensics.capture.journal import Journal, JournalSchedule
from memforensics.capture.log import guarded, safe_log, warn_once
from memforensics.capture.near_oom import NearOomCheck
from memforensics.capture.oom import REGISTRY, OomGuard, is_oom_error
from memforensics.capture.oom_capture import OomCapture
from memforensics.capture.sidecar import SidecarContext
from memforensics.capture.track import Finder, Tracker
from memforensics.capture.window import HistorySwitch, Window, WindowSchedule

_install_lock = threading.RLock()
_current: MemoryForensics | None = None


class MemoryForensics:
    """The process-wide flight recorder; create it with ``memforensics.install()``."""

    def __init__(
        self,
        config: ForensicsConfig,
        *,
        backend: DeviceBackend | None = None,
        worker: str | None = None,
    ) -> None:
        """``worker``: why this process is a worker of the training process (then it is inert);
        ``install()`` decides it (``health.worker_of_installer``)."""
        self.config = config
        self.rank = resolve_rank(config.rank)
        self.world_size = resolve_world_size()
        self.out_dir = Path(config.out_dir).expanduser().resolve()
        self._worker = worker
        self.capturing = worker is None and config.captures(self.rank)
        self.closed = False
        self.oom_attached = False
        self._device_ready = False  # set once the backend proved available at install
        self.current_step: int | None = None
        self._last_step: int | None = None
        self._depth = 0
        self._fired_at_enter = 0
        self._schedule: WindowSchedule | None = None
        self._annotate = False
        self._begin_window: Callable[[int], bool] | None = None
        self._end_window: Callable[[], Window | None] | None = None
        self._tag: Callable[[str], object] | None = None
        """The backend's metadata setter, bound once: None when steps are not annotated."""
        self._guard = OomGuard(config.max_oom_snapshots)
        self._step_context = StepContext(self)
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self.backend: DeviceBackend = NoneBackend()
        self._journal = JournalSchedule(None, None, device=self.backend.name, rank=self.rank)
        self._dumper: Dumper | None = None
        self._history: HistorySwitch | None = None
        self._oom: OomCapture | None = None
        self._near = _near_oom_check(config, self.backend, None)
        self._tracker = Tracker()
        self._out = OutDir(self.out_dir, self.rank)
        if not self.capturing:
            self._log_worker()
            return  # fully inert: no observer, no history, no files
        self._prepare_out_dir()
        self.backend = backend if backend is not None else _create_backend(config.device)
        context = SidecarContext.collect(
            rank=self.rank,
            world_size=self.world_size,
            device=self.backend.name,
            torch_version=self.backend.framework_version(),
        )
        self._dumper = Dumper(
            config, self.out_dir, self.rank, self.backend, context, ready=self._out.ready
        )
        self._dumper.tracking(self._tracker)
        if not self.backend.available():
            self._warn_unavailable()
            return
        self._device_ready = True
        if config.journal_every is not None:
            self._journal = JournalSchedule(
                self._dumper.named_by(Journal(self.out_dir, self.rank, self.backend.journal_stats)),
                config.journal_every,
                device=self.backend.name,
                rank=self.rank,
                ready=self._out.ready,
            )
        if config.records_windows(self.rank) and config.steps is not None:
            self._schedule = WindowSchedule(
                config.steps,
                every=config.every,
                skip_first=config.skip_first,
                max_windows=config.max_windows,
            )
            self._begin_window = self._schedule.begin
            self._end_window = self._schedule.end
        self._start_capture(config, self._dumper)
        atexit.register(self._at_exit)

    def _start_capture(self, config: ForensicsConfig, dumper: Dumper) -> None:
        """Start history, step tags, the OOM observer and the near-OOM check."""
        self._history = HistorySwitch(self.backend, config, self.rank)
        self._history.start()
        self._annotate = (
            config.annotate_steps
            and self._try("annotate_unsupported", self.backend.set_step_metadata, "") is True
        )
        if self._annotate:
            self._tag = self.backend.set_step_metadata
        self._oom = OomCapture(self.backend, dumper, self._journal, self._guard)
        self._near = _near_oom_check(config, self.backend, dumper)
        self._near.start()
        if config.oom:
            self.oom_attached = self._oom.attach(self._on_oom_observer)

    # -- install-time helpers ------------------------------------------------------------------
    def _prepare_out_dir(self) -> None:
        """A path the user may not write is a config error; a disk that takes no files
        (full, over quota, read-only) only pauses capture (``health.OutDir``)."""
        try:
            self._out.prepare()
        except OSError as exc:
            raise ConfigError(
                f"memforensics: invalid config field 'out_dir': cannot create or write "
                f"{str(self.out_dir)!r} ({exc.strerror or exc})",
                field="out_dir",
            ) from None

    def _log_worker(self) -> None:
        if self._worker is not None:
            safe_log("debug", "inert_worker", reason=self._worker, pid=os.getpid())

    def _warn_unavailable(self) -> None:
        if self.config.device == "none":
            return  # asked for nothing, gets nothing: not worth a warning
        dry_run = (
            "device='sim' (memforensics run --device sim) makes a dry run on a simulated device"
        )
        if self.config.device == "auto":
            reason = f"no CUDA or NPU device found; memforensics will capture nothing; {dry_run}"
        else:
            reason = (
                f"device {self.config.device!r} is not available; nothing will be captured;"
                f" {dry_run}"
            )
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
    def step(self, step: int | None = None) -> StepContext | NullStep:
        """Context manager around one training step; ``step`` defaults to the last one + 1."""
        if not self._device_ready or self.closed:
            return NULL_STEP  # an inert rank, or no device: nothing a step could capture
        context = self._step_context
        context.number = step
        return context

    def begin_step(self, number: int | None) -> None:
        """Start step ``number`` (None: the last one + 1): what entering ``step()`` does.

        Never raises. A step entered inside another is ignored, with a warning.
        """
        try:
            depth = self._depth + 1
            self._depth = depth
            if depth > 1:
                self._nested_step()
                return
            last = self._last_step
            if number is None:
                number = 0 if last is None else last + 1
            elif last is not None and number <= last:
                number = self._step_not_increasing(number, last)
            self._last_step = self.current_step = number
            self._fired_at_enter = self._guard.fired
            begin = self._begin_window
            if begin is not None and begin(number):
                self._window_opened()
            tag = self._tag
            if tag is not None:
                tag(f"step={number}")
        except Exception as exc:  # noqa: BLE001 - nothing raises into training
            warn_once("step_enter_failed", "step_enter_failed", error=repr(exc))

    def end_step(self, exc: BaseException | None) -> None:
        """End the step begun last: what leaving ``step()`` does, ``exc`` being what left it.

        Never raises, and never swallows ``exc``: an OOM error no observer saw is dumped here.
        """
        depth = self._depth
        try:
            if depth > 1:
                return
            if exc is not None and self._guard.fired == self._fired_at_enter and is_oom_error(exc):
                self._oom_raised(exc)
            end = self._end_window
            if end is not None:
                window = end()
                if window is not None:
                    self._window_ended(window)
            if self.current_step >= self._journal.next_step:  # type: ignore[operator] # set by begin_step
                self._journal.line("step", self.current_step)
            if self.current_step >= self._near.next_step:  # type: ignore[operator] # set by begin_step
                self._near.check(self.current_step, self._guard.fired)  # type: ignore[arg-type]
            tag = self._tag
            if tag is not None:
                tag("")
        except Exception as error:  # noqa: BLE001
            warn_once("step_exit_failed", "step_exit_failed", error=repr(error))
        finally:
            depth -= 1
            if depth <= 0:
                depth = 0
                self.current_step = None
            self._depth = depth

    def _window_opened(self) -> None:
        if self._history is not None:
            self._history.open_window()

    def _window_ended(self, window: Window) -> None:
        """Dump the window that just ended, narrow history again, journal it."""
        if self._dumper is not None:
            self._dumper.window(window)
        if self._history is not None:
            self._history.close_window()
        self._journal.line("window", self.current_step)

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

    # -- OOM -----------------------------------------------------------------------------------
    def _on_oom_observer(
        self, device: int, allocation_bytes: int, device_total_bytes: int, device_free_bytes: int
    ) -> None:
        """The registry calls this from inside the allocator's failing malloc, with the failing
        device, the allocator's allocation size, the limit and the driver's free bytes."""
        if self.closed or self._oom is None:
            return
        self._oom.observed(
            self.current_step, device, allocation_bytes, device_total_bytes, device_free_bytes
        )

    def _oom_raised(self, exc: BaseException) -> None:
        if self._oom is not None:
            self._oom.raised(exc, self.current_step)

    # -- tracked models and optimizers ---------------------------------------------------------
    def track(
        self, *, model: object = None, optimizer: object = None, finder: Finder | None = None
    ) -> MemoryForensics:
        """Record the tensors of ``model`` and ``optimizer`` in every later dump's sidecar.

        Each takes a module or an optimizer, or any iterable of them; they are held by weak
        reference (tracking never keeps a model alive) and add to what is tracked already.
        ``finder``: called at each dump, it returns ``(modules, optimizers)`` found alive then,
        tracked for that dump too. Walked only when a dump is written. Raises ConfigError for
        anything else; returns ``self``.
        """
        self._tracker.add(model, optimizer)
        if finder is not None:
            self._tracker.find_with(finder)
        return self

    @property
    def tracked(self) -> tuple[list[Any], list[Any]]:
        """The tracked modules and optimizers still alive."""
        return self._tracker.modules, self._tracker.optimizers

    @property
    def finders(self) -> list[Finder]:
        """The finders given to :meth:`track`, in the order given."""
        return list(self._tracker.finders)

    # -- manual dumps ------------------------------------------------------------------------------
    def dump(self) -> Path | None:
        """Write a snapshot now (sidecar kind ``"manual"``); the path, or None if nothing."""
        if not self._device_ready or self.closed or self._dumper is None:
            return None
        return self._dumper.manual(self.current_step)

    @property
    def dumps(self) -> list[Path]:
        """Snapshot files this facade wrote, in the order they landed (retention removes the
        deleted ones). Waits for a window dump still being written in the background."""
        dumper = self._dumper
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
            dumper = self._dumper
            if dumper is not None:
                window = self._schedule.close() if self._schedule is not None else None
                if window is not None:
                    dumper.window(window, may_fork=False)
                dumper.flush()  # evidence lands before the interpreter exits
            self._journal.close(self._last_step)
            if self._history is not None:
                self._history.stop()
            if self._annotate:
                self._try("annotate_failed", self.backend.set_step_metadata, "")
            REGISTRY.clear_handler(self._on_oom_observer)
        except Exception as exc:  # noqa: BLE001
            warn_once("close_failed", "close_failed", error=repr(exc))

    def _at_exit(self) -> None:
        self.close()

    @property
    def status(self) -> CaptureStatus:
        """Whether this process captures, why not, and whether ``out_dir`` took files at the
        last attempt. Reading it touches neither the device nor the disk."""
        inert = None
        if self._worker is not None:
            inert = self._worker
        elif self.closed:
            inert = "closed"
        elif not self.capturing:
            inert = "rank not selected"
        elif not self._device_ready:
            inert = "device unavailable"
        return CaptureStatus(
            capturing=inert is None,
            inert=inert,
            out_dir=self.out_dir,
            out_dir_error=self._out.blocked,
        )

    def _owned(self) -> bool:
        """True in the process that built this facade (not in a child that inherited it)."""
        return os.getpid() == self._pid

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


def _near_oom_check(
    config: ForensicsConfig, backend: DeviceBackend, dumper: Dumper | None
) -> NearOomCheck:
    """The near-OOM check of a facade: one that never runs without a dumper."""
    return NearOomCheck(
        backend,
        dumper,
        enabled=config.near_oom,
        every=config.near_oom_every,
        fraction=config.near_oom_fraction,
        max_snapshots=config.max_near_oom_snapshots,
    )


def _create_backend(device: str) -> DeviceBackend:
    from memforensics.backends._select import create_backend

    return create_backend(device)


def install(*, model: object = None, optimizer: object = None, **config: Any) -> MemoryForensics:
    """Validate ``config`` (ForensicsConfig fields, over ``MEMFORENSICS_*`` env vars) and start.

    The same configuration returns the live facade; a different one closes it first. A process
    attaches at most one OOM observer per device hook, ever. ``model`` and ``optimizer`` (a
    module or an optimizer, or iterables of them) are not configuration: they are tracked by
    the facade returned (``MemoryForensics.track``), whichever it is; a facade that replaces
    another keeps tracking what the old one tracked.
    """
    global _current  # noqa: PLW0603 - the process-wide facade is the design
    validated = build_config(config)
    Tracker().add(model, optimizer)  # a wrong argument fails before anything is replaced
    with _install_lock:
        live = _current
        worker = _worker_reason(config, live)
        if _still_current(live, validated, worker):
            return live.track(model=model, optimizer=optimizer)  # type: ignore[union-attr] # _still_current checked it
        kept: tuple[list[Any], list[Any]] = ([], [])
        finders: list[Finder] = []
        if live is not None:
            kept = live.tracked  # the process's models outlive a configuration
            finders = live.finders
            live.close()
            _current = None
        try:
            _current = MemoryForensics(validated, worker=worker)
        except ConfigError as exc:
            raise blame_environment(exc, explicit=config) from None
        if worker is None:
            mark_installer()
        _current.track(model=kept[0], optimizer=kept[1])
        for finder in finders:
            _current.track(finder=finder)
        return _current.track(model=model, optimizer=optimizer)


def _still_current(
    live: MemoryForensics | None, validated: ForensicsConfig, worker: str | None
) -> bool:
    """The live facade answers ``install()`` again: same config, built by this process, and
    still right about being a worker (a worker that became a rank installs afresh)."""
    if live is None or live.closed or live.config != validated or not live._owned():
        return False
    return (live._worker is None) == (worker is None)


def _worker_reason(explicit: dict[str, Any], live: MemoryForensics | None) -> str | None:
    """Why this process is a worker of one that installed memforensics (None: it is not)."""
    inherited = live._pid if live is not None else None
    return worker_of_installer(explicit_rank=explicit.get("rank") is not None, inherited=inherited)


def uninstall() -> None:
    """Close the live facade, if any (the observer stays attached but goes quiet)."""
    global _current  # noqa: PLW0603
    with _install_lock:
        if _current is not None:
            _current.close()
            _current = None
        unmark_installer()


def current() -> MemoryForensics | None:
    """The live facade, if ``install()`` was called and it is not closed."""
    facade = _current
    return facade if facade is not None and not facade.closed else None


class NullStep:
    """The step context of a rank that captures nothing: as cheap as a context can be."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> Literal[False]:
        return False


NULL_STEP = NullStep()


class StepContext:
    """``with mf.step(n):`` for a capturing rank: ``begin_step`` on entry, ``end_step`` on exit.

    A facade makes one and hands it out on every ``step()`` call with the step ``number`` set:
    no object is built per training step. The number is read on entry, so a step entered inside
    another (which the facade ignores, with a warning) cannot disturb the outer one.
    """

    __slots__ = ("_facade", "number")

    def __init__(self, facade: MemoryForensics) -> None:
        self._facade = facade
        self.number: int | None = None

    def __enter__(self) -> None:
        self._facade.begin_step(self.number)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        self._facade.end_step(exc)
        return False  # never swallow: the user's exception leaves unchanged
