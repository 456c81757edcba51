"""The forecast: a known slope is found, steady noise and a one-off jump are not trends."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from memforensics.analysis.folder import build_overview, overview_text
from memforensics.analysis.folder.forecast import forecast_line
from memforensics.analysis.report import render_overview
from memforensics.analysis.schema import to_json
from memforensics.testing import write_journals

GIB = 1 << 30
MIB = 1 << 20


def test_synthetic_journals_forecast_the_known_slope_within_ten_percent(tmp_path: Path) -> None:
    """The leaking rank's growth and the step its line reaches the limit are within 10 % of the
    workload's own; steady ranks wobbling by 256 MiB a line get no forecast."""
    truth = write_journals(
        tmp_path, ranks=8, lines=60, every=10, leak_rank=3, leak_per_line=64 * MIB,
        jitter=256 * MIB, base=40 * GIB, limit=80 * GIB, leak_fails=False,
    )  # fmt: skip
    view = build_overview(tmp_path, workers=1)
    assert [f.rank for f in view.forecasts] == [3]
    (item,) = view.forecasts
    slope = truth.leak_per_line / truth.every  # bytes per step, by construction
    assert item.growth_per_step == pytest.approx(slope, rel=0.10)
    # live + outside = held + jitter/2 (on average) + leak * line + 1 GiB outside PyTorch
    level = truth.held[3] + 128 * MIB + GIB
    crossing = (80 * GIB - level) / truth.leak_per_line * truth.every
    assert item.step == pytest.approx(crossing, rel=0.10)
    assert 0.0 < item.confidence <= 1.0
    ranks = to_json(build_overview(tmp_path, workers=1))["ranks"]
    assert [r["forecast"] is not None for r in ranks] == [r["rank"] == 3 for r in ranks]
    assert "rank 3 reaches its 80.00 GiB limit near step" in overview_text(view)


def test_the_page_carries_the_forecast(tmp_path: Path) -> None:
    """The overview page states the forecast in its facts and holds it in the rank's data."""
    write_journals(
        tmp_path, ranks=4, lines=40, every=10, leak_rank=1, leak_per_line=64 * MIB,
        leak_fails=False,
    )  # fmt: skip
    view = build_overview(tmp_path, workers=1)
    page = render_overview(view)
    assert "forecast: rank 1 reaches its 80.00 GiB limit near step" in page
    assert '"forecast":{"rank":1,"step":' in page.replace(" ", "")


def test_a_rank_that_ran_out_gets_no_forecast(tmp_path: Path) -> None:
    """The leaking rank failed at its last step: it is named as the first OOM and given no
    forecast, since the limit it would reach is behind it."""
    truth = write_journals(tmp_path, ranks=4, lines=40, every=10, leak_rank=1)
    view = build_overview(tmp_path, workers=1)
    assert view.first_oom is not None
    assert (view.first_oom.rank, view.first_oom.step) == (1, truth.oom_step)
    assert view.forecasts == ()
    rank = view.rank(1)
    assert rank is not None
    assert rank.forecast is None
    text = overview_text(view)
    assert "reaches its" not in text
    assert "forecast: none (no rank that has not run out" in text


@pytest.mark.parametrize("seed", range(40))
def test_steady_noisy_rank_gets_no_forecast(seed: int) -> None:
    """A level with uniform noise (no drift) is never forecast, whatever the draw."""
    rng = random.Random(seed)
    steps = list(range(0, 3200, 100))
    used = [40 * GIB + rng.randrange(0, 512 * MIB) for _ in steps]
    assert forecast_line(0, steps, used, 80 * GIB) is None


@pytest.mark.parametrize("at", [4, 10, 16, 22, 28])
@pytest.mark.parametrize("noise", [0, 32 * MIB])
def test_one_off_jump_is_not_a_trend(at: int, noise: int) -> None:
    """A level that jumps once by 8 GiB and stays is not forecast, wherever the jump falls."""
    rng = random.Random(at)
    steps = list(range(32))
    used = [
        40 * GIB + (8 * GIB if i >= at else 0) + (rng.randrange(0, noise) if noise else 0)
        for i in steps
    ]
    assert forecast_line(0, steps, used, 80 * GIB) is None


def test_a_clean_line_is_forecast_where_it_meets_the_limit() -> None:
    """A noiseless line of +10 MiB a step from 1 GiB meets a 2 GiB limit at step 102.4 -> 103."""
    steps = list(range(0, 40))
    used = [GIB + 10 * MIB * s for s in steps]
    item = forecast_line(7, steps, used, 2 * GIB)
    assert item is not None
    assert (item.rank, item.step, item.growth_per_step) == (7, 103, 10 * MIB)
    assert item.confidence == 1.0


def test_a_falling_or_short_series_gets_none() -> None:
    """A shrinking rank, and fewer than eight points, give no forecast."""
    assert forecast_line(0, list(range(20)), [GIB - s * MIB for s in range(20)], 2 * GIB) is None
    assert forecast_line(0, list(range(5)), [GIB + s * MIB for s in range(5)], 2 * GIB) is None
