"""``diff`` and ``leaks`` as text: what grew between two dumps, per device pair, the change per
kind, and each rank's sites over its windows, suspects first."""

from __future__ import annotations

from collections.abc import Sequence

from memforensics._units import format_bytes as fmt
from memforensics._units import format_signed_bytes
from memforensics.analysis.compare.diff import Diff, KindChange, PeakChange, SiteGrowth
from memforensics.analysis.compare.leaks import Leaks
from memforensics.analysis.dump import (
    KIND_WIDTH,
    PREDICTED,
    hidden_rows,
    native_note,
    short_site,
    site_row,
)
from memforensics.analysis.folder import skipped_lines_text


def grew_most(d: Diff) -> str:
    """The first line of ``diff``: whether the peak or the final state changed more, by how
    much, and the site that changed most there."""
    final = d.total_delta_bytes
    peaks = d.peaks
    if peaks is not None and abs(peaks.delta_bytes) > abs(final):
        top = _top_site(peaks.growth)
        return (
            f"What grew most: the peak, {format_signed_bytes(peaks.delta_bytes)} live "
            f"({fmt(peaks.before_live_bytes)} → {fmt(peaks.after_live_bytes)}){top}; "
            f"the final states differ by {format_signed_bytes(final)}."
        )
    if final == 0 and (peaks is None or peaks.delta_bytes == 0):
        return "Nothing grew: both dumps hold the same live bytes, at their peaks and at the end."
    rest = (
        "" if peaks is None else f"; the peaks differ by {format_signed_bytes(peaks.delta_bytes)}"
    )
    return (
        f"What grew most: the final state, {format_signed_bytes(final)} live "
        f"({fmt(d.before_allocated_bytes)} → {fmt(d.after_allocated_bytes)})"
        f"{_top_site(d.growth)}{rest}."
    )


def _predicted(predicted: bool) -> str:
    """After a file's name: that ``memforensics plan`` wrote it, where it did."""
    return f" ({PREDICTED})" if predicted else ""


def _top_site(growth: Sequence[SiteGrowth]) -> str:
    if not growth:
        return ""
    first = growth[0]
    return f", most at {short_site(first.site)} ({format_signed_bytes(first.delta_bytes)})"


def diff_text(d: Diff, top: int | None = 15) -> str:
    """The ``diff`` tables of one device pair: the peaks, then the final states, each table
    cut to ``top`` rows (None: every row), saying what they hide."""
    lines = []
    if d.peaks is not None:
        lines = [*peak_lines(d.peaks, top, d.growth), "", "At the end:"]
    lines += [
        f"before {d.before}{_predicted(d.before_predicted)}:"
        f" {_final(d.before_allocated_bytes, d.before_reserved_bytes)}",
        f"after  {d.after}{_predicted(d.after_predicted)}:"
        f" {_final(d.after_allocated_bytes, d.after_reserved_bytes)}",
        f"total change {format_signed_bytes(d.total_delta_bytes)}",
    ]
    lines += _growth_lines(d.growth, d.total_delta_bytes, top)
    if d.leak_suspects:
        first = d.after_window[0] if d.after_window else "?"
        suspects = d.leak_suspects if top is None else d.leak_suspects[:top]
        lines += ["", f"  leak suspects: live in AFTER but allocated before step {first}"]
        for s in suspects:
            steps = ",".join(str(n) for n in s.steps[:8]) + ("…" if len(s.steps) > 8 else "")
            row = f"  {fmt(s.bytes):>11} {s.blocks:>5,} blocks  steps {steps}  "
            lines += site_row(row, s.kind, s.site, s.caller)
        lines += hidden_rows(len(d.leak_suspects) - len(suspects), "more suspect")
    shown_sites = [g.site for g in d.growth[:top]] + [s.site for s in d.leak_suspects[:top]]
    if d.peaks is not None:
        shown_sites += [g.site for g in d.peaks.growth[:top]]
    lines += native_note(shown_sites)
    return "\n".join(lines)


def _final(allocated: int, reserved: int | None) -> str:
    kept = "" if reserved is None else f", {fmt(reserved)} reserved"
    return f"{fmt(allocated)} allocated{kept}"


def peak_lines(p: PeakChange, top: int | None, at_end: Sequence[SiteGrowth] = ()) -> list[str]:
    """Each side's peak (live, reserved and segments then), the change, and with a trace on
    both sides the change per site and per kind at the peaks; a site table the same as the
    end's (``at_end``: the peaks are the final states) is said, not printed twice."""
    lines = [
        "At the peaks:",
        f"before {_peak(p.before_live_bytes, p.before_reserved_bytes, p.before_segments)}",
        f"after  {_peak(p.after_live_bytes, p.after_reserved_bytes, p.after_segments)}",
        f"change {format_signed_bytes(p.delta_bytes)} live, "
        f"{format_signed_bytes(p.reserved_delta_bytes)} reserved, "
        f"{_segments_change(p.after_segments - p.before_segments)}",
    ]
    if not p.traced:
        sides = [n for n, t in (("BEFORE", p.before_traced), ("AFTER", p.after_traced)) if not t]
        lines.append(
            f"  ({' and '.join(sides)} {'has' if len(sides) == 1 else 'have'} no allocator "
            "trace, so the peak there is the snapshot itself; sites are compared at the end)"
        )
        return lines
    if p.growth and tuple(p.growth) == tuple(at_end):
        lines.append("  (the sites changed as at the end, below)")
        return lines
    lines += _growth_lines(p.growth, p.delta_bytes, top)
    lines += kinds_change_lines(p.kinds)
    return lines


def _segments_change(change: int) -> str:
    if change == 0:
        return "as many segments"
    return f"{change:+,} segment{'' if abs(change) == 1 else 's'}"


def _peak(live: int, reserved: int, segments: int) -> str:
    plural = "" if segments == 1 else "s"
    return f"{fmt(live)} live, {fmt(reserved)} reserved in {segments:,} segment{plural}"


def _growth_lines(growth: Sequence[SiteGrowth], total: int, top: int | None) -> list[str]:
    """The change per site, largest first, cut to ``top`` rows with the rest's net change."""
    if not growth:
        return []
    shown = growth if top is None else growth[:top]
    header = f"  {'change':>11} {'before':>11} {'after':>11}  {'kind':<{KIND_WIDTH}} site"
    lines = ["", header]
    for g in shown:
        row = (
            f"  {format_signed_bytes(g.delta_bytes):>11} {fmt(g.before_bytes):>11}"
            f" {fmt(g.after_bytes):>11}  "
        )
        lines += site_row(row, g.kind, g.site, g.caller)
    rest = total - sum(g.delta_bytes for g in shown)
    lines += hidden_rows(
        len(growth) - len(shown), "more site", f" (net {format_signed_bytes(rest)})"
    )
    return lines


def device_diffs_text(result: Diff, top: int | None = 15) -> str:
    """``diff``'s answer: what grew most, then the tables per device pair, each under a
    ``device N → device M`` line when the dumps cover several devices, unmatched devices, then
    the change per kind at the end. ``top`` cuts each table (None: all)."""
    pairs = (result, *result.other_devices)
    if len(pairs) == 1 and not result.unmatched_devices:
        headline, tables = grew_most(result), diff_text(result, top)
    else:
        most = max(pairs, key=_growth_size)
        headline = (
            f"device {most.before_device_index} → device {most.after_device_index}: "
            f"{grew_most(most)}"
        )
        blocks = [
            f"device {pair.before_device_index} → device {pair.after_device_index}\n"
            f"{diff_text(pair, top)}"
            for pair in pairs
        ]
        blocks += [f"({note})" for note in result.unmatched_devices]
        tables = "\n\n".join(blocks)
    ending = kinds_change_lines(result.kinds)
    return "\n".join([headline, "", tables, *ending])


def _growth_size(d: Diff) -> int:
    return max(abs(d.total_delta_bytes), abs(d.peaks.delta_bytes) if d.peaks else 0)


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
            row = f"  {mark:2}{fmt(round(trend.growth_per_step)):>12} {first:>6} "
            row += f"{trend.confidence:>5.2f}  {span:<27} "
            lines += site_row(row, trend.kind, trend.site)
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
