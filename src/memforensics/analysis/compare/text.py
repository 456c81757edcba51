"""Text for ``leaks``: per rank, each site's live bytes over its windows, suspects first."""

from __future__ import annotations

from memforensics._units import format_bytes as fmt
from memforensics.analysis.compare.leaks import Leaks

_SITE_WIDTH = 58


def leaks_text(leaks: Leaks, top: int | None = 10) -> str:
    """The ``leaks`` table; ``top`` None shows every site."""
    if not leaks.windows:
        return (
            f"{leaks.root}: no window dumps to compare (leaks needs step windows: "
            "install(steps=N), and keep_last=None or a few windows kept)"
        )
    lines = []
    for rank, steps in leaks.windows.items():
        trends = [t for t in leaks.trends if t.rank == rank]
        suspects = sum(1 for t in trends if t.suspect)
        label = "?" if rank is None else str(rank)
        lines.append(
            f"rank {label}: {len(steps)} window(s) ending at step(s) "
            f"{', '.join(map(str, steps))}; {suspects} suspect(s)"
        )
        if len(steps) < 3:
            lines.append("  fewer than 3 windows: growth cannot be told from a one-off yet")
        lines.append(f"  {'':2}{'growth/step':>12} {'first':>6} {'conf':>5}  {'bytes':<27} site")
        shown = trends if top is None else trends[:top]
        for trend in shown:
            mark = "!!" if trend.suspect else ""
            span = f"{fmt(trend.bytes[0])} → {fmt(trend.bytes[-1])}"
            first = "-" if trend.first_step is None else str(trend.first_step)
            lines.append(
                f"  {mark:2}{fmt(round(trend.growth_per_step)):>12} {first:>6} "
                f"{trend.confidence:>5.2f}  {span:<27} {_short(trend.site)}"
            )
        if len(shown) < len(trends):
            lines.append(f"  … {len(trends) - len(shown)} more site(s) hidden (--all shows them)")
    for error in leaks.unreadable:
        lines.append(f"unreadable: {error}")
    return "\n".join(lines)


def _short(site: str) -> str:
    return site if len(site) <= _SITE_WIDTH else "…" + site[-(_SITE_WIDTH - 1) :]
