"""Shared test set-up: every test starts and ends with no facade, observer route or warnings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import memforensics
import memforensics.capture.log
import memforensics.capture.oom


@pytest.fixture(autouse=True)
def _reset_global_state() -> Iterator[None]:
    """Uninstall, forget OOM routes and reset logging around each test."""
    memforensics.capture.log.reset_logging()
    yield
    memforensics.uninstall()
    memforensics.capture.oom.REGISTRY.forget()
    memforensics.capture.log.reset_logging()
