"""Helpers the integrations share: the missing-extra message and the open-step holder."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memforensics._errors import ConfigError
from memforensics.capture.config import ForensicsConfig, build_config
from memforensics.capture.facade import MemoryForensics, install
from memforensics.capture.log import warn_once


def missing_extra_error(
    exc: ModuleNotFoundError, *, package: str, module: str, what: str, extra: str
) -> ImportError | None:
    """The ImportError to raise when ``exc`` says ``package`` is absent, else None (then
    something inside an installed package is broken, and its own error says more)."""
    name = exc.name or ""
    if name != package and not name.startswith(package + "."):
        return None
    return ImportError(
        f"{module} needs {what}, which is not installed. "
        f'Install it with: pip install "memforensics[{extra}]"'
    )


def options_from(config: ForensicsConfig | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """``install()`` keywords from a ``ForensicsConfig`` and/or keywords; validated now, so a
    typo fails when the callback is built rather than when training starts."""
    merged: dict[str, Any] = {}
    if config is not None:
        merged.update(config.model_dump())
    merged.update(options)
    build_config(merged)
    return merged


class StepHolder:
    """One ``mf.step()`` kept open across two framework hooks (batch start, batch end).

    Frameworks call "begin" and "end" as separate callbacks, so the context manager is entered
    and exited by hand. A "begin" that finds a step still open ends it first (a hook the
    framework skipped must not nest every later step inside it).
    """

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = dict(options)
        self.facade: MemoryForensics | None = None
        self._open: Any = None

    def install(self) -> MemoryForensics:
        """Install (or pick up the identical live) facade."""
        self.facade = install(**self.options)
        return self.facade

    def track(self, model: object = None, optimizer: object = None) -> None:
        """Track the framework's model and optimizers; what cannot be tracked (a wrapper of
        another shape) is left out with a warning: tracking never stops training."""
        if self.facade is None:
            return
        for keyword, value in (("model", model), ("optimizer", optimizer)):
            try:
                if keyword == "model":
                    self.facade.track(model=value)
                else:
                    self.facade.track(optimizer=value)
            except ConfigError as exc:
                warn_once(f"track:{keyword}", "track_skipped", reason=str(exc))

    def begin(self, number: int | None) -> None:
        """Enter ``mf.step(number)``."""
        self.end()
        if self.facade is None:
            return
        context = self.facade.step(number)
        context.__enter__()
        self._open = context

    def end(self, exc: BaseException | None = None) -> None:
        """Exit the open step; ``exc`` is the exception that ended it, if one did."""
        context, self._open = self._open, None
        if context is not None:
            context.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)

    def close(self, exc: BaseException | None = None) -> None:
        """End the open step and close the facade (a partial window is dumped)."""
        self.end(exc)
        facade, self.facade = self.facade, None
        if facade is not None:
            facade.close()
