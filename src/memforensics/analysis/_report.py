"""``report``: one self-contained HTML file per run of the command, readable with no network.

Each dump gets a section: the verdict first (the answer), then the numbers behind it, the OOM,
memory over time, the biggest sites, live bytes per step and the segment layout. A 1 GB snapshot
stays usable because every part is aggregated: the plot is bucketed (see ``_timeline``), sites
and steps are top-N, and beyond a few hundred segments only the ones with the most free bytes
are drawn, with a fill histogram for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from html import escape

from memforensics._version import __version__
from memforensics.analysis._load import Dump
from memforensics.analysis._model import Segment
from memforensics.analysis._summary import Summary, summarize
from memforensics.analysis._svg import COLORS, line_chart, segment_map
from memforensics.analysis._timeline import memory_timeline
from memforensics.analysis._units import format_bytes as fmt

MAX_SEGMENTS_DRAWN = 150
PLOT_POINTS = 1000

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;
max-width:960px;color:#1d2430}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:32px 0 8px;word-break:break-all}
h3{font-size:14px;margin:20px 0 6px;text-transform:uppercase;letter-spacing:.04em;color:#4b5565}
table{border-collapse:collapse;width:100%}
td,th{padding:3px 8px;border-bottom:1px solid #e4e7ec;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.site{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;word-break:break-all}
.verdict{padding:10px 14px;border-radius:6px;margin:8px 0;border-left:6px solid}
.fragmentation{background:#fff6e5;border-color:#e08a2c}.exhausted{background:#fdecec;border-color:#c93c3c}
.no-oom{background:#eef5ee;border-color:#3d8b4a}.muted{color:#6b7380}
.bar{display:inline-block;height:9px;background:#3b6fb6;border-radius:2px}
.grid{stroke:#e4e7ec}.tick{font-size:11px;fill:#4b5565}.oom{stroke:#c93c3c;stroke-dasharray:4 3}
.key{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px;border-radius:2px}
section{border-top:2px solid #d0d5dd;margin-top:28px}
"""


def render_report(dumps: Sequence[Dump], *, top: int = 15) -> str:
    """The whole HTML document for ``dumps`` (no external reference of any kind)."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = "".join(_section(dump, summarize(dump, top=top)) for dump in dumps)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>memforensics report</title><style>{_CSS}</style></head><body>"
        f"<h1>memforensics report</h1><p class='muted'>{len(dumps)} dump(s) · generated {stamp}"
        f" by memforensics {escape(__version__)}</p>{body}</body></html>\n"
    )


def _section(dump: Dump, summary: Summary) -> str:
    verdict = summary.verdict
    advice = f"<br><b>What to do:</b> {escape(verdict.advice)}" if verdict.advice else ""
    return (
        f"<section><h2>{escape(dump.name)}</h2>"
        f'<div class="verdict {escape(verdict.name)}"><b>{escape(verdict.name)}</b> — '
        f"{escape(verdict.explanation)}{advice}</div>"
        f"{_facts(summary)}{_timeline(dump, summary)}{_sites(summary)}{_steps(summary)}"
        f"{_segments(dump.segments)}</section>"
    )


def _rows(pairs: Sequence[tuple[str, str]]) -> str:
    return "".join(f"<tr><th>{escape(k)}</th><td class='n'>{escape(v)}</td></tr>" for k, v in pairs)


def _facts(s: Summary) -> str:
    window = f"{s.steps[0]}-{s.steps[1]}" if s.steps else "-"
    left = [
        ("kind", s.kind or "-"),
        ("rank", "-" if s.rank is None else str(s.rank)),
        ("step / window", f"{'-' if s.step is None else s.step} / {window}"),
        ("reserved", fmt(s.reserved_bytes)),
        ("allocated", fmt(s.allocated_bytes)),
        ("active (incl. pending frees)", fmt(s.active_bytes)),
        ("segments / blocks", f"{s.segments:,} / {s.blocks:,}"),
    ]
    truncated = {None: "unknown", True: "yes", False: "no"}[s.history_truncated]
    right = [
        ("free inside reserved", fmt(s.free_in_reserved_bytes)),
        ("largest free block", fmt(s.largest_free_block_bytes)),
        ("OOM requested", fmt(s.oom.requested_bytes) if s.oom else "no OOM"),
        ("device free at OOM", fmt(s.oom.device_free_bytes) if s.oom else "-"),
        ("device total", fmt(s.oom.device_total_bytes) if s.oom else "-"),
        ("history events", f"{s.history_events:,}"),
        ("history truncated", truncated),
    ]
    return (
        "<h3>Summary and OOM</h3><table><tr><td style='width:50%;padding:0'><table>"
        f"{_rows(left)}</table></td><td style='padding:0 0 0 16px'><table>{_rows(right)}"
        "</table></td></tr></table>"
    )


def _timeline(dump: Dump, s: Summary) -> str:
    line = memory_timeline(
        dump.trace, active_bytes=s.active_bytes, reserved_bytes=s.reserved_bytes, points=PLOT_POINTS
    )
    chart = line_chart(
        [
            ("reserved", COLORS["reserved"], line.x, line.reserved),
            ("allocated", COLORS["allocated"], line.x, line.allocated),
        ],
        x_label="seconds since the first recorded event" if line.x_is_time else "event number",
        markers=line.oom_x,
    )
    keys = "".join(
        f"<span class='key' style='background:{COLORS[k]}'></span>{k}"
        for k in ("allocated", "reserved")
    )
    note = f"{line.events:,} events, peak per bucket of {max(line.events // PLOT_POINTS, 1):,}"
    return f"<h3>Memory over time</h3><p class='muted'>{keys} · {note}; dashed: OOM</p>{chart}"


def _sites(s: Summary) -> str:
    if not s.top_sites:
        return "<h3>Biggest sites</h3><p class='muted'>No live blocks.</p>"
    biggest = max(site.bytes for site in s.top_sites) or 1
    rows = "".join(
        f"<tr><td class='site'>{escape(site.site)}</td><td class='n'>{fmt(site.bytes)}</td>"
        f"<td class='n'>{site.blocks:,}</td><td style='width:160px'><span class='bar' "
        f"style='width:{150 * site.bytes / biggest:.0f}px'></span></td></tr>"
        for site in s.top_sites
    )
    return (
        "<h3>Biggest sites (live bytes)</h3><table><tr><th>site</th><th class='n'>bytes</th>"
        f"<th class='n'>blocks</th><th></th></tr>{rows}</table>"
    )


def _steps(s: Summary) -> str:
    if not s.live_by_step:
        return ""
    rows = "".join(
        f"<tr><td>{'no step' if item.step is None else item.step}</td>"
        f"<td class='n'>{fmt(item.bytes)}</td><td class='n'>{item.blocks:,}</td></tr>"
        for item in s.live_by_step[-50:]
    )
    return (
        "<h3>Live bytes by step of allocation</h3><table><tr><th>step</th><th class='n'>bytes</th>"
        f"<th class='n'>blocks</th></tr>{rows}</table>"
    )


def _segments(segments: Sequence[Segment]) -> str:
    if not segments:
        return "<h3>Segments</h3><p class='muted'>No segments reserved.</p>"
    shown = sorted(segments, key=lambda seg: seg.address)
    note = f"all {len(segments):,} segments, by address"
    if len(segments) > MAX_SEGMENTS_DRAWN:
        shown = sorted(segments, key=lambda seg: (-seg.free_bytes, seg.address))[
            :MAX_SEGMENTS_DRAWN
        ]
        note = f"the {MAX_SEGMENTS_DRAWN} of {len(segments):,} segments with the most free bytes"
    keys = "".join(
        f"<span class='key' style='background:{COLORS[k]};border:1px solid #ccd'></span>{label}"
        for k, label in (("allocated", "live"), ("pending", "pending free"), ("free", "free hole"))
    )
    return (
        f"<h3>Segment layout</h3><p class='muted'>{keys} · {note}</p>"
        f"{_fill_histogram(segments)}{segment_map(shown)}"
    )


def _fill_histogram(segments: Sequence[Segment]) -> str:
    """How full segments are, in tenths: many half-empty segments is fragmentation's signature."""
    counts, sizes = [0] * 10, [0] * 10
    for segment in segments:
        used = 1 - segment.free_bytes / max(segment.total_size, 1)
        bucket = min(int(used * 10), 9)
        counts[bucket] += 1
        sizes[bucket] += segment.total_size
    cells = "".join(f"<th class='n'>{10 * i}-{10 * i + 10}%</th>" for i in range(10))
    count_row = "".join(f"<td class='n'>{c:,}</td>" for c in counts)
    size_row = "".join(f"<td class='n'>{fmt(b) if b else '-'}</td>" for b in sizes)
    return (
        f"<table><tr><th>used</th>{cells}</tr><tr><th>segments</th>{count_row}</tr>"
        f"<tr><th>reserved</th>{size_row}</tr></table>"
    )
