"""``summary``'s text: a compact table a tired person reads in ten seconds, then the sites,
what the unrecorded rows are, what filled the device, and live bytes per step."""

from __future__ import annotations

import textwrap

from memforensics._units import format_bytes as fmt
from memforensics.analysis.dump import (
    BEFORE_RECORDING,
    NATIVE_ONLY,
    NATIVE_ONLY_MEANING,
    UNKNOWN_SITE,
    caller_line,
    context_lines,
    hidden_rows,
    origin_words,
    short_site,
)
from memforensics.analysis.filled import filled_lines
from memforensics.analysis.oom import at_risk_lines, device_free_text
from memforensics.analysis.summary.summary import Oom, SiteBytes, Summary

_WRAP = 100
_SITE_COLUMN = 23  # where the site column starts: under it goes the caller


def summary_text(s: Summary, *, rows: int | None = 10) -> str:
    """The ``summary`` table of ``s``, then of each of its ``other_devices``; ``rows`` caps the
    per-step table (None: every row). The site table is already cut by
    ``summarize(top=...)``; both say how many rows they hide."""
    return "\n\n".join(_one_device(item, rows) for item in (s, *s.other_devices))


def _one_device(s: Summary, rows: int | None) -> str:
    """The table of one device."""
    where = [origin_words(s.kind, s.rank, s.has_sidecar, s.predicted)]
    if s.steps:
        where.append(f"steps {s.steps[0]}-{s.steps[1]}")
    elif s.step is not None:
        where.append(f"step {s.step}")
    truncated = {
        None: "ring-buffer overflow unknown: the oldest events may be lost",
        True: "TRUNCATED",
        False: "complete",
    }[s.truncated]
    truncated = "none recorded" if not s.trace_entries else truncated
    lines = [
        f"{s.file}  ({', '.join(where)})",
        f"  verdict      {'AT RISK (no OOM yet)' if s.at_risk else s.verdict.label.upper()}",
    ]
    at = s.oom if s.oom is not None and s.oom.judged else None
    lines += _headline_rows(s) if at is None or not s.after_oom else _oom_rows(at)
    if at is not None:  # the user's request and the allocator's rounded allocation differ
        lines.append(
            f"  OOM request  {fmt(at.requested_bytes):>12}   allocation {fmt(at.allocation_bytes)}"
            f" (what the error message prints)  limit {fmt(at.device_total_bytes)}"
        )
        label = "judged at " if at.assumed else "at the OOM "
        lines.append(
            f"  {label:<12} {fmt(at.reserved_bytes):>12}   reserved ({at.state} state),"
            f" {device_free_text(at.device_free_bytes)}, outside PyTorch {fmt(at.external_bytes)}"
        )
    elif s.oom is not None:
        lines.append(
            f"  OOM request  {fmt(s.oom.requested_bytes):>12}   "
            f"{device_free_text(s.oom.device_free_bytes)}  total {fmt(s.oom.device_total_bytes)}"
        )
    if s.after_oom:
        lines.append(f"  after the OOM (unwinding freed {fmt(s.unwound_bytes)}), at the snapshot:")
        lines += _headline_rows(s)
    if s.judged_note:
        lines.append(f"  warning      {s.judged_note}")
    lines.append(f"  history      {s.trace_entries:>12,} events ({truncated})")
    lines += context_lines(s.devices, s.device_index, s.device_reason, s.limits)
    if s.at_risk is not None:
        lines += ["", *at_risk_lines(s.at_risk)]
    lines += ["", f"  {s.verdict.explanation}"]
    if s.verdict.advice:
        lines.append(f"  → {s.verdict.advice}")
    lines += _site_table(s)
    lines += _unrecorded_note(s)
    lines += filled_lines(s.kinds, s.peak, s.oom.live() if s.oom is not None else None)
    if s.live_by_step:
        shown = s.live_by_step if rows is None else s.live_by_step[-rows:] if rows else ()
        lines += ["", f"  {'step':>6} {'live bytes':>11} {'blocks':>7}"]
        lines += hidden_rows(len(s.live_by_step) - len(shown), "earlier step")
        for item in shown:
            step = "-" if item.step is None else str(item.step)
            lines.append(f"  {step:>6} {fmt(item.bytes):>11} {item.blocks:>7,}")
    return "\n".join(lines)


def _headline_rows(s: Summary) -> list[str]:
    """Reserved, allocated and free at the snapshot."""
    return [
        f"  reserved     {fmt(s.reserved_bytes):>12}   segments {s.segments:,}"
        f"  blocks {s.blocks:,}",
        f"  allocated    {fmt(s.allocated_bytes):>12}   active {fmt(s.active_bytes)}",
        f"  free inside  {fmt(s.free_in_reserved_bytes):>12}   largest free block "
        f"{fmt(s.largest_free_block_bytes)}",
    ]


def _oom_rows(at: Oom) -> list[str]:
    """Reserved, allocated and free at the OOM, reconstructed from the trace."""
    return [
        f"  reserved     {fmt(at.reserved_bytes):>12}   at the OOM"
        f" (trace entry {at.trace_index:,})",
        f"  allocated    {fmt(at.allocated_bytes):>12}",
        f"  free inside  {fmt(at.free_in_reserved_bytes):>12}   largest free block of its pool "
        f"{fmt(at.largest_free_block_bytes)}",
    ]


def _site_table(s: Summary) -> list[str]:
    lines: list[str] = []
    if s.after_oom and s.oom is not None and s.oom.top_sites:
        lines += ["", f"  {'live bytes':>11} {'blocks':>7}  site (live at the OOM)"]
        lines += _site_rows(s.oom.top_sites, s.oom.site_count, s.oom.allocated_bytes or 0)
        lines += ["", f"  {'live bytes':>11} {'blocks':>7}  site (after the OOM, at the snapshot)"]
        return lines + _site_rows(s.top_sites, s.site_count, s.allocated_bytes)
    if s.top_sites:
        lines += ["", f"  {'live bytes':>11} {'blocks':>7}  site"]
    return lines + _site_rows(s.top_sites, s.site_count, s.allocated_bytes, blank=True)


def _site_rows(
    sites: tuple[SiteBytes, ...], count: int, total: int, *, blank: bool = False
) -> list[str]:
    """One row per site (with its caller), then how many sites are hidden."""
    lines: list[str] = []
    for t in sites:
        lines.append(f"  {fmt(t.bytes):>11} {t.blocks:>7,}  {short_site(t.site)}")
        lines += caller_line(t.site, t.caller, _SITE_COLUMN)
    hidden = count - len(sites)
    if hidden > 0:
        rest = total - sum(t.bytes for t in sites)
        lines += [""] if blank and not sites else []
        lines += hidden_rows(hidden, "more site", f" ({fmt(rest)} in all)")
    return lines


def _unrecorded_note(s: Summary) -> list[str]:
    """Say what ``<before recording>``, ``<C++ only>`` and ``<unknown>`` rows are, and how to get
    their sites."""
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
    native = [t for t in s.top_sites if t.site == NATIVE_ONLY]
    if native:
        count = sum(t.blocks for t in native)
        lines += _paragraph(
            f"{NATIVE_ONLY}: {count:,} live block{'' if count == 1 else 's'}"
            f" ({fmt(sum(t.bytes for t in native))}), {NATIVE_ONLY_MEANING}."
        )
    unknown = [t for t in s.top_sites if t.site == UNKNOWN_SITE]
    if unknown:
        lines += _paragraph(
            f"{UNKNOWN_SITE}: {sum(t.blocks for t in unknown):,} live blocks"
            f" ({fmt(sum(t.bytes for t in unknown))}) have stacks whose Python frames are all"
            " inside torch."
        )
    return lines


def _paragraph(text: str, *, blank: bool = True) -> list[str]:
    """A long sentence wrapped to the terminal's usual width, indented under the table."""
    wrapped = textwrap.wrap(text, width=_WRAP, initial_indent="  ", subsequent_indent="    ")
    return ([""] if blank else []) + wrapped
