"""Plain-text renderings for the terminal: compact tables a tired person reads in ten seconds."""

from __future__ import annotations

import textwrap

from memforensics._units import format_bytes as fmt
from memforensics.analysis.compare.diff import Diff
from memforensics.analysis.dump.devices import context_lines
from memforensics.analysis.dump.frames import BEFORE_RECORDING, UNKNOWN_SITE
from memforensics.analysis.filled.text import filled_lines
from memforensics.analysis.folder.ls import RunListing
from memforensics.analysis.summary.result import Summary

_SITE_WIDTH = 64
_WRAP = 100


def short_site(site: str, width: int = _SITE_WIDTH) -> str:
    """Keep the end of a long ``path:line function`` (file and function matter, the prefix not)."""
    return site if len(site) <= width else "…" + site[-(width - 1) :]


def _hidden(count: int, noun: str, detail: str = "") -> list[str]:
    """The line under (or over) a cut table: how many rows it hides and how to see them."""
    if count <= 0:
        return []
    plural = noun if count == 1 else noun + "s"
    return [f"  … {count:,} {plural} not shown{detail}; --top N or --all shows them"]


def _caller_line(site: str, caller: str, indent: int = 23) -> list[str]:
    """``← caller ...`` under a row's site when the site is library code: the user's own line
    that led there (``<unknown>``: none outside installed packages)."""
    if caller == site or site in (UNKNOWN_SITE, BEFORE_RECORDING):
        return []
    return [f"{'':>{indent}}← caller {short_site(caller, _SITE_WIDTH - 9)}"]


def summary_text(s: Summary, *, rows: int | None = 10) -> str:
    """The ``summary`` table; ``rows`` caps the per-step table (None: every row). The site table
    is already cut by ``summarize(top=...)``; both say how many rows they hide."""
    where = [f"kind {s.kind or '?'}", f"rank {'?' if s.rank is None else s.rank}"]
    if s.steps:
        where.append(f"steps {s.steps[0]}-{s.steps[1]}")
    elif s.step is not None:
        where.append(f"step {s.step}")
    truncated = {None: "unknown", True: "TRUNCATED", False: "complete"}[s.truncated]
    lines = [
        f"{s.file}  ({', '.join(where)})",
        f"  verdict      {s.verdict.label.upper()}",
        f"  reserved     {fmt(s.reserved_bytes):>12}   segments {s.segments:,}"
        f"  blocks {s.blocks:,}",
        f"  allocated    {fmt(s.allocated_bytes):>12}   active {fmt(s.active_bytes)}",
        f"  free inside  {fmt(s.free_in_reserved_bytes):>12}   largest free block "
        f"{fmt(s.largest_free_block_bytes)}",
    ]
    at = s.oom_state
    if at is not None:  # the user's request and the allocator's rounded allocation differ (#10)
        lines.append(
            f"  OOM request  {fmt(at.requested_bytes):>12}   allocation {fmt(at.allocation_bytes)}"
            f" (what the error message prints)  limit {fmt(at.limit_bytes)}"
        )
        lines.append(
            f"  at the OOM   {fmt(at.reserved_bytes):>12}   reserved ({at.source} state), device"
            f" free {fmt(at.device_free_bytes)}, outside PyTorch {fmt(at.external_bytes)}"
        )
    elif s.oom is not None:
        lines.append(
            f"  OOM request  {fmt(s.oom.requested_bytes):>12}   device free "
            f"{fmt(s.oom.device_free_bytes)}  total {fmt(s.oom.device_total_bytes)}"
        )
    lines.append(f"  history      {s.trace_entries:>12,} events ({truncated})")
    lines += context_lines(s.devices, s.device_index, s.device_reason, s.limits)
    lines += ["", f"  {s.verdict.explanation}"]
    if s.verdict.advice:
        lines.append(f"  → {s.verdict.advice}")
    lines += _site_table(s)
    lines += _unrecorded_note(s)
    lines += filled_lines(s.filled)
    if s.live_by_step:
        shown = s.live_by_step if rows is None else s.live_by_step[-rows:] if rows else ()
        lines += ["", f"  {'step':>6} {'live bytes':>11} {'blocks':>7}"]
        lines += _hidden(len(s.live_by_step) - len(shown), "earlier step")
        for item in shown:
            step = "-" if item.step is None else str(item.step)
            lines.append(f"  {step:>6} {fmt(item.bytes):>11} {item.blocks:>7,}")
    return "\n".join(lines)


def _site_table(s: Summary) -> list[str]:
    lines: list[str] = []
    if s.top_sites:
        lines += ["", f"  {'live bytes':>11} {'blocks':>7}  site"]
        for t in s.top_sites:
            lines.append(f"  {fmt(t.bytes):>11} {t.blocks:>7,}  {short_site(t.site)}")
            lines += _caller_line(t.site, t.caller)
    hidden = s.site_count - len(s.top_sites)
    if hidden > 0:
        rest = s.allocated_bytes - sum(t.bytes for t in s.top_sites)
        lines += [""] if not s.top_sites else []
        lines += _hidden(hidden, "more site", f" ({fmt(rest)} in all)")
    return lines


def _unrecorded_note(s: Summary) -> list[str]:
    """Say what ``<before recording>`` and ``<unknown>`` rows are, and how to get their sites."""
    lines: list[str] = []
    if s.before_recording_blocks:
        lines += _paragraph(
            f"{BEFORE_RECORDING}: {s.before_recording_blocks:,} live blocks"
            f" ({fmt(s.before_recording_bytes)}) have no stack: they were allocated before"
            " allocator history recording started (or while it was off)."
        )
        lines += _paragraph(
            "→ To see their sites, start recording earlier: call memforensics.install() before"
            " the model, optimizer and data reach the device, and keep oom_history on"
            ' ("state" or "all"); with PyTorch alone, call'
            " torch.cuda.memory._record_memory_history() first.",
            blank=False,
        )
    unknown = [t for t in s.top_sites if t.site == UNKNOWN_SITE]
    if unknown:
        lines += _paragraph(
            f"{UNKNOWN_SITE}: {sum(t.blocks for t in unknown):,} live blocks"
            f" ({fmt(sum(t.bytes for t in unknown))}) have stacks with no Python frame outside"
            " torch (C++ only, such as autograd's backward thread or a library's workspace)."
        )
    return lines


def _paragraph(text: str, *, blank: bool = True) -> list[str]:
    """A long sentence wrapped to the terminal's usual width, indented under the table."""
    wrapped = textwrap.wrap(text, width=_WRAP, initial_indent="  ", subsequent_indent="    ")
    return ([""] if blank else []) + wrapped


def diff_text(d: Diff, top: int | None = 15) -> str:
    """The ``diff`` tables, each cut to ``top`` rows (None: every row), saying what they hide."""
    lines = [
        f"before {d.before}: {fmt(d.before_allocated_bytes)} allocated",
        f"after  {d.after}: {fmt(d.after_allocated_bytes)} allocated",
        f"total change {_signed(d.total_delta_bytes)}",
    ]
    if d.growth:
        shown = d.growth if top is None else d.growth[:top]
        lines += ["", f"  {'change':>11} {'before':>11} {'after':>11}  site"]
        for g in shown:
            lines.append(
                f"  {_signed(g.delta_bytes):>11} {fmt(g.before_bytes):>11}"
                f" {fmt(g.after_bytes):>11}  {short_site(g.site)}"
            )
            lines += _caller_line(g.site, g.caller, indent=39)
        rest = d.total_delta_bytes - sum(g.delta_bytes for g in shown)
        lines += _hidden(len(d.growth) - len(shown), "more site", f" (net {_signed(rest)})")
    if d.leak_suspects:
        first = d.after_window[0] if d.after_window else "?"
        suspects = d.leak_suspects if top is None else d.leak_suspects[:top]
        lines += ["", f"  leak suspects: live in AFTER but allocated before step {first}"]
        for s in suspects:
            steps = ",".join(str(n) for n in s.steps[:8]) + ("…" if len(s.steps) > 8 else "")
            lines.append(
                f"  {fmt(s.bytes):>11} {s.blocks:>5,} blocks  steps {steps}  {short_site(s.site)}"
            )
            lines += _caller_line(s.site, s.caller, indent=len(lines[-1]) - len(short_site(s.site)))
        lines += _hidden(len(d.leak_suspects) - len(suspects), "more suspect")
    return "\n".join(lines)


def _signed(count: int) -> str:
    """``+1.50 GiB`` / ``-20.00 MiB`` / ``0 B``: a change shows its direction."""
    return ("+" if count > 0 else "") + fmt(count)


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
        f"{'kind':<7} {'rank':>5} {'step(s)':>11} {'size':>11} {'external':>10}  {'time':<32}"
        " flags  path",
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
            f" {fmt(entry.size_bytes):>11} {fmt(entry.external_bytes):>10}"
            f"  {entry.created_at or '-':<32} {flags or '-':<5}"
            f"  {entry.path}"
        )
    lines.append("")
    lines.append(
        f"{len(listing.dumps)} dump(s); flags: P partial window, T truncated history, ? no sidecar;"
        " external: memory outside PyTorch at an OOM"
    )
    return "\n".join(lines)
