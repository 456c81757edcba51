"""``summary``'s text: the diagnosis first, then a compact table a tired person reads in ten
seconds, the sites, what filled the device.

By default it fits a screen (:data:`SCREEN` lines): the top cause and at most two more on one
line each, the verdict, the figures, the top sites, one kind table and one call tree.
``verbose`` prints everything: every cause with its evidence and fixes, what evidence is
missing, each moment's kinds and call tree, live bytes per step. Paragraphs wrap to ``width``.
"""

from __future__ import annotations

from collections import Counter

from memforensics._text import SCREEN_WIDTH, cut, shorten, wrap
from memforensics._units import format_bytes as fmt
from memforensics.analysis.diagnosis import Diagnosis, cause_words
from memforensics.analysis.dump import (
    BEFORE_RECORDING,
    KIND_WIDTH,
    NATIVE_ONLY,
    NATIVE_ONLY_MEANING,
    UNKNOWN_SITE,
    caller_line,
    context_lines,
    hidden_rows,
    history_words,
    kind_and_site,
    origin_words,
)
from memforensics.analysis.filled import Moment, filled_lines
from memforensics.analysis.filled.text import kinds_lines, tree_lines
from memforensics.analysis.oom import (
    at_risk_headline,
    at_risk_lines,
    device_free_text,
    outside_text,
)
from memforensics.analysis.summary.summary import Oom, SiteBytes, Summary

WIDTH = SCREEN_WIDTH
"""Lines keep this width unless the caller gives the terminal's."""
SCREEN = 25
"""The default text of one file fits in this many lines."""
_SITE_COLUMN = 23  # where the kind column starts; the caller goes under the site after it
_GAP = "   "  # between the cells of a figures row
_SITE_HEADER = f"  {'live bytes':>11} {'blocks':>7}  {'kind':<{KIND_WIDTH}} site"
_LABEL = 15  # where a labelled row's text starts
_MIN_SITES = 3
MOST = 0.8
"""The default site rows are the first that hold this share of the moment judged."""


def summary_text(
    s: Summary,
    *,
    rows: int | None = 10,
    width: int = WIDTH,
    verbose: bool = False,
    fit: bool = True,
) -> str:
    """The ``summary`` text of ``s``: one screen by default, everything with ``verbose``
    (then each of its ``other_devices`` in full too); ``rows`` caps the per-step table (None:
    every row). The site table is already cut by ``summarize(top=...)``; both say how many
    rows they hide. ``fit``: cut the site rows to the screen (False: the user asked for a
    number of rows, so every row ``summarize`` kept is shown)."""
    if verbose:
        return "\n\n".join(_one_device(item, rows, width) for item in (s, *s.other_devices))
    return "\n".join(_screen(s, width, fit=fit))


def _label(label: str, text: str, width: int) -> list[str]:
    """``  label        text`` wrapped to ``width`` under its text column."""
    return wrap(text, width, f"  {label:<{_LABEL - 2}}", " " * _LABEL)


def _cells(label: str, first: str, cells: list[str], width: int) -> list[str]:
    """A figures row: ``label``, ``first`` right-aligned under the figures column, then each
    of ``cells`` on the same line while it fits ``width``, else on a line of its own under
    the text column."""
    lines = [f"  {label:<{_LABEL - 2}}{first:>12}"]
    for cell in cells:
        if len(lines[-1]) + len(_GAP) + len(cell) <= width:
            lines[-1] += _GAP + cell
        else:
            lines += _label("", cell, width)
    return lines


def diagnosis_lines(d: Diagnosis | None, width: int, *, verbose: bool) -> list[str]:
    """The headline (wrapped); then at most two more causes on one line each, or (verbose)
    every cause with its evidence and fixes and what evidence is missing."""
    if d is None:
        return []
    lines = _label("cause", d.headline, width)  # whole: the cause and its fix are never cut
    rest = d.causes[1:]
    if not verbose:
        for index, cause in enumerate(rest[:2]):
            label = "also" if index == 0 else ""
            words = cause_words(cause.name, cause.evidence)
            lines.append(cut(f"  {label:<{_LABEL - 2}}{words}", width))
        return lines
    for index, cause in enumerate(d.causes):
        label = "causes" if index == 0 else ""
        lines += _label(label, f"{index + 1}. {cause_words(cause.name, cause.evidence)}", width)
        for fix in cause.fixes:
            freed = "" if fix.bytes is None else f", frees {fmt(fix.bytes)}"
            enough = ", enough for the request" if fix.sufficient else ""
            lines += wrap(
                f"fix: {fix.action}{freed}{enough}", width, " " * (_LABEL + 3), " " * (_LABEL + 8)
            )
    for note in d.missing:
        lines += _label("missing", note, width)
    return lines


def _screen(s: Summary, width: int, *, fit: bool = True) -> list[str]:
    """One file on one screen: the header, the cause and its fix (whole), up to two more causes,
    the verdict sentence (whole), the figures, then the site rows of the moment judged, one kind
    table and one call tree in what is left of :data:`SCREEN` lines."""
    head = _header(s, width)
    head += diagnosis_lines(s.diagnosis, width, verbose=False)
    head += _label("verdict", _verdict_line(s), width)
    if s.at_risk is not None:
        head.append(cut(f"  {'':<{_LABEL - 2}}{at_risk_headline(s.at_risk)}", width))
    head += _figures(s, width)
    head += _other_devices(s, width)
    body = _body(s, SCREEN - len(head), width, fit=fit)
    note = _native(body, width)
    if note:
        body = _body(s, SCREEN - len(head) - len(note), width, fit=fit)
        note = _native(body, width)
    return head + body + note


def _body(s: Summary, room: int, width: int, *, fit: bool) -> list[str]:
    """The site rows of the moment judged, its kinds and its call tree in ``room`` lines: the
    kind table shrinks to a sentence when its rows would crowd out the sites or the tree."""
    moment = s.oom.live() if s.oom is not None and s.oom.live() is not None else s.peak
    title = _moment_title(moment)
    rows, count, total, where = s.top_sites, s.site_count, s.allocated_bytes, "at the snapshot"
    if s.after_oom and s.oom is not None and s.oom.top_sites:  # the moment judged: the OOM's
        rows, count = s.oom.top_sites, s.oom.site_count
        total, where = s.oom.allocated_bytes or 0, title
    elif moment is not None and moment.name == "oom":  # a snapshot taken at the OOM is its state
        where = title
    elif s.peak_sites and moment is s.peak and moment is not None:  # no OOM: the peak's
        rows, count, total, where = s.peak_sites, s.peak_site_count, moment.live_bytes, title
    tree = (
        tree_lines(moment.tree, limit=14, width=width - 2)
        if moment is not None and moment.live_bytes
        else []
    )
    tree_min = 1 + min(len(tree), 2) if tree else 0
    sites_min = 1 + min(len(rows), _MIN_SITES) + (len(rows) > _MIN_SITES) if rows else 0
    kinds = _kinds_table(moment, title, width, s.peak is not None)
    if len(kinds) > 2 and sites_min + len(kinds) + tree_min > room:
        kinds = _kinds_sentence(moment, "" if rows and where == title else title, width)
    fit_rows = max(_MIN_SITES - 1, room - 1 - len(kinds) - tree_min)  # the tree stays
    shown = _holding_most(rows, count, total, fit_rows) if fit else rows
    left = room - 1 - len(kinds) - tree_min  # lines the rows may take, the tree kept
    split = _split(shown, count, left) if fit else len(rows)
    sites = _site_rows(shown, count, total, callers=False, width=width, split=split, among=rows)
    if not fit:
        room = max(room, 1 + len(sites) + len(kinds) + tree_min)
    body = [f"{_SITE_HEADER} ({where})", *sites] if sites else []
    if len(body) + len(kinds) <= room:
        body += kinds
    tree_room = room - len(body) - 1
    if tree and tree_room >= 1:
        body.append(f"  call tree {title} (--verbose for more)")
        body += [f"  {line}" for line in tree[:tree_room]]
    return body[: max(room, 0)]


def _holding_most(
    rows: tuple[SiteBytes, ...], count: int, total: int, room: int
) -> tuple[SiteBytes, ...]:
    """The first site rows that together hold :data:`MOST` of ``total`` (the moment's live
    bytes), in ``room`` lines with the line that counts the rows left out."""
    held = 0
    needed = len(rows)
    for index, row in enumerate(rows):
        held += row.bytes
        if held >= MOST * total:
            needed = index + 1
            break
    shown = rows[: max(needed, 1)]
    if len(shown) + (count > len(shown)) > room:
        shown = rows[: max(room - 1, 1)]
    return shown


def _split(shown: tuple[SiteBytes, ...], count: int, room: int) -> int:
    """How many of the ``shown`` sites, from the first, have room for a row per kind in
    ``room`` lines (with the line that counts the rows left out); the others take one row."""
    split = len(shown)
    while split and _lines(shown[:split]) + len(shown) - split + (count > len(shown)) > room:
        split -= 1
    return split


def _lines(rows: tuple[SiteBytes, ...]) -> int:
    """Lines the site rows take with a row per kind of each site."""
    return sum(len(row.by_kind()) for row in rows)


def _kinds_table(moment: Moment | None, title: str, width: int, classified: bool) -> list[str]:
    """The kinds table of ``moment``, its title beside the column header when it fits."""
    if moment is None or not moment.kinds:
        return ["  live memory by kind: nothing live"] if classified else []
    table = kinds_lines(moment.kinds, "")[2:]  # the column header and the rows
    if len(table[0]) + 2 + len(title) <= width:
        return [f"{table[0]}  {title}", *table[1:]]
    return [f"  live memory by kind {title}", *table]


def _kinds_sentence(moment: Moment | None, title: str, width: int) -> list[str]:
    """The kinds of ``moment`` as one wrapped sentence, biggest first (short of room); without
    ``title`` when the site table above already names the moment, and without each kind's
    share when that saves a line."""
    if moment is None:
        return []
    total = sum(kind.bytes for kind in moment.kinds) or 1
    ranked = sorted(moment.kinds, key=lambda kind: -kind.bytes)
    sentences = [
        _label("kinds", f"{title}: {words}" if title else words, width)
        for words in (
            ", ".join(f"{k.kind} {fmt(k.bytes)} ({100 * k.bytes / total:.0f}%)" for k in ranked),
            ", ".join(f"{k.kind} {fmt(k.bytes)}" for k in ranked),  # shares: --verbose
        )
    ]
    return min(sentences, key=len)


_PATH_ROOM = 24  # the least of a path kept beside its details on the header line


def _header(s: Summary, width: int) -> list[str]:
    """``FILE  (kind oom, rank 0, step 25)``: the file's path shortened so the line fits; where
    the details leave the path less than :data:`_PATH_ROOM` (a planned dump's), the path keeps
    a line of its own and the details wrap under it, every line counted on the screen."""
    where = _where(s)
    if s.after_oom and s.oom is not None and s.oom.trace_index is not None:
        where += ", judged at the OOM"  # the site rows' title says its trace entry
    room = width - len(where) - 4
    if room >= _PATH_ROOM:
        return [shorten(s.file, room) + f"  ({where})"]
    return [shorten(s.file, width), *wrap(f"({where})", width, "  ")]


_OTHER_DEVICES = 3  # other devices listed one line each; more are counted


def _other_devices(s: Summary, width: int) -> list[str]:
    """One line per other device with memory (the first few, then how many more)."""
    others = s.other_devices
    shown = others if len(others) <= _OTHER_DEVICES else others[: _OTHER_DEVICES - 1]
    lines = [
        cut(f"  device {other.device_index}: reserved {fmt(other.reserved_bytes)}, allocated"
             f" {fmt(other.allocated_bytes)} (--device {other.device_index} explains it)", width)
        for other in shown
    ]  # fmt: skip
    if len(shown) < len(others):
        lines.append(f"  … {len(others) - len(shown)} more devices with memory (--verbose)")
    return lines


def _where(s: Summary) -> str:
    """``kind oom, rank 0, step 25``."""
    where = [origin_words(s.kind, s.rank, s.has_sidecar, s.predicted)]
    if s.steps:
        where.append(f"steps {s.steps[0]}-{s.steps[1]}")
    elif s.step is not None:
        where.append(f"step {s.step}")
    return ", ".join(where)


def _verdict_line(s: Summary) -> str:
    """The allocator's category, under the cause: ``FRAGMENTATION (allocator): <first
    sentence>``."""
    if s.at_risk is not None:
        return "AT RISK (no OOM yet)"
    first = s.verdict.explanation.split(". ")[0].rstrip(".")
    reason = f" ({s.verdict.reason})" if s.verdict.reason else ""
    return f"{s.verdict.name.upper()}{reason}: {first}"


def _figures(s: Summary, width: int) -> list[str]:
    """Reserved, allocated and free (at the OOM when the snapshot came after it), the OOM's
    request and the device, the history; each row in ``width``. What the file cannot tell is
    for ``--verbose``: the cause and the history line already say what changes the answer."""
    at = s.oom if s.oom is not None and s.oom.judged else None
    if at is not None and s.after_oom:
        lines = _cells(
            "reserved",
            fmt(at.reserved_bytes),
            [f"allocated {fmt(at.allocated_bytes)} at the OOM"],
            width,
        )
        lines += _cells(
            "free inside",
            fmt(at.free_in_reserved_bytes),
            [f"largest free block of its pool {fmt(at.largest_free_block_bytes)}"],
            width,
        )
        lines += _cells(
            "unwound",
            fmt(s.allocated_bytes),
            [f"live after unwinding freed {fmt(s.unwound_bytes)}"],
            width,
        )
    else:
        lines = _cells(
            "reserved",
            fmt(s.reserved_bytes),
            [f"allocated {fmt(s.allocated_bytes)}", f"active {fmt(s.active_bytes)}"],
            width,
        )
        lines += _cells(
            "free inside",
            fmt(s.free_in_reserved_bytes),
            [f"largest free block {fmt(s.largest_free_block_bytes)}", f"segments {s.segments:,}"],
            width,
        )
    if at is not None:
        lines += _cells(
            "OOM request",
            fmt(at.requested_bytes),
            [
                f"allocation {fmt(at.allocation_bytes)}",
                f"limit {_known(at.device_total_bytes)}, {device_free_text(at.device_free_bytes)}",
            ],
            width,
        )
    elif s.oom is not None:
        lines += _cells(
            "OOM request",
            fmt(s.oom.requested_bytes),
            [device_free_text(s.oom.device_free_bytes), f"total {fmt(s.oom.device_total_bytes)}"],
            width,
        )
    if s.oom is None and s.allocator_peak_bytes is not None:
        counted = "allocated at most, by the allocator's own count"
        lines += _cells("peak", fmt(s.allocator_peak_bytes), [counted], width)
    if s.judged_note:
        lines += _label("warning", s.judged_note, width)
    lines += _label("history", _history(s, brief=True), width)
    return lines + context_lines(s.devices, s.device_index, s.device_reason, ())


def _known(size: int | None) -> str:
    """A size, or ``not known`` (never a dash, never ``0 B``)."""
    return "not known" if size is None else fmt(size)


def _history(s: Summary, *, brief: bool = False) -> str:
    return history_words(
        s.shape.history, s.trace_entries, s.truncated, s.live_at_start, brief=brief
    )


def _moment_title(moment: Moment | None) -> str:
    """``at the OOM, trace entry 42``, ``at the peak, trace entry 7``, ``at the snapshot``."""
    if moment is None or moment.name == "snapshot":
        return "at the snapshot"
    name = "OOM" if moment.name == "oom" else moment.name
    return f"at the {name}, trace entry {moment.position:,}"


def _native(shown: list[str], width: int) -> list[str]:
    """What a ``<no Python frames>`` row is, once, when a shown line holds one."""
    if not any(line.endswith(NATIVE_ONLY) for line in shown):
        return []
    return _paragraph(f"{NATIVE_ONLY}: {NATIVE_ONLY_MEANING}.", blank=False, width=width)


def _one_device(s: Summary, rows: int | None, width: int = WIDTH) -> str:
    """The table of one device."""
    where = [origin_words(s.kind, s.rank, s.has_sidecar, s.predicted)]
    if s.steps:
        where.append(f"steps {s.steps[0]}-{s.steps[1]}")
    elif s.step is not None:
        where.append(f"step {s.step}")
    lines = [
        f"{s.file}  ({', '.join(where)})",
        *diagnosis_lines(s.diagnosis, width, verbose=True),
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
            f" {device_free_text(at.device_free_bytes)}, {outside_text(at.external_bytes)}"
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
    lines.append(f"  history      {_history(s)}")
    lines += context_lines(s.devices, s.device_index, s.device_reason, s.limits)
    if s.at_risk is not None:
        lines += ["", *at_risk_lines(s.at_risk)]
    lines += _paragraph(s.verdict.explanation, width=width)
    if s.verdict.advice:
        lines += _paragraph(f"→ {s.verdict.advice}", blank=False, width=width)
    lines += _site_table(s, width)
    lines += _unrecorded_note(s, width)
    lines += filled_lines(s.kinds, s.peak, s.oom.live() if s.oom is not None else None, s.known)
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


def _site_table(s: Summary, width: int) -> list[str]:
    lines: list[str] = []
    if s.after_oom and s.oom is not None and s.oom.top_sites:
        lines += ["", f"{_SITE_HEADER} (live at the OOM)"]
        lines += _site_rows(
            s.oom.top_sites, s.oom.site_count, s.oom.allocated_bytes or 0, width=width
        )
        lines += ["", f"{_SITE_HEADER} (after the OOM, at the snapshot)"]
        return lines + _site_rows(s.top_sites, s.site_count, s.allocated_bytes, width=width)
    if s.peak_sites and s.peak is not None and _held(s.peak_sites) != _held(s.top_sites):
        lines += ["", f"{_SITE_HEADER} (live {_moment_title(s.peak)})"]
        lines += _site_rows(s.peak_sites, s.peak_site_count, s.peak.live_bytes, width=width)
        lines += ["", f"{_SITE_HEADER} (at the snapshot)"]
        return lines + _site_rows(s.top_sites, s.site_count, s.allocated_bytes, width=width)
    if s.top_sites:
        lines += ["", _SITE_HEADER]
    return lines + _site_rows(s.top_sites, s.site_count, s.allocated_bytes, blank=True, width=width)


def _held(sites: tuple[SiteBytes, ...]) -> list[tuple[str, str, int, int]]:
    """What site rows hold (their kinds aside): two moments whose rows hold the same are one."""
    return [(t.site, t.caller, t.bytes, t.blocks) for t in sites]


def _site_rows(
    sites: tuple[SiteBytes, ...],
    count: int,
    total: int,
    *,
    blank: bool = False,
    callers: bool = True,
    width: int = WIDTH,
    split: int | None = None,
    among: tuple[SiteBytes, ...] | None = None,
) -> list[str]:
    """One row per kind of each site, the site's kinds biggest first and together (a site of
    several kinds never shows its total beside one kind), then its caller (without
    ``callers``, only under a site that has several rows in ``among``, the table's rows before
    any are left out (None: ``sites``), reached from several callers: it tells its rows apart
    and names them as a growth cause does); each in ``width``;
    then how many sites are hidden. Past the first ``split`` sites (None: none), a site takes
    one row, its kind column saying how many kinds its bytes are of (``3 kinds``)."""
    lines: list[str] = []
    room = width - _SITE_COLUMN
    labels = Counter(t.site for t in (sites if among is None else among))
    for index, t in enumerate(sites):
        parts = [(part.bytes, part.blocks, part.kind) for part in t.by_kind()]
        if split is not None and index >= split and len(parts) > 1:
            parts = [(t.bytes, t.blocks, f"{len(parts)} kinds")]
        for size, blocks, kind in parts:
            lines.append(f"  {fmt(size):>11} {blocks:>7,}  {kind_and_site(kind, t.site, room)}")
        if callers or labels[t.site] > 1:
            lines += caller_line(t.site, t.caller, _SITE_COLUMN, kinded=True, width=room)
    hidden = count - len(sites)
    if hidden > 0:
        rest = total - sum(t.bytes for t in sites)
        lines += [""] if blank and not sites else []
        lines += hidden_rows(hidden, "more site", f" ({fmt(rest)} in all)")
    return lines


def _unrecorded_note(s: Summary, width: int) -> list[str]:
    """Say what ``<before recording>``, ``<no Python frames>`` and ``<unknown>`` rows are, and
    how to get their sites."""
    lines: list[str] = []
    if s.before_recording_blocks:
        lines += _paragraph(
            f"{BEFORE_RECORDING}: {s.before_recording_blocks:,} live blocks"
            f" ({fmt(s.before_recording_bytes)}) have no stack: they were allocated before"
            " allocator history recording started (or while it was off).",
            width=width,
        )
        lines += _paragraph(
            "→ To see their sites, start recording earlier: call memforensics.install() before"
            " the model, optimizer and data reach the device, and keep oom_history on"
            ' ("state" or "all"); with PyTorch alone, call'
            " torch.cuda.memory._record_memory_history() first.",
            blank=False,
            width=width,
        )
    native = [t for t in s.top_sites if t.site == NATIVE_ONLY]
    if native:
        count = sum(t.blocks for t in native)
        lines += _paragraph(
            f"{NATIVE_ONLY}: {count:,} live block{'' if count == 1 else 's'}"
            f" ({fmt(sum(t.bytes for t in native))}), {NATIVE_ONLY_MEANING}.",
            width=width,
        )
    unknown = [t for t in s.top_sites if t.site == UNKNOWN_SITE]
    if unknown:
        lines += _paragraph(
            f"{UNKNOWN_SITE}: {sum(t.blocks for t in unknown):,} live blocks"
            f" ({fmt(sum(t.bytes for t in unknown))}) have stacks whose Python frames are all"
            " inside torch.",
            width=width,
        )
    return lines


def _paragraph(text: str, *, blank: bool = True, width: int = WIDTH) -> list[str]:
    """A long sentence wrapped to ``width``, indented under the table."""
    return ([""] if blank else []) + wrap(text, max(width, 40), "  ", "    ")
