"""Hand-written inline SVG for the report: a line chart and a segment map.

memforensics depends on pydantic and structlog only, and a report must open on an air-gapped
training node, so no plotting library and no script: a few hundred lines of SVG text do the job,
stay small, and render in any browser. Every string from a snapshot is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from memforensics.analysis._model import INACTIVE, PENDING_FREE, Segment
from memforensics.analysis._units import format_bytes

COLORS = {"allocated": "#3b6fb6", "reserved": "#e08a2c", "pending": "#d9b43a", "free": "#eceff3"}
_PAD_LEFT, _PAD_BOTTOM, _PAD_TOP = 78, 34, 10


def _ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values in bytes: 1/2/5 x 10^n of a binary unit (KiB, MiB or GiB)."""
    if top <= 0:
        return [0.0]
    unit = next((u for u in (1 << 30, 1 << 20, 1 << 10) if top >= 2 * u), 1)
    raw = top / unit / count
    magnitude = 10.0 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw) * unit
    return [step * i for i in range(int(top / step) + 1)]


def line_chart(
    series: Sequence[tuple[str, str, Sequence[float], Sequence[int]]],
    *,
    x_label: str,
    markers: Sequence[float] = (),
    width: int = 900,
    height: int = 260,
) -> str:
    """Polylines of (label, color, xs, ys in bytes) with a byte-scaled y axis and OOM markers."""
    xs = [x for _, _, sx, _ in series for x in sx]
    ys = [y for _, _, _, sy in series for y in sy]
    if len(xs) < 2 * len(series):
        return '<p class="muted">No allocator history in this dump (recording was off).</p>'
    x0 = min(xs)
    x1 = max(*xs, x0 + 1e-9)
    y1 = max(*ys, 1)
    plot_w, plot_h = width - _PAD_LEFT - 10, height - _PAD_BOTTOM - _PAD_TOP

    def px(x: float) -> float:
        return _PAD_LEFT + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return _PAD_TOP + plot_h - y / y1 * plot_h

    parts = [f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">']
    for tick in _ticks(y1):
        y = py(tick)
        parts.append(
            f'<line x1="{_PAD_LEFT}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
        )
        parts.append(
            f'<text x="{_PAD_LEFT - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">'
            f"{format_bytes(int(tick))}</text>"
        )
    for x in markers:
        parts.append(
            f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{_PAD_TOP}" y2="{_PAD_TOP + plot_h}"'
            ' class="oom"><title>out of memory</title></line>'
        )
    for label, color, sx, sy in series:
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(sx, sy, strict=True))
        parts.append(
            f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="1.6">'
            f"<title>{escape(label)}</title></polyline>"
        )
    parts.append(
        f'<text x="{_PAD_LEFT + plot_w / 2:.0f}" y="{height - 6}" class="tick"'
        f' text-anchor="middle">{escape(x_label)}</text>'
    )
    parts.append(f'<text x="{_PAD_LEFT}" y="{height - 6}" class="tick">{x0:g}</text>')
    parts.append(
        f'<text x="{width - 10}" y="{height - 6}" class="tick" text-anchor="end">{x1:.4g}</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def segment_map(segments: Sequence[Segment], *, width: int = 900, max_holes: int = 200) -> str:
    """One bar per segment, full width: live in blue, pending frees in yellow, free holes pale."""
    row, label_w = 14, 190
    bar_w = width - label_w - 10
    height = row * len(segments) + 4
    parts = [f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">']
    for index, segment in enumerate(segments):
        y = index * row + 2
        total = max(segment.total_size, 1)
        free = segment.free_bytes
        used = 100 * (1 - free / total)
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 10}" class="tick" text-anchor="end">'
            f"{format_bytes(segment.total_size)} · {used:.0f}% used</text>"
        )
        parts.append(
            f'<rect x="{label_w}" y="{y}" width="{bar_w}" height="{row - 3}"'
            f' fill="{COLORS["allocated"]}"><title>segment 0x{segment.address:x},'
            f" {format_bytes(segment.total_size)}, {format_bytes(free)} free</title></rect>"
        )
        holes = [b for b in segment.blocks if b.state in (INACTIVE, PENDING_FREE)]
        holes = sorted(holes, key=lambda b: -b.size)[:max_holes]
        for block in holes:
            start = (block.address - segment.address) / total * bar_w
            span = max(block.size / total * bar_w, 0.6)
            color = COLORS["free"] if block.state == INACTIVE else COLORS["pending"]
            parts.append(
                f'<rect x="{label_w + max(start, 0):.1f}" y="{y}" width="{span:.1f}"'
                f' height="{row - 3}" fill="{color}"><title>{escape(block.state)}'
                f" {format_bytes(block.size)}</title></rect>"
            )
    parts.append("</svg>")
    return "".join(parts)
