"""The ``replay`` report for the terminal: self-check first, then the proof, then the table."""

from __future__ import annotations

from memforensics._text import table as text_table
from memforensics._units import format_bytes as fmt
from memforensics.analysis.dump import NOTHING_ALLOCATED, PREDICTED, STACKS_ONLY
from memforensics.analysis.oom import (
    CAPACITY,
    DEVICE_FREE_UNKNOWN,
    LowerBound,
    device_free_text,
    needed_text,
    outside_text,
)
from memforensics.analysis.replay.replay import AS_RECORDED, Replay
from memforensics.analysis.replay.what_if import WhatIf


def replay_text(r: Replay, width: int | None = None) -> str:
    """Plain-text rendering of a :class:`Replay`; its what-if table one line per row in
    ``width`` columns (None: every column whole, whatever the width)."""
    predicted = f", {PREDICTED}" if r.predicted else ""
    lines = [f"{r.file}  (recorded settings: {r.recorded_conf or 'defaults'}{predicted})"]
    lines += [f"  settings     {note}" for note in r.settings_notes]
    lines.append(_history_line(r))
    lines.append(_self_check_line(r))
    lines += _baseline_lines(r)
    if r.oom_reproduced is not None:
        lines.append(f"  OOM          {'reproduced' if r.oom_reproduced else 'NOT reproduced'}")
    if r.verdict is not None:
        lines.append(f"  verdict      {r.verdict.label.upper()} (as summary judges it)")
    if r.oom is not None:
        o = r.oom
        lines.append(
            f"  at the OOM   request {fmt(o.requested_bytes)} (allocation"
            f" {fmt(o.allocation_bytes)}), reserved {fmt(o.reserved_bytes)}, limit"
            f" {fmt(o.device_total_bytes)}, {device_free_text(o.device_free_bytes)},"
            f" {outside_text(o.external_bytes)}"
        )
    lines += _bound_lines(r)
    for refusal in r.refusals:
        lines.append(f"  no what-if:  {refusal}")
    if r.what_if:
        lines += ["", *_table(r, width)]
    if r.oom is not None and r.trusted and len(r.what_if) > 1:
        avoided = "; ".join(r.avoided_by) or "none of these settings"  # a row may hold a ","
        lines.append(f"  → avoided by: {avoided}")
    if r.pinners:
        total = sum(p.size for p in r.pinners)
        lines += [
            "",
            f"  freeing {_these_tensors(len(r.pinners))} ({fmt(total)}) lets the request fit:",
        ]
        for p in r.pinners[:10]:
            age = _age(p.age_us)
            step = "-" if p.step is None else str(p.step)
            lines.append(f"  {fmt(p.size):>11}  step {step:>5}  lived {age:<16} {p.site}")
    for finding in r.lint:
        lines.append(f"  lint: {finding}")
    return "\n".join(lines)


def _table(r: Replay, columns: int | None = None) -> list[str]:
    """The what-if rows: the recorded run, the baseline, then each setting against it; where
    they run over ``columns``, the narrow table (:func:`_narrow_table`)."""
    lines = _wide_table(r)
    if columns is not None and max(map(len, lines)) > columns:
        return _narrow_table(r, columns)
    return lines


_NARROW_NOTE = (
    "  (peak: peak reserved, against the baseline's; free: free inside reserved when allocated"
    " bytes peaked; fails at: the first request that fails; --json has every figure)"
)


def _narrow_table(r: Replay, columns: int) -> list[str]:
    """The what-if rows one line each in ``columns``: short headers, the baseline row named
    so, the first failure by its event alone, a long setting cut at its end, the free bytes
    left out last; why a setting has no effect in a note below."""
    rows: list[tuple[str, ...]] = [("setting", "OOM", "peak", "free", "vs baseline")]
    why_none: dict[str, list[str]] = {}  # a reason, and the settings it holds for
    for row in r.what_if:
        name = "the baseline" if row.name == r.baseline != AS_RECORDED else row.name
        if row.no_effect:
            rows.append((name, "", "", "", "no effect (below)"))
            why_none.setdefault(row.no_effect, []).append(row.name)
            continue
        change = _change(row, "baseline" if row.name == r.baseline else "")
        if row.first_failure_index is not None:
            failure = f"fails at {row.first_failure_index:,}"
            change = ", ".join(part for part in (change, failure) if part)
        rows.append(
            (name, _oom_cell(row.oom), fmt(row.peak_reserved_bytes),
             fmt(row.fragmentation_at_peak_bytes), change)
        )  # fmt: skip
    table, gone = text_table(
        rows, columns - 2, drops=(3,), left=(0, 1, 4), squeeze=0, room=24, keep_start=True
    )
    lines = [f"  {line}" for line in table]
    lines += _requirements(r)
    if not r.device_known:
        lines.append(f"  ({UNKNOWN_DEVICE})")
    lines += [f"  ({'; '.join(names)}: no effect, {why})" for why, names in why_none.items()]
    if len(r.what_if) > 1:
        lines.append(_NARROW_NOTE if not gone else _NARROW_NOTE.replace("; free: free", "; free"))
    if r.baseline != AS_RECORDED:
        lines.append(f"  (the baseline: {r.baseline}, as every setting's row places them)")
    return lines


def _change(row: WhatIf, baseline: str) -> str:
    """A row's change of peak reserved against the baseline, signed; ``baseline`` for the row
    with none to show (the baseline's own, or empty)."""
    if row.change_bytes is None:
        return baseline
    if row.change_bytes == 0:
        return "no change"
    return ("+" if row.change_bytes > 0 else "-") + fmt(abs(row.change_bytes))


def _wide_table(r: Replay) -> list[str]:
    """The what-if rows with every column whole."""
    width = max(len("setting"), *(len(row.name) for row in r.what_if))  # never cut a name
    lines = [
        f"  {'setting':<{width}} {'OOM':<5} {'peak reserved':>13} {'free at peak':>12}"
        "  against the baseline"
    ]
    for row in r.what_if:
        if row.no_effect:
            lines.append(f"  {row.name:<{width}} no effect on this dump ({row.no_effect})")
            continue
        change = _change(row, "(the baseline)" if row.name == r.baseline else "")
        if row.first_failure_index is not None:
            failure = f"event {row.first_failure_index:,} ({fmt(row.first_failure_bytes)})"
            change = ", ".join(part for part in (change, f"first failure: {failure}") if part)
        lines.append(
            f"  {row.name:<{width}} {_oom_cell(row.oom):<5}"
            f" {fmt(row.peak_reserved_bytes):>13} {fmt(row.fragmentation_at_peak_bytes):>12}"
            f"  {change}".rstrip()
        )
    lines += _requirements(r)
    if not r.device_known:
        lines.append(f"  ({UNKNOWN_DEVICE})")
    if len(r.what_if) == 1:  # refused: the recorded run alone
        return lines
    lines.append(
        "  (free at peak: free inside reserved when allocated bytes peaked; peak reserved is"
        " compared with the baseline)"
    )
    if r.baseline != AS_RECORDED:
        lines.append(
            f"  (the baseline, {r.baseline}, places the blocks live or cached when recording"
            " started as every setting's row does: the rows differ from it by their setting"
            " alone)"
        )
    return lines


UNKNOWN_DEVICE = (
    "OOM ?: nothing records the device's size, so no row can rule out an OOM; each gives"
    " the peak it reached"
)
"""The table's note when no OOM, sidecar or journal tells the device's size."""


def _oom_cell(oom: bool | None) -> str:
    """The OOM column: yes, no (against a known device size) or ? (size unknown)."""
    return "?" if oom is None else ("yes" if oom else "no")


def _baseline_lines(r: Replay) -> list[str]:
    """The baseline against the recorded run, before any what-if row: the same peak reserved
    to the byte and the same segment events, or where and why it differs."""
    c = r.baseline_check
    if c is None:
        return []
    releases = (
        f"; {c.cache_releases:,} releases of the whole cache replayed as such"
        if c.cache_releases
        else ""
    )
    counts = (
        f"{c.baseline_segment_events:,} segment"
        f" event{'' if c.baseline_segment_events == 1 else 's'}"
    )
    if c.reproduced:
        return [
            f"  baseline     reproduces the recorded run: the same peak reserved to the byte"
            f" ({fmt(c.recorded_peak_reserved_bytes)}) and the same {counts}{releases}"
        ]
    if c.peak_reproduced:
        return [
            f"  baseline     reaches the recorded peak reserved to the byte"
            f" ({fmt(c.recorded_peak_reserved_bytes)}), with {counts} against"
            f" {c.recorded_segment_events:,} recorded{releases}",
            f"  why          {c.why}; the rows are measured against this baseline's peak, which"
            " is the recording's",
        ]
    where = (
        f"; first apart after event {c.diverged_at:,} ({fmt(c.diverged_reserved_bytes)}"
        f" against {fmt(c.diverged_recorded_bytes)} recorded)"
        if c.diverged_at is not None
        else ""
    )
    return [
        f"  baseline     DIVERGES from the recorded run: peak reserved"
        f" {fmt(c.baseline_peak_reserved_bytes)}{_at(c.baseline_peak_index)} against"
        f" {fmt(c.recorded_peak_reserved_bytes)}{_at(c.recorded_peak_index)} recorded"
        f" ({_gap(c.gap_bytes, c.recorded_peak_reserved_bytes)}){where}; {counts}"
        f" ({c.recorded_segment_events:,} recorded){releases}",
        f"  why          {c.why}; every setting's change is measured against this baseline,"
        " not against the recorded run, so none is trusted",
    ]


def _gap(gap: int, recorded: int) -> str:
    """``88.00 MiB less, 0.65%``: how far the baseline's peak is from the recording's."""
    share = f", {abs(gap) / recorded:.2%}" if recorded else ""
    return f"{fmt(abs(gap))} {'less' if gap < 0 else 'more'}{share}"


def _at(index: int | None) -> str:
    return f" at event {index:,}" if index is not None else ""


def _history_line(r: Replay) -> str:
    """What recording started with; without history, what the snapshot alone holds."""
    start = {
        "empty": "an empty allocator",
        "cached": "cached segments, no live blocks",
        "live": f"{r.live_at_start_blocks:,} live blocks ({fmt(r.live_at_start_bytes)})",
    }[r.start]
    if r.history:
        events = "1 event" if r.trace_events == 1 else f"{r.trace_events:,} events"
        return f"  history      {events}, recording started with {start}"
    if r.recorded == NOTHING_ALLOCATED:
        return "  history      none: nothing allocated"
    held = start if r.start == "live" else "no live blocks"  # the snapshot's, not a start
    what = "stacks recorded, no trace" if r.recorded == STACKS_ONLY else "none recorded"
    return f"  history      {what}; the snapshot alone holds {held}"


def _self_check_line(r: Replay) -> str:
    """How well the model reproduced the recorded run; without history there is nothing to run."""
    if not r.history:
        return "  self-check   not run: no allocator events to replay"
    if r.fidelity is None:
        segments = "no segment allocated or released to compare"
    else:
        segments = (
            f"segment events reproduced {r.fidelity:.1%}"
            f" ({r.segment_events_matched:,}/{r.segment_events:,})"
        )
    if r.placements_checked:
        placed = (
            f"block placements {r.placements_same:,}/{r.placements_checked:,} at the recorded"
            " address"
        )
    else:
        placed = "no block placement to compare"
    return f"  self-check   {segments}; {placed}"


def _bound_lines(r: Replay) -> list[str]:
    """The lower bound, against the limit or the capacity standing in for it; why none."""
    b = r.lower_bound
    if b is not None:
        verdict = (
            f"exceeds it by {fmt(b.margin_bytes)}: no setting could have fit"
            if b.proven
            else f"fits by {fmt(-b.margin_bytes)}: avoidable by placement"
        )
        return [f"  lower bound  {needed_text(b)} vs {_against(b)}: {verdict}"]
    if r.oom is None:
        return []
    missing = [
        words
        for value, words in (
            (r.oom.device_total_bytes, "no limit recorded"),
            (r.oom.device_free_bytes, DEVICE_FREE_UNKNOWN),
            (r.oom.reserved_bytes, "reserved at the OOM unknown"),
        )
        if value is None
    ]
    return [f"  lower bound  none: {', '.join(missing)}, so what the OOM could use is not known"]


def _against(b: LowerBound) -> str:
    """What the bound is measured against, and where that figure came from."""
    if b.limit_source == CAPACITY:
        return (
            f"capacity {fmt(b.limit_bytes)} = reserved + device free at the OOM; no limit recorded"
        )
    return f"limit {fmt(b.limit_bytes)}"


def _requirements(r: Replay) -> list[str]:
    """One line per what-if row whose outcome needs more than its settings."""
    return [f"  ({row.name} also needs {row.requires})" for row in r.what_if if row.requires]


def _age(age_us: int | None) -> str:
    """How long a pinner had lived: seconds, or milliseconds below one second."""
    if age_us is None:
        return "before recording"
    return f"{age_us / 1e6:.3f} s" if age_us >= 1_000_000 else f"{age_us / 1e3:.3f} ms"


def _these_tensors(count: int) -> str:
    return "this tensor" if count == 1 else f"these {count:,} tensors"
