"""Shared test set-up: every test starts and ends with no facade, observer route or warnings,
and Hypothesis judges examples on what they compute, never on how long they took."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

import memforensics
import memforensics.capture.log
import memforensics.capture.oom

# Hypothesis' default 200 ms deadline and its too-slow health check measure wall-clock time: on a
# loaded CI machine a descheduled example fails them (or is reported Flaky) whatever it computes.
# Derandomized, every run draws the same examples: a property test fails on the change that
# breaks it, never later on a lucky draw (a case a draw once found is kept with @example).
settings.register_profile(
    "memforensics",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.load_profile("memforensics")


@pytest.fixture(autouse=True)
def _own_analysis_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test (and the console scripts it starts) caches analysis answers in its own fresh
    folder, never the user's ~/.cache, and never sees another test's answers."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


@pytest.fixture(autouse=True)
def _reset_global_state() -> Iterator[None]:
    """Uninstall, forget OOM routes and reset logging around each test."""
    memforensics.capture.log.reset_logging()
    yield
    memforensics.uninstall()
    memforensics.capture.oom.REGISTRY.forget()
    memforensics.capture.log.reset_logging()
