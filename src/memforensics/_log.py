"""Structured logging through structlog.

Every event the library emits goes through :func:`get_logger` so users can route memforensics
events with their own structlog or stdlib logging configuration. ``warn_once`` exists because
a warning that repeats every training step is noise that hides the one that matters.
"""

from __future__ import annotations

import threading
from typing import Any

import structlog

_LOGGER_NAME = "memforensics"
_warned: set[str] = set()
_warned_lock = threading.Lock()


def get_logger(**initial: Any) -> Any:
    """Return the library's bound structlog logger."""
    return structlog.get_logger(_LOGGER_NAME).bind(**initial)


def warn_once(key: str, event: str, **fields: Any) -> None:
    """Log a warning the first time ``key`` is seen in this process, and never again."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    safe_log("warning", event, **fields)


def safe_log(level: str, event: str, **fields: Any) -> None:
    """Log without ever raising: a broken logging setup must not break training."""
    try:
        getattr(get_logger(), level)(event, **fields)
    except Exception:  # noqa: BLE001 - logging failures are swallowed by design
        pass


def reset_warnings() -> None:
    """Forget which one-time warnings were given (for tests and re-installs)."""
    with _warned_lock:
        _warned.clear()
