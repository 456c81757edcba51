"""The suite's Hypothesis profile: an example passes or fails on what it computes, never on time."""

from __future__ import annotations

from hypothesis import HealthCheck, settings


def test_no_example_fails_for_taking_long() -> None:
    """No wall-clock deadline and no too-slow health check: a busy CI machine fails no example."""
    assert settings.default.deadline is None
    assert HealthCheck.too_slow in settings.default.suppress_health_check
