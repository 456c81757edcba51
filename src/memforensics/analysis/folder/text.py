"""A run folder's text: ``ls``'s table of dumps, and ``overview``'s facts and ranks.

For 2,048 ranks a table of every rank is noise: ``overview`` prints the run's facts in a few
lines, then the ranks that failed, stand out, or serve as the healthy peer (``--all`` prints
them all).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timezone

from memforensics._text import SCREEN_WIDTH, printable, wrap
from memforensics._text import table as text_table
from memforensics._units import format_bytes, format_signed_bytes
from memforensics.analysis.diagnosis import Diagnosis
from memforensics.analysis.dump import PREDICTED
from memforensics.analysis.folder.forecast import Forecast
from memforensics.analysis.folder.ls import RunListing
from memforensics.analysis.folder.overview import COMPARED, Overview, RankFacts
from memforensics.analysis.folder.watch import WatchRow, WatchView

TOP = 5
_LABELS = {
    "allocated_bytes": "allocated",
    "reserved_bytes": "reserved",
    "active_bytes": "active",
    "alloc_retries": "retries",
    "external_bytes": "external",
    "device_free_bytes": "device free",
}


def rank_ranges(ranks: Iterable[int], limit: int = 12) -> str:
    """``0-3, 7, 9-12``: runs of consecutive ranks, at most ``limit`` runs, then ``+N more``."""
    runs: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    text = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:limit]]
    if len(runs) > limit:
        text.append(f"+{sum(b - a + 1 for a, b in runs[limit:])} more")
    return ", ".join(text)


def _change(value: int | None, *, count: bool) -> str:
    """A difference to the peer: a count as ``+3``, bytes as ``+1.50 GiB``."""
    if value is None:
        return "-"
    return f"{value:+,}" if count else format_signed_bytes(value)


def _growth(value: float | None) -> str:
    return "-" if value is None else format_signed_bytes(round(value))


def _when(moment: float | None) -> str:
    if moment is None:
        return "time unknown"
    try:
        return datetime.fromtimestamp(moment, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):  # a sidecar's or line's odd time
        return "time unknown"


def overview_text(view: Overview, *, all_ranks: bool = False, width: int = SCREEN_WIDTH) -> str:
    """The whole text output, its cause wrapped to ``width``."""
    lines = [_head(view), _failures(view)]
    lines += _cause(view, width)
    lines += _outliers(view)
    lines += _comparison(view)
    lines += forecast_lines(view.forecasts)
    lines += _problems(view)
    lines.append("")
    lines += _table(view, view.ranks if all_ranks else _worth_a_look(view), width)
    return "\n".join(line for line in lines if line is not None)


def _head(view: Overview) -> str:
    of = f" of {view.world_size:,}" if view.world_size else ""
    steps = f"steps {view.steps[0]:,}-{view.steps[1]:,}" if view.steps else "no steps"
    counts = sorted(r.lines for r in view.ranks if r.lines)
    median = counts[len(counts) // 2] if counts else 0
    return (
        f"run {view.root}: {len(view.ranks):,} ranks seen{of}, {steps}, "
        f"{median:,} journal lines per rank (median)"
    )


def at_step(step: int | None) -> str:
    """Where in training an OOM happened: ``at step 25``, or outside every ``step()`` block."""
    return "outside any step" if step is None else f"at step {step:,}"


def _failures(view: Overview) -> str:
    first = view.first_oom
    if first is None:
        return "no OOM: no journal line or dump records one"
    where = f"first OOM: rank {first.rank} {at_step(first.step)}, {_when(first.time)}"
    order = [f.rank for f in view.failures]
    if len(order) == 1:
        return f"{where}; no other rank failed"
    shown = ", ".join(str(r) for r in order[: TOP * 2])
    more = f" (+{len(order) - TOP * 2} more)" if len(order) > TOP * 2 else ""
    return f"{where}; {len(order):,} ranks failed, in this order: {shown}{more}"


def _cause(view: Overview, width: int) -> list[str]:
    """The first failing rank's top cause and fix (summary's headline for its OOM dump)."""
    return cause_lines(view.first_oom_diagnosis if view.first_oom is not None else None, width)


def cause_lines(diagnosis: Diagnosis | None, width: int = SCREEN_WIDTH) -> list[str]:
    """``cause: <headline>`` of the first failed rank's OOM dump, wrapped to ``width`` (none
    without one): the headline ``summary`` prints for that dump, in ``overview`` and ``watch``
    alike."""
    if diagnosis is None:
        return []
    return wrap(f"cause: {diagnosis.headline}", width, "", "  ")


def _outliers(view: Overview) -> list[str]:
    if not view.outliers:
        if len(view.ranks) < 3:
            return ["stand out: not judged (fewer than 3 ranks to compare)"]
        return [
            "stand out: none (no rank's peak reserved or reserved growth is far from the"
            " other ranks' median)"
        ]
    parts = []
    for item in view.outliers[:TOP]:
        if item.figure == "peak_reserved_bytes":
            value, median = format_bytes(int(item.value)), format_bytes(int(item.median))
            what = f"peak reserved {value} (median {median})"
        else:
            what = f"reserved growth {_growth(item.value)}/1k steps (median {_growth(item.median)})"
        parts.append(f"rank {item.rank} {what}")
    more = f"; +{len(view.outliers) - TOP} more" if len(view.outliers) > TOP else ""
    return ["stand out: " + "; ".join(parts) + more]


def forecast_sentence(item: Forecast) -> str:
    """``rank 23 reaches its 80.00 GiB limit near step 3,900, at +10.00 MiB a step; last seen
    at step 998``."""
    return (
        f"rank {item.rank} reaches its {format_bytes(item.device_total_bytes)} limit near step"
        f" {item.step:,}, at {format_signed_bytes(round(item.growth_per_step))} a step;"
        f" last seen at step {item.last_step:,} (confidence {item.confidence:.2f})"
    )


def forecast_lines(forecasts: Sequence[Forecast]) -> list[str]:
    """The overview's forecast: the soonest ranks to run out, or why none is forecast."""
    if not forecasts:
        return [
            "forecast: none (no rank that has not run out climbs a steady line of live +"
            " outside-PyTorch bytes)"
        ]
    lines = [f"forecast: {forecast_sentence(item)}" for item in forecasts[:TOP]]
    if len(forecasts) > TOP:
        lines.append(f"forecast: +{len(forecasts) - TOP} more ranks drift upward")
    return lines


def _comparison(view: Overview) -> list[str]:
    cmp = view.comparison
    first = view.first_oom
    if cmp is None:
        if first is None:
            return []
        failed = view.rank(first.rank)
        if failed is None or not failed.lines:
            return [
                f"no comparison with a healthy rank: rank {first.rank} wrote no journal line"
                " before its OOM"
            ]
        return [
            f"no comparison with a healthy rank: no rank that neither failed nor stands out"
            f" wrote a journal line at rank {first.rank}'s last step before its OOM"
        ]
    diffs = cmp.differences
    shown = ", ".join(
        f"{_LABELS[key]} {_change(diffs[key], count=key == 'alloc_retries')}" for key in COMPARED
    )
    at = f"step {cmp.step:,}" + ("" if cmp.peer_step == cmp.step else f" (peer: {cmp.peer_step:,})")
    return [f"rank {cmp.rank} vs healthiest peer rank {cmp.peer} at {at}: {shown}"]


def _problems(view: Overview) -> list[str]:
    p = view.problems
    parts = []
    if p.ranks_without_journal:
        parts.append(f"no journal from rank(s) {rank_ranges(p.ranks_without_journal)}")
    if p.ranks_missing:
        listed, count = p.ranks_missing, p.ranks_missing_count
        more = f" (+{count - len(listed):,} more)" if count > len(listed) else ""
        parts.append(f"nothing at all from rank(s) {rank_ranges(listed)}{more}")
    if p.absurd_claims:
        parts.append(f"ignored as absurd: {'; '.join(p.absurd_claims[:TOP])}")
    if p.torn_last_lines:
        parts.append(f"torn last line (skipped): rank(s) {rank_ranges(p.torn_last_lines)}")
    if p.bad_lines:
        parts.append(skipped_lines_text(p.bad_lines))
    for rank, pids in list(p.restarts.items())[:TOP]:
        parts.append(f"rank {rank} restarted (pids {', '.join(str(x) for x in pids)})")
    if len(p.restarts) > TOP:
        parts.append(f"+{len(p.restarts) - TOP} more restarted ranks")
    if p.not_closed:
        parts.append(
            f"no close line (killed, hung or running): rank(s) {rank_ranges(p.not_closed)}"
        )
    if p.unreadable:
        parts.append(f"{len(p.unreadable)} file(s) unreadable: {p.unreadable[0]}")
    return ["problems: " + "; ".join(parts)] if parts else ["problems: none"]


def _worth_a_look(view: Overview) -> list[RankFacts]:
    wanted: list[int] = [f.rank for f in view.failures[:TOP]]
    wanted += [o.rank for o in view.outliers[:TOP]]
    wanted += [f.rank for f in view.forecasts[:TOP]]
    if view.comparison is not None:
        wanted.append(view.comparison.peer)
    by_peak = sorted(
        (r for r in view.ranks if r.peak_reserved_bytes is not None),
        key=lambda r: (-(r.peak_reserved_bytes or 0), r.rank),
    )
    wanted += [r.rank for r in by_peak[:TOP]]
    seen: dict[int, RankFacts] = {}
    for rank in wanted:
        facts = view.rank(rank)
        if facts is not None and rank not in seen:
            seen[rank] = facts
    return list(seen.values())


RANK_COLUMNS = (
    "rank", "peak reserved", "last reserved", "retries", "external", "reserved/1k steps",
    "allocated/1k steps", "OOM at step", "forecast step",
)  # fmt: skip
"""``overview``'s rank table columns, in order."""
RANK_NARROW_DROPS = (2, 6, 3)
"""Columns the rank table leaves out, in this order (last reserved, allocated/1k steps,
retries), until its rows fit the width."""
_SHORT_RANK_COLUMNS = {5: "reserved/1k", 6: "allocated/1k", 7: "OOM step", 8: "forecast"}
"""Shorter headers for the narrow table (growth per 1,000 steps, the step of the OOM and of
the forecast)."""


def _table(view: Overview, ranks: Sequence[RankFacts], width: int = SCREEN_WIDTH) -> list[str]:
    """One line per rank in ``width`` columns: the full headers where they fit, else shorter
    ones, then the columns of :data:`RANK_NARROW_DROPS` left out in turn (and said so)."""
    if not ranks:
        return ["no rank left a journal line or a dump"]
    rows: list[tuple[str, ...]] = [RANK_COLUMNS]
    for r in ranks:
        oom = (
            "-" if r.failure is None else ("?" if r.failure.step is None else f"{r.failure.step:,}")
        )
        rows.append(
            (
                str(r.rank),
                format_bytes(r.peak_reserved_bytes),
                format_bytes(r.last_reserved_bytes),
                "-" if r.alloc_retries is None else f"{r.alloc_retries:,}",
                format_bytes(r.external_bytes),
                _growth(r.reserved_growth_per_1k_steps),
                _growth(r.allocated_growth_per_1k_steps),
                oom,
                "-" if r.forecast is None else f"{r.forecast.step:,}",
            )
        )
    table, gone = text_table(rows, width)
    if max(map(len, table)) > width:
        rows[0] = tuple(_SHORT_RANK_COLUMNS.get(i, name) for i, name in enumerate(RANK_COLUMNS))
        table, gone = text_table(rows, width, drops=RANK_NARROW_DROPS)
    title = (
        "every rank:"
        if len(ranks) == len(view.ranks)
        else "ranks worth a look (--all: every rank):"
    )
    if gone:
        names = ", ".join(RANK_COLUMNS[i] for i in sorted(gone))
        table.append(f"(not shown in {width} columns: {names}; --json has them)")
    return [title, *table]


def _no_oom_head(listing: RunListing) -> str:
    """The head when no OOM dump is known: what ``ls`` saw, and what it did not open."""
    unknown = sum(1 for entry in listing.dumps if entry.kind is None)
    known = len(listing.dumps) - unknown
    empty = sum(1 for entry in listing.dumps if entry.empty and entry.kind == "oom")
    if empty:
        return f"no OOM dumps among {known} dump(s); {empty} empty OOM file(s) (0 bytes) ignored"
    if not unknown:
        return f"no OOM dumps among {known} dump(s)" if known else "no dumps"
    raw = (
        f"{unknown} snapshot(s) of unknown kind (no sidecar), not opened (ls reads sidecars and"
        " file names;"
        " `memforensics summary FILE` tells whether one is an OOM)"
    )
    return f"no OOM dump among {known} of known kind; {raw}" if known else f"no OOM known: {raw}"


LS_COLUMNS = ("kind", "rank", "step(s)", "size", "external", "time", "flags", "path")
"""``ls``'s columns, in order."""
LS_NARROW_DROPS = (5, 4, 3)
"""Columns ``ls`` leaves out, in this order (time, external, size), until its rows fit the
width; the path then keeps its end behind ``…``."""


def ls_text(listing: RunListing, width: int = SCREEN_WIDTH) -> str:
    """The ``ls`` table, oldest first, with the first OOM named on top: one line per dump in
    ``width`` columns (the time, then the external bytes and the size left out, in turn, where
    they do not fit, and said so; ``--json`` has them)."""
    first = listing.first_oom
    head = _no_oom_head(listing)
    if first is not None:
        step = "outside any step" if first.step is None else f"step {first.step}"
        head = (
            f"first OOM: rank {first.rank} {step}"
            f" at {first.created_at}  {printable(str(first.path))}"
            + (f" ({PREDICTED})" if first.predicted else "")
        )
    table, gone = _ls_table(listing, width, short=False)
    if max(map(len, table)) > width:  # the time to the second first, then the path, columns
        table, gone = _ls_table(listing, width, short=True)
    if gone:
        names = ", ".join(LS_COLUMNS[i] for i in sorted(gone))
        table.append(f"(not shown in {width} columns: {names}; --json has them)")
    lines = [head, "", *table, ""]
    lines.append(
        f"{len(listing.dumps)} dump(s); flags: P partial window, T truncated history, ? no sidecar,"
        f" E empty (0 bytes, no OOM), ~ {PREDICTED}; external: memory outside PyTorch at an OOM"
    )
    return "\n".join(lines)


def _short_time(stamp: str | None) -> str:
    """``2026-12-03 14:04:53``: an ISO time to the second, without its fraction and zone."""
    if not stamp:
        return "-"
    return stamp.replace("T", " ")[:19]


def _ls_table(listing: RunListing, width: int, *, short: bool) -> tuple[list[str], list[int]]:
    """The dump rows, whole; or, ``short``, fitted to ``width`` (times to the second, the path
    shortened, columns left out), and the columns left out."""
    rows: list[tuple[str, ...]] = [LS_COLUMNS]
    for entry in listing.dumps:
        where = (
            f"{entry.steps[0]}-{entry.steps[1]}"
            if entry.steps
            else ("-" if entry.step is None else str(entry.step))
        )
        flags = "".join(
            (
                "P" if entry.partial else "",
                "T" if entry.truncated else "",
                "" if entry.has_sidecar else "?",
                "E" if entry.empty else "",
                "~" if entry.predicted else "",
            )
        )
        rows.append(
            (
                entry.kind or "?",
                "-" if entry.rank is None else str(entry.rank),
                where,
                format_bytes(entry.snapshot_bytes),
                format_bytes(entry.external_bytes),
                _short_time(entry.created_at) if short else entry.created_at or "-",
                flags or "-",
                printable(str(entry.path)),
            )
        )
    if not short:
        return text_table(rows, width, left=(0, 5, 6, 7))
    return text_table(rows, width, drops=LS_NARROW_DROPS, left=(0, 5, 6, 7), squeeze=7)


WATCH_COLUMNS = (
    "rank", "step", "allocated", "reserved", "peak", "headroom", "retries", "OOMs", "forecast",
)  # fmt: skip
"""``watch``'s columns, in order; :func:`watch_cells` gives a row's cells."""


def watch_header(view: WatchView) -> str:
    """``16 ranks · allocated 1.20 TiB · reserved 1.30 TiB · 1 failed · first OOM: rank 13 at
    step 31, <time>``."""
    first = view.first_oom
    oom = "no OOM yet"
    if first is not None:
        oom = f"first OOM: rank {first.rank} {at_step(first.step)}, {_when(first.time)}"
    torn = f" · {view.torn_lines} line(s) still being written" if view.torn_lines else ""
    skipped = f" · {skipped_lines_text(view.skipped_lines)}" if view.skipped_lines else ""
    return (
        f"{view.ranks_seen:,} ranks · allocated {format_bytes(view.allocated_bytes)} · reserved "
        f"{format_bytes(view.reserved_bytes)} · {view.failed_ranks:,} failed · {oom}{torn}"
        f"{skipped}"
    )


def skipped_lines_text(count: int) -> str:
    """How every journal reader says it skipped lines (``journals.readable_line``'s rule)."""
    return f"{count:,} journal line(s) skipped (unreadable, or a negative or non-finite figure)"


def watch_cells(row: WatchRow) -> tuple[str, ...]:
    """One row's cells under :data:`WATCH_COLUMNS`."""
    if row.failed:
        forecast = "failed" + ("" if row.failed_step is None else f" at {row.failed_step:,}")
    elif row.forecast is not None:
        forecast = (
            f"step {row.forecast.step:,} "
            f"({format_signed_bytes(round(row.forecast.growth_per_step))}/step)"
        )
    else:
        forecast = "-"
    return (
        str(row.rank),
        "-" if row.step is None else f"{row.step:,}",
        format_bytes(row.allocated_bytes),
        format_bytes(row.reserved_bytes),
        format_bytes(row.peak_reserved_bytes),
        format_bytes(row.headroom_bytes),
        "-" if row.alloc_retries is None else f"{row.alloc_retries:,}",
        f"{row.ooms:,}",
        forecast,
    )


WATCH_NARROW_DROPS = ("peak", "retries", "allocated")
"""Columns the plain table leaves out, in this order, until its rows fit the width."""


def watch_text(view: WatchView, width: int = SCREEN_WIDTH) -> str:
    """The plain table (``watch --once`` into a pipe or file): header, then aligned rows, one
    line each; where they run over ``width``, the columns of :data:`WATCH_NARROW_DROPS` are left
    out in turn (and the header says which), never the headroom or the forecast."""
    rows = [WATCH_COLUMNS, *(watch_cells(row) for row in view.rows)]
    kept = list(range(len(WATCH_COLUMNS)))
    table = _aligned(rows, kept)
    for name in WATCH_NARROW_DROPS:
        if max(map(len, table)) <= width:
            break
        kept.remove(WATCH_COLUMNS.index(name))
        table = _aligned(rows, kept)
    left = [name for name in WATCH_COLUMNS if WATCH_COLUMNS.index(name) not in kept]
    if not view.rows:
        table = ["no journal lines yet"]
    elif left:
        table.append(f"(not shown in {width} columns: {', '.join(left)}; --json has them)")
    cause = cause_lines(view.first_oom_diagnosis, width)
    return "\n".join([watch_header(view), *cause, "", *table])


def _aligned(rows: Sequence[tuple[str, ...]], kept: Sequence[int]) -> list[str]:
    """``rows``' cells at the ``kept`` positions, each column right-aligned to its widest."""
    widths = {i: max(len(row[i]) for row in rows) for i in kept}
    return ["  ".join(row[i].rjust(widths[i]) for i in kept).rstrip() for row in rows]
