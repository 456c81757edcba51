"""Error types raised by memforensics.

Only ``install()`` (and direct construction of a config) ever raises: everything that can go
wrong while training runs is logged as a warning instead, because forensics must never be the
thing that breaks a job.
"""

from __future__ import annotations


class ForensicsError(Exception):
    """Base class of every error memforensics raises on purpose."""


class ConfigError(ForensicsError, ValueError):
    """A configuration value is invalid; the message names the field or environment variable."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class BackendError(ForensicsError):
    """A device backend cannot do what was asked (no device, no OOM hook, attach refused)."""


class SnapshotLoadError(ForensicsError, ValueError):
    """A snapshot or sidecar file is missing, corrupt, truncated, hostile or wrongly shaped."""
