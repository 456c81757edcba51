"""Structured logging through structlog.

If the application configured structlog, memforensics events go through that configuration, so
they land wherever the team's other events land. Otherwise they are rendered as one line each
on stderr (never stdout, which training scripts often pipe as data), at INFO and above, or at
the level named by ``MEMFORENSICS_LOG_LEVEL``: as ``key=value`` pairs with a timestamp where
stderr is a file or a pipe (what log shippers parse), and as a sentence where a person reads
it on a terminal (``memforensics error: out of memory (device sim, allocation 20.00 MiB, ...)``).
``warn_once`` exists because a warning repeated every step is noise that hides the one that
matters.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import structlog

from memforensics._text import printable
from memforensics._units import format_bytes

_LOGGER_NAME = "memforensics"
_warned: set[str] = set()
_lock = threading.Lock()
_fallback: Any = None


def _level() -> int:
    name = os.environ.get("MEMFORENSICS_LOG_LEVEL", "INFO").upper()
    level = logging.getLevelName(name)
    return level if isinstance(level, int) else logging.INFO


def _on_terminal() -> bool:
    """True when stderr is a terminal a person reads."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without it, or closed
        return False


def human_line(_logger: object, _method: str, event: dict[str, Any]) -> str:
    """One event as a sentence: ``memforensics warning: device unavailable: <reason> (device
    auto, rank 0)``; sizes (``*_bytes``) as sizes, unknown fields left out, no timestamp."""
    fields = {key: value for key, value in event.items() if value is not None}
    level = fields.pop("level", "info")
    name = str(fields.pop("event", "")).replace("_", " ")
    for quiet in ("logger", "timestamp"):
        fields.pop(quiet, None)
    reason = fields.pop("reason", None) or fields.pop("error", None)
    head = f"memforensics {level}: {name}" + (f": {reason}" if reason else "")
    rest = ", ".join(f"{_words(key)} {_shown(key, value)}" for key, value in fields.items())
    return head + (f" ({rest})" if rest else "")


def _words(key: str) -> str:
    return key.removesuffix("_bytes").replace("_", " ")


def _shown(key: str, value: object) -> str:
    if key.endswith("_bytes") and type(value) is int:
        return format_bytes(value)
    return str(value)


def _stderr_logger() -> Any:
    """A private logger for when the application has not configured structlog itself: a
    sentence per event on a terminal, ``key=value`` pairs with a timestamp elsewhere."""
    processors: list[Any] = [structlog.processors.add_log_level]
    if _on_terminal():
        processors.append(human_line)
    else:
        processors += [
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.KeyValueRenderer(
                key_order=["timestamp", "level", "logger", "event"], drop_missing=True
            ),
        ]
    return structlog.wrap_logger(
        structlog.PrintLogger(sys.stderr),
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_level()),
    ).bind(logger=_LOGGER_NAME)


def get_logger() -> Any:
    """The logger every memforensics event goes through."""
    global _fallback  # noqa: PLW0603 - one lazily built process-wide logger
    if structlog.is_configured():
        return structlog.get_logger(_LOGGER_NAME)
    with _lock:
        if _fallback is None:
            _fallback = _stderr_logger()
        return _fallback


def safe_log(level: str, event: str, **fields: Any) -> None:
    """Log without ever raising: a broken logging setup must not break training."""
    with contextlib.suppress(Exception):  # a broken logger must not break training
        shown = {key: printable(v) if isinstance(v, str) else v for key, v in fields.items()}
        getattr(get_logger(), level)(event, **shown)


def guarded(what: str, fn: Callable[..., Any], *args: Any, **context: Any) -> Any:
    """Run ``fn(*args)``; if it raises, warn once under ``what`` (with ``context``), return None.

    The one shape every run-time step of the library takes: a failure is a warning, not an
    exception in the training loop.
    """
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - run-time failures become warnings
        warn_once(
            f"{what}:{type(exc).__name__}", what, error=f"{type(exc).__name__}: {exc}", **context
        )
        return None


def warn_once(key: str, event: str, **fields: Any) -> None:
    """Log a warning the first time ``key`` is seen in this process, and never again."""
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    safe_log("warning", event, **fields)


def reset_logging() -> None:
    """Forget one-time warnings and the cached logger (tests, and re-reading the level)."""
    global _fallback  # noqa: PLW0603
    with _lock:
        _warned.clear()
        _fallback = None
