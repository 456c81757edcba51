"""Plain-text renderings for the terminal: compact tables a tired person reads in ten seconds."""

from __future__ import annotations

from memforensics.analysis._diff import Diff
from memforensics.analysis._ls import RunListing
from memforensics.analysis._summary import Summary
from memforensics.analysis._text_filled import filled_lines
from memforensics.analysis._units import format_bytes as fmt

_SITE_WIDTH = 64


def short_site(site: str, width: int = _SITE_WIDTH) -> str:
    """Keep the end of a long ``path:line function`` (file and function matter, the prefix not)."""
    return site if len(site) <= width else "…" + site[-(width - 1) :]


def summary_text(s: Summary) -> str:
    """The ``summary`` table."""
    where = [f"kind {s.kind or '?'}", f"rank {'?' if s.rank is None else s.rank}"]
    if s.steps:
        where.append(f"steps {s.steps[0]}-{s.steps[1]}")
    elif s.step is not None:
        where.append(f"step {s.step}")
    truncated = {None: "unknown", True: "TRUNCATED", False: "complete"}[s.history_truncated]
    lines = [
        f"{s.file}  ({', '.join(where)})",
        f"  verdict      {s.verdict.name.upper()}",
        f"  reserved     {fmt(s.reserved_bytes):>12}   segments {s.segments:,}"
        f"  blocks {s.blocks:,}",
        f"  allocated    {fmt(s.allocated_bytes):>12}   active {fmt(s.active_bytes)}",
        f"  free inside  {fmt(s.free_in_reserved_bytes):>12}   largest free block "
        f"{fmt(s.largest_free_block_bytes)}",
    ]
    if s.oom is not None:
        lines.append(
            f"  OOM request  {fmt(s.oom.requested_bytes):>12}   device free "
            f"{fmt(s.oom.device_free_bytes)}  total {fmt(s.oom.device_total_bytes)}"
        )
    lines.append(f"  history      {s.history_events:>12,} events ({truncated})")
    lines += ["", f"  {s.verdict.explanation}"]
    if s.verdict.advice:
        lines.append(f"  → {s.verdict.advice}")
    if s.top_sites:
        lines += ["", f"  {'live bytes':>11} {'blocks':>7}  site"]
        lines += [f"  {fmt(t.bytes):>11} {t.blocks:>7,}  {short_site(t.site)}" for t in s.top_sites]
    lines += filled_lines(s.filled)
    if s.live_by_step:
        lines += ["", f"  {'step':>6} {'live bytes':>11} {'blocks':>7}"]
        for item in s.live_by_step[-20:]:
            step = "-" if item.step is None else str(item.step)
            lines.append(f"  {step:>6} {fmt(item.bytes):>11} {item.blocks:>7,}")
    return "\n".join(lines)


def diff_text(d: Diff, top: int = 15) -> str:
    """The ``diff`` table."""
    lines = [
        f"before {d.before}: {fmt(d.before_allocated_bytes)} allocated",
        f"after  {d.after}: {fmt(d.after_allocated_bytes)} allocated",
        f"total change {fmt(d.total_delta_bytes)}",
    ]
    if d.growth:
        lines += ["", f"  {'change':>11} {'before':>11} {'after':>11}  site"]
        lines += [
            f"  {fmt(g.delta_bytes):>11} {fmt(g.before_bytes):>11} {fmt(g.after_bytes):>11}"
            f"  {short_site(g.site)}"
            for g in d.growth[:top]
        ]
    if d.leak_suspects:
        first = d.after_window[0] if d.after_window else "?"
        lines += ["", f"  leak suspects: live in AFTER but allocated before step {first}"]
        for s in d.leak_suspects[:top]:
            steps = ",".join(str(n) for n in s.steps[:8]) + ("…" if len(s.steps) > 8 else "")
            lines.append(
                f"  {fmt(s.bytes):>11} {s.blocks:>5,} blocks  steps {steps}  {short_site(s.site)}"
            )
    return "\n".join(lines)


def ls_text(listing: RunListing) -> str:
    """The ``ls`` table, oldest first, with the first OOM named on top."""
    first = listing.first_oom
    head = "no OOM dumps"
    if first is not None:
        head = (
            f"first OOM: rank {first.meta.rank} step {first.meta.step}"
            f" at {first.created_at}  {first.path}"
        )
    lines = [
        head,
        "",
        f"{'kind':<7} {'rank':>5} {'step(s)':>11} {'size':>11}  {'time':<32} flags  path",
    ]
    for entry in listing.dumps:
        meta = entry.meta
        where = (
            f"{meta.steps[0]}-{meta.steps[1]}"
            if meta.steps
            else ("-" if meta.step is None else str(meta.step))
        )
        flags = "".join(
            (
                "P" if meta.partial else "",
                "T" if meta.truncated else "",
                "" if meta.has_sidecar else "?",
            )
        )
        lines.append(
            f"{meta.kind or '?':<7} {'-' if meta.rank is None else meta.rank:>5} {where:>11}"
            f" {fmt(entry.size_bytes):>11}  {entry.created_at or '-':<32} {flags or '-':<5}"
            f"  {entry.path}"
        )
    lines.append("")
    lines.append(
        f"{len(listing.dumps)} dump(s); flags: P partial window, T truncated history, ? no sidecar"
    )
    return "\n".join(lines)
