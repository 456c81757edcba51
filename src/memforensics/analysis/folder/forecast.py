"""When a drifting rank runs out: a robust line through its live plus outside-PyTorch bytes.

A rank that keeps a little more memory every step fails at a step one can see coming. The
forecast fits the last ``WINDOW`` journal points of live bytes (``allocated_bytes``) plus the
memory outside PyTorch (``external_bytes``) against the step, and says at which step the line
reaches the rank's limit (``device_total_bytes``).

Three guards keep it from crying wolf:

* **Robust slope.** Theil-Sen: the median of the slopes between every pair of points, so a few
  spikes cannot tilt it. The noise is the median absolute deviation of the residuals.
* **Significance.** The rise the line predicts over the window, in units of what the noise could
  fake (``z``), must be at least ``MIN_Z``. A steady rank with noise has a slope near zero and
  a small ``z``: no forecast.
* **One line, not one jump.** The window's first and second halves are fitted apart; each must
  grow at ``MIN_AGREEMENT`` of the whole window's slope at least. A one-off jump leaves one
  half flat (a line through a step change fits neither side), so it gives no forecast.

``confidence`` (0..1) is ``(1 - exp(-z / 10)) * agreement``, ``agreement`` being the smaller
half's slope over the larger one's: 1 for a clean line seen well above its noise, lower when
the noise is close to the trend or the halves disagree. Pure: points in, a forecast out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

WINDOW = 32
"""Journal points the fit uses: the newest ones (older drift may have stopped)."""
MIN_POINTS = 8
"""Fewer points than this give no forecast: halves of four points are the least to compare."""
MIN_Z = 6.0
"""The predicted rise over the window must be at least this many noise units."""
MIN_AGREEMENT = 0.25
"""Each half of the window must grow at this share of the whole window's slope at least."""


@dataclass(frozen=True, slots=True)
class Forecast:
    """A rank's line of live plus outside-PyTorch bytes, and the step it reaches the limit."""

    rank: int
    step: int
    """The step at which the fitted line reaches ``device_total_bytes``."""
    growth_per_step: float
    """Bytes the line gains per step."""
    confidence: float
    """0..1: how far the trend stands above the noise, times how well the halves agree."""
    device_total_bytes: int
    last_step: int
    """The newest step the journal shows."""
    last_bytes: int
    """Live plus outside-PyTorch bytes on the fitted line at ``last_step``."""
    steps_left: int
    """Steps from the last one seen to the forecast step."""
    points: int


def theil_sen(xs: Sequence[int], ys: Sequence[float]) -> float | None:
    """The median of the slopes between every pair of points with different x; None if none."""
    slopes = [
        (ys[j] - ys[i]) / (xs[j] - xs[i])
        for i in range(len(xs))
        for j in range(i + 1, len(xs))
        if xs[j] != xs[i]
    ]
    return median(slopes) if slopes else None


@dataclass(frozen=True, slots=True)
class Line:
    """A significant, steady upward line through a column's journal points (the module's
    guards): what it gains a step, over which steps, and how sure it is."""

    growth_per_step: float
    intercept: float
    first_step: int
    last_step: int
    points: int
    confidence: float
    """0..1, as :class:`Forecast`'s."""

    def at(self, step: int) -> float:
        """The line's bytes at ``step``."""
        return self.intercept + self.growth_per_step * step


def fit_line(steps: Sequence[int], values: Sequence[int]) -> Line | None:
    """The line through the newest ``WINDOW`` points of ``values`` over ``steps`` (a step's
    last value wins), or None when there is no significant, steady upward line."""
    points: dict[int, int] = {}
    for step, value in zip(steps, values, strict=True):
        points[step] = value  # a step's last line wins (an OOM line, then its step line)
    xs = sorted(points)[-WINDOW:]
    n = len(xs)
    if n < MIN_POINTS:
        return None
    ys = [float(points[x]) for x in xs]
    slope = theil_sen(xs, ys)
    if slope is None or slope <= 0:
        return None
    intercept = median(y - slope * x for x, y in zip(xs, ys, strict=True))
    noise = 1.4826 * median(abs(y - intercept - slope * x) for x, y in zip(xs, ys, strict=True))
    span = xs[-1] - xs[0]
    # The slope of n evenly spread points with noise sigma varies by about sigma*sqrt(12/n)/span.
    z = math.inf if noise == 0 else slope * span / (noise * math.sqrt(12 / n))
    if z < MIN_Z:
        return None
    half = n // 2
    first, second = theil_sen(xs[:half], ys[:half]), theil_sen(xs[half:], ys[half:])
    if first is None or second is None or min(first, second) < MIN_AGREEMENT * slope:
        return None
    agreement = min(first, second) / max(first, second)
    confidence = (1.0 - math.exp(-z / 10.0)) * agreement if z != math.inf else agreement
    return Line(slope, intercept, xs[0], xs[-1], n, round(confidence, 3))


def forecast_line(
    rank: int, steps: Sequence[int], used: Sequence[int], limit: int
) -> Forecast | None:
    """The forecast for ``used`` bytes (live plus outside PyTorch) over ``steps``, or None when
    there is no significant, steady upward line (see the module's guards)."""
    line = fit_line(steps, used) if limit > 0 else None
    if line is None:
        return None
    slope, last = line.growth_per_step, line.last_step
    on_line = line.at(last)
    reach = last + max(math.ceil((limit - on_line) / slope), 0)
    return Forecast(
        rank=rank,
        step=int(reach),
        growth_per_step=slope,
        confidence=line.confidence,
        device_total_bytes=limit,
        last_step=last,
        last_bytes=int(on_line),
        steps_left=max(int(reach) - last, 0),
        points=line.points,
    )


def forecast_columns(
    rank: int,
    steps: Sequence[int],
    allocated: Sequence[int],
    external: Sequence[int],
    limits: Sequence[int],
    missing: int,
) -> Forecast | None:
    """The forecast of one process's journal columns: allocated plus external bytes against its
    newest limit; ``missing`` marks a null in the columns.

    Lines without a step or allocated bytes are left out; outside-PyTorch bytes count as 0 where
    unknown (the line then underestimates, and the forecast comes later, not sooner).
    """
    known = [v for v in limits if v != missing]
    if not known:
        return None
    xs: list[int] = []
    used: list[int] = []
    for step, live, outside in zip(steps, allocated, external, strict=True):
        if missing in (step, live):
            continue
        xs.append(step)
        used.append(live + (outside if outside != missing else 0))
    return forecast_line(rank, xs[-2 * WINDOW :], used[-2 * WINDOW :], known[-1])
