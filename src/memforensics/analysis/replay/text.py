"""The ``replay`` report for the terminal: self-check first, then the proof, then the table."""

from __future__ import annotations

from memforensics._units import format_bytes as fmt
from memforensics.analysis.replay.replay import Replay


def replay_text(r: Replay) -> str:
    """Plain-text rendering of a :class:`Replay`."""
    lines = [f"{r.file}  (recorded settings: {r.recorded_conf or 'defaults'})"]
    lines += [f"  settings     {note}" for note in r.settings_notes]
    start = {
        "empty": "an empty allocator",
        "cached": "cached segments, no live blocks",
        "live": f"{r.live_at_start_blocks:,} live blocks ({fmt(r.live_at_start_bytes)})",
    }[r.start]
    lines.append(f"  history      {r.trace_events:,} events, recording started with {start}")
    fidelity = "n/a (no segment events)" if r.fidelity is None else f"{r.fidelity:.1%}"
    lines.append(
        f"  self-check   segment events reproduced {fidelity}"
        f" ({r.segment_events_matched:,}/{r.segment_events:,}); block placements"
        f" {r.placements_same:,}/{r.placements_checked:,} at the recorded address"
    )
    if r.oom_reproduced is not None:
        lines.append(f"  OOM          {'reproduced' if r.oom_reproduced else 'NOT reproduced'}")
    if r.oom is not None:
        o = r.oom
        lines.append(
            f"  at the OOM   request {fmt(o.requested_bytes)} (allocation"
            f" {fmt(o.allocation_bytes)}), reserved {fmt(o.reserved_bytes)}, limit"
            f" {fmt(o.limit_bytes)}, device free {fmt(o.device_free_bytes)}, outside PyTorch"
            f" {fmt(o.external_bytes)}"
        )
    b = r.lower_bound
    if b is not None:
        verdict = (
            f"EXHAUSTED (proven): exceeds the limit by {fmt(b.margin_bytes)}"
            if b.proven
            else f"fits by {fmt(-b.margin_bytes)}: avoidable by placement"
        )
        lines.append(
            f"  lower bound  peak live {fmt(b.peak_live_bytes)} + outside"
            f" {fmt(b.external_bytes)} = {fmt(b.needed_bytes)} vs limit {fmt(b.limit_bytes)}:"
            f" {verdict}"
        )
    for refusal in r.refusals:
        lines.append(f"  no what-if:  {refusal}")
    if r.what_if:
        lines += ["", f"  {'setting':<46} {'OOM':<5} {'peak reserved':>13} {'frag@peak':>11}"]
        for row in r.what_if:
            failure = "-"
            if row.first_failure_index is not None:
                failure = f"event {row.first_failure_index} ({fmt(row.first_failure_bytes)})"
            lines.append(
                f"  {row.name[:46]:<46} {'yes' if row.oom else 'no':<5}"
                f" {fmt(row.peak_reserved_bytes):>13} {fmt(row.fragmentation_at_peak_bytes):>11}"
                f"  first failure: {failure}"
            )
        lines += _requirements(r)
        if r.what_if and any(row.note for row in r.what_if):
            lines.append(
                "  (blocks live when recording started are placed afresh in the rows"
                " after the first)"
            )
    if r.oom is not None and r.trusted and r.what_if:
        avoided = ", ".join(r.avoided_by) or "none of these settings"
        lines.append(f"  → avoided by: {avoided}")
    if r.pinners:
        total = sum(p.size for p in r.pinners)
        lines += [
            "",
            f"  freeing these {len(r.pinners)} tensor(s) ({fmt(total)}) lets the request fit:",
        ]
        for p in r.pinners[:10]:
            age = _age(p.age_us)
            step = "-" if p.step is None else str(p.step)
            lines.append(f"  {fmt(p.size):>11}  step {step:>5}  lived {age:<16} {p.site}")
    for finding in r.lint:
        lines.append(f"  lint: {finding}")
    return "\n".join(lines)


def _requirements(r: Replay) -> list[str]:
    """One line per what-if row whose outcome needs more than its settings."""
    return [f"  ({row.name} also needs {row.requires})" for row in r.what_if if row.requires]


def _age(age_us: int | None) -> str:
    """How long a pinner had lived: seconds, or milliseconds below one second."""
    if age_us is None:
        return "before recording"
    return f"{age_us / 1e6:.3f} s" if age_us >= 1_000_000 else f"{age_us / 1e3:.3f} ms"
