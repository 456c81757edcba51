"""``diff`` and ``leaks`` as text: what grew between two dumps, per device pair, the change per
kind, and each rank's sites over its windows, suspects first."""

from __future__ import annotations

from collections.abc import Sequence

from memforensics._units import format_bytes as fmt
from memforensics._units import format_signed_bytes
from memforensics.analysis.compare.diff import Diff, KindChange
from memforensics.analysis.compare.leaks import Leaks
from memforensics.analysis.dump import (
    KIND_WIDTH,
    caller_line,
    hidden_rows,
    kind_and_site,
    native_note,
)
from memforensics.analysis.folder import skipped_lines_text


def diff_text(d: Diff, top: int | None = 15) -> str:
    """The ``diff`` tables of one device pair, each cut to ``top`` rows (None: every row),
    saying what they hide."""
    lines = [
        f"before {d.before}: {fmt(d.before_allocated_bytes)} allocated",
        f"after  {d.after}: {fmt(d.after_allocated_bytes)} allocated",
        f"total change {format_signed_bytes(d.total_delta_bytes)}",
    ]
    if d.growth:
        shown = d.growth if top is None else d.growth[:top]
        header = f"  {'change':>11} {'before':>11} {'after':>11}  {'kind':<{KIND_WIDTH}} site"
        lines += ["", header]
        for g in shown:
            lines.append(
                f"  {format_signed_bytes(g.delta_bytes):>11} {fmt(g.before_bytes):>11}"
                f" {fmt(g.after_bytes):>11}  {kind_and_site(g.kind, g.site)}"
            )
            lines += caller_line(g.site, g.caller, 39, kinded=True)
        rest = d.total_delta_bytes - sum(g.delta_bytes for g in shown)
        lines += hidden_rows(
            len(d.growth) - len(shown), "more site", f" (net {format_signed_bytes(rest)})"
        )
    if d.leak_suspects:
        first = d.after_window[0] if d.after_window else "?"
        suspects = d.leak_suspects if top is None else d.leak_suspects[:top]
        lines += ["", f"  leak suspects: live in AFTER but allocated before step {first}"]
        for s in suspects:
            steps = ",".join(str(n) for n in s.steps[:8]) + ("…" if len(s.steps) > 8 else "")
            row = f"  {fmt(s.bytes):>11} {s.blocks:>5,} blocks  steps {steps}  "
            lines.append(row + kind_and_site(s.kind, s.site))
            lines += caller_line(s.site, s.caller, len(row), kinded=True)
        lines += hidden_rows(len(d.leak_suspects) - len(suspects), "more suspect")
    shown_sites = [g.site for g in d.growth[:top]] + [s.site for s in d.leak_suspects[:top]]
    lines += native_note(shown_sites)
    return "\n".join(lines)


def device_diffs_text(result: Diff, top: int | None = 15) -> str:
    """``diff``'s answer: the table per device pair, each under a ``device N → device M`` line
    when the dumps cover several devices, unmatched devices, then the change per kind. ``top``
    cuts each table (None: all)."""
    pairs = (result, *result.other_devices)
    if len(pairs) == 1 and not result.unmatched_devices:
        tables = diff_text(result, top)
    else:
        blocks = [
            f"device {pair.before_device_index} → device {pair.after_device_index}\n"
            f"{diff_text(pair, top)}"
            for pair in pairs
        ]
        blocks += [f"({note})" for note in result.unmatched_devices]
        tables = "\n\n".join(blocks)
    return "\n".join([tables, *kinds_change_lines(result.kinds)])


def kinds_change_lines(rows: Sequence[KindChange]) -> list[str]:
    """The kinds part of ``diff``: before, after and change per kind."""
    if not rows:
        return []
    lines = ["", f"  {'kind':<17}{'before':>11} {'after':>11} {'change':>11}"]
    for row in rows:
        lines.append(
            f"  {row.kind:<17}{fmt(row.before_bytes):>11} {fmt(row.after_bytes):>11} "
            f"{format_signed_bytes(row.delta_bytes):>11}"
        )
    return lines


def leaks_text(leaks: Leaks, top: int | None = 10) -> str:
    """The ``leaks`` table; ``top`` None shows every site."""
    if not leaks.windows:
        none = (
            f"{leaks.root}: no window dumps to compare (leaks needs step windows: "
            "install(steps=N), and keep_last=None or a few windows kept)"
        )
        return "\n".join([none, *_journal_lines(leaks)])
    lines = []
    for window in leaks.windows:
        rank, steps = window.rank, window.steps
        trends = [t for t in leaks.trends if t.rank == rank]
        suspects = sum(1 for t in trends if t.suspect)
        label = "unknown (no sidecar or rank in the file name)" if rank is None else str(rank)
        lines.append(
            f"rank {label}: {len(steps)} window(s) ending at step(s) "
            f"{', '.join(map(str, steps))}; {suspects} suspect(s)"
        )
        if len(steps) < 3:
            lines.append("  fewer than 3 windows: growth cannot be told from a one-off yet")
        lines.append(
            f"  {'':2}{'growth/step':>12} {'first':>6} {'conf':>5}  {'bytes':<27} "
            f"{'kind':<{KIND_WIDTH}} site"
        )
        shown = trends if top is None else trends[:top]
        for trend in shown:
            mark = "!!" if trend.suspect else ""
            span = f"{fmt(trend.bytes[0])} → {fmt(trend.bytes[-1])}"
            first = "-" if trend.first_step is None else str(trend.first_step)
            lines.append(
                f"  {mark:2}{fmt(round(trend.growth_per_step)):>12} {first:>6} "
                f"{trend.confidence:>5.2f}  {span:<27} {kind_and_site(trend.kind, trend.site)}"
            )
        if len(shown) < len(trends):
            lines.append(f"  … {len(trends) - len(shown)} more site(s) hidden (--all shows them)")
        lines += native_note([trend.site for trend in shown])
    lines += [f"unreadable: {error}" for error in leaks.unreadable[:LISTED]]
    if len(leaks.unreadable) > LISTED:
        lines.append(f"unreadable: {len(leaks.unreadable) - LISTED:,} more file(s)")
    lines += _journal_lines(leaks)
    return "\n".join(lines)


LISTED = 10
"""Unreadable files and journal trends the text names at most; the rest are counted."""


def _journal_lines(leaks: Leaks) -> list[str]:
    """The journals' whole-run trends (fastest growing ranks) and their skipped lines."""
    lines = []
    if leaks.journal:
        lines.append("journal, allocated bytes over the whole run (fastest growing first):")
    for trend in leaks.journal[:LISTED]:
        growth = trend.growth_per_1k_steps
        shown = "-" if growth is None else f"{format_signed_bytes(round(growth))}/1k steps"
        span = "" if trend.steps is None else f" over steps {trend.steps[0]}-{trend.steps[1]}"
        lines.append(f"  rank {trend.rank}: {shown}{span}")
    if len(leaks.journal) > LISTED:
        lines.append(f"  … {len(leaks.journal) - LISTED:,} more rank(s) (--json has them)")
    if leaks.journal_skipped_lines:
        lines.append(skipped_lines_text(leaks.journal_skipped_lines))
    return lines
