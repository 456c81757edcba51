"""The report's sections: small builders, each turning one device of one dump into plain data.

The page is one JSON document rendered by the inline script; every part of it comes from a
builder here. A builder takes a :class:`DumpContext` and returns a :class:`Section` (or None to
leave it out). ``type`` says how the page draws it: ``verdict``, ``facts``, ``timeline``,
``segments``, ``tree`` or the generic ``table`` (columns and rows). A new analysis adds a
section by appending a builder to :data:`DUMP_SECTIONS` (or :data:`RUN_SECTIONS` for a whole
folder) that returns a ``table``: no page code needed. Every section that can be empty says
what is missing and why in ``empty``, never a bare "(unknown)".

The replay section re-runs the trace once per allocator setting, so it is built only for an OOM
dump, on the OOM's device; when the replay cannot reproduce what the real allocator did, it shows
the replay's refusals instead of a table.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from memforensics._units import format_bytes as fmt
from memforensics.analysis.compare import Leaks
from memforensics.analysis.diagnosis import cause_words
from memforensics.analysis.dump import NATIVE_ONLY, NATIVE_ONLY_MEANING, PREDICTED, devices_text
from memforensics.analysis.filled import KINDS, CallNode
from memforensics.analysis.oom import (
    DEVICE_FREE_UNKNOWN,
    at_risk_headline,
    fragmentation_text,
    headroom_text,
)
from memforensics.analysis.replay import replay_dump
from memforensics.analysis.report.model import DumpContext, Section, SectionBuilder, table
from memforensics.analysis.report.timeline import segments_section, timeline_section
from memforensics.analysis.schema import to_json
from memforensics.analysis.summary import SiteBytes, Summary

# The report's section for a near-OOM dump: at risk, with fragmentation and headroom then.


def at_risk_section(ctx: DumpContext) -> Section | None:
    """Why a near-OOM snapshot was taken and how close the rank was; None for other dumps."""
    risk = ctx.summary.at_risk
    if risk is None:
        return None
    rows = [
        ["at risk", at_risk_headline(risk)],
        ["why", risk.reason or "not recorded (no sidecar reason)"],
        ["fragmentation", fragmentation_text(risk)],
        ["headroom", headroom_text(risk)],
    ]
    return table(
        "at-risk",
        "At risk (near-OOM snapshot)",
        [("", "text"), ("", "text")],
        rows,
        note="No OOM happened: this is the state before one, not an OOM verdict.",
    )


TREE_DEPTH = 24
TREE_SHARE = 0.002
_NATIVE_NOTE = f"{NATIVE_ONLY}: {NATIVE_ONLY_MEANING}."


def verdict_section(ctx: DumpContext) -> Section:
    """The answer first: the diagnosis's headline (the top cause and its fix), the other
    causes, then the allocator's verdict beneath it."""
    s = ctx.summary
    verdict = s.verdict
    data: dict[str, Any] = {
        "name": verdict.name,
        "explanation": verdict.explanation,
        "advice": verdict.advice,
    }
    diagnosis = s.diagnosis
    if diagnosis is not None:
        data["cause"] = diagnosis.headline
        data["causes"] = [cause_words(cause.name, cause.evidence) for cause in diagnosis.causes[1:]]
        data["missing"] = list(diagnosis.missing)
        if diagnosis.causes:
            data["advice"] = None  # the headline carries the top cause's fix
    if s.after_oom and s.oom is not None and s.oom.trace_index is not None:
        data["moment"] = (
            f"judged at the OOM (trace entry {s.oom.trace_index:,}), with"
            f" {fmt(s.oom.allocated_bytes)} live; the snapshot was taken after the OOM"
            f" (unwinding freed {fmt(s.unwound_bytes)})"
        )
    return Section("verdict", "Verdict", "verdict", data)


def facts_section(ctx: DumpContext) -> Section:
    """The numbers behind the verdict; every unknown says why it is unknown."""
    s = ctx.summary
    oom = s.oom
    no_oom = "no OOM recorded in this dump"
    missing = _missing(s)

    def oom_value(value: int | None) -> list[Any]:
        if oom is None:
            return ["text", no_oom]
        return ["bytes", value] if value is not None else ["text", missing]

    device_free = oom_value(oom.device_free_bytes if oom else None)
    if oom is not None and oom.device_free_bytes is None:
        device_free = ["text", f"{DEVICE_FREE_UNKNOWN}: {missing}"]
    truncated = {
        None: "unknown: no sidecar says whether the ring buffer overflowed",
        True: "yes: the oldest entries were dropped (raise max_entries)",
        False: "no",
    }[s.truncated]
    events = s.trace_entries
    rows = [
        ["kind", ["text", s.kind or "unknown: no sidecar and not in a memforensics folder"]],
        *([["origin", ["text", PREDICTED]]] if s.predicted else []),
        ["rank", ["text", "unknown (no sidecar)" if s.rank is None else str(s.rank)]],
        ["device", ["text", _device_text(s)]],
        ["step / window", ["text", _window_text(s)]],
        *_headline_rows(s),
        ["OOM request", oom_value(oom.requested_bytes if oom else None)],
        ["OOM allocation (error text)", oom_value(oom.allocation_bytes if oom else None)],
        ["device free at OOM", device_free],
        ["device limit", oom_value(oom.device_total_bytes if oom else None)],
        ["history", ["text", f"{events:,} {'entry' if events == 1 else 'entries'}"]],
        ["history truncated", ["text", truncated]],
    ]
    return Section("facts", "Summary and OOM", "facts", {"rows": rows, "warnings": s.warnings})


def _missing(s: Summary) -> str:
    """Why an OOM figure is unknown, from what this dump holds: a sidecar that leaves it
    empty, a trace ``oom`` entry that does not carry it, or neither."""
    sidecar = "the sidecar leaves it empty" if s.has_sidecar else "no sidecar"
    traced = s.oom is not None and s.oom.trace_index is not None
    trace = "the trace's oom entry does not carry it" if traced else "no oom entry in the trace"
    return f"not recorded ({sidecar}; {trace})"


def _headline_rows(s: Summary) -> list[list[Any]]:
    """Reserved, allocated and free: at the OOM first when the snapshot was taken after it
    (the unwinding freed most of it), then at the snapshot, labelled as after the OOM."""
    after = ""
    rows: list[list[Any]] = []
    at = s.oom
    if s.after_oom and at is not None:
        after = f" after the OOM (unwinding freed {fmt(s.unwound_bytes)})"
        rows += [
            ["reserved at the OOM", ["bytes", at.reserved_bytes]],
            ["allocated at the OOM", ["bytes", at.allocated_bytes]],
            ["free inside reserved at the OOM", ["bytes", at.free_in_reserved_bytes]],
            ["largest free block at the OOM (its pool)", ["bytes", at.largest_free_block_bytes]],
        ]
    return [
        *rows,
        ["reserved" + after, ["bytes", s.reserved_bytes]],
        ["allocated" + after, ["bytes", s.allocated_bytes]],
        ["active (incl. pending frees)" + after, ["bytes", s.active_bytes]],
        ["free inside reserved" + after, ["bytes", s.free_in_reserved_bytes]],
        ["largest free block" + after, ["bytes", s.largest_free_block_bytes]],
        ["segments / blocks" + after, ["text", f"{s.segments:,} / {s.blocks:,}"]],
    ]


def _device_text(s: Summary) -> str:
    """The device explained; when the file holds several, why this one and what the others
    hold (the same words as ``summary``'s device line)."""
    name = s.device
    if name is None:
        if s.device_index is None:
            return "unknown: no sidecar names it and the snapshot holds no segment or trace"
        name = f"device {s.device_index}"
    if len(s.devices) <= 1:
        return name
    return f"{name} ({s.device_reason}) of {len(s.devices)}: {devices_text(s.devices)}"


def _window_text(s: Summary) -> str:
    if s.steps:
        return f"steps {s.steps[0]}-{s.steps[1]}"
    if s.step is not None:
        return f"step {s.step}"
    return "none: not a step-window dump (or no sidecar)"


def oom_moment_section(ctx: DumpContext) -> Section | None:
    """The figures the verdict was judged on: the request, the allocation, external memory."""
    moment = ctx.summary.oom
    if moment is None or not moment.judged:
        return None
    unknown = moment.why_unknown or "not recorded in this dump"
    figures: list[tuple[str, int | None]] = [
        ("request (the user's, rounded to 512 B)", moment.requested_bytes),
        ("allocation (what the allocator asked the driver for)", moment.allocation_bytes),
        ("limit", moment.device_total_bytes),
        ("device free", moment.device_free_bytes),
        ("reserved by PyTorch", moment.reserved_bytes),
        ("outside PyTorch (limit - free - reserved)", moment.external_bytes),
        ("largest free block", moment.largest_free_block_bytes),
    ]
    rows: list[list[Any]] = [["state judged", ["text", moment.state]]]
    for label, value in figures:
        words = f"{DEVICE_FREE_UNKNOWN}: {unknown}" if label == "device free" else unknown
        rows.append([label, ["text", words] if value is None else ["bytes", value]])
    data = {"rows": rows, "warnings": []}
    return Section("oom_moment", "At the moment of the OOM", "facts", data)


def replay_section(ctx: DumpContext) -> Section | None:
    """Would another allocator setting have avoided this OOM? (only for OOM dumps), from the
    replay's JSON object, the same ``replay --json`` prints."""
    if ctx.summary.oom is None or not ctx.oom_device:
        return None
    result = to_json(replay_dump(ctx.dump, jobs=ctx.replay_jobs))
    if not result["trusted"]:
        return table(
            "replay",
            "What if: other allocator settings",
            [],
            [],
            empty="The replay refuses to answer: " + "; ".join(result["refusals"]),
        )
    rows = [
        [
            _what_if_label(row) + (f" (also needs {row['requires']})" if row["requires"] else ""),
            f"no effect on this dump ({row['no_effect']})"
            if row["no_effect"]
            else "OOM"
            if row["oom"]
            else "fits",
            row["peak_reserved_bytes"],
            row["fragmentation_at_peak_bytes"],
            row["first_failure_bytes"],
        ]
        for row in result["what_if"]
    ]
    fidelity = "n/a" if result["fidelity"] is None else f"{result['fidelity']:.0%}"
    return table(
        "replay",
        "What if: other allocator settings",
        [
            ("setting", "text"),
            ("outcome", "text"),
            ("peak reserved", "bytes"),
            ("free inside reserved at the peak", "bytes"),
            ("first failing request", "bytes"),
        ],
        rows,
        note=f"Replayed through memforensics' model of the caching allocator; it reproduced "
        f"{fidelity} of the recorded segment events first (memforensics replay FILE for the "
        "self-check, blame and lint).",
    )


def _what_if_label(row: dict[str, Any]) -> str:
    """A what-if row's setting: its conf string; the baseline row by its name."""
    if row["change_bytes"] is None and row["name"] != "as recorded":
        return str(row["name"])
    return str(row["conf"] or "(as recorded)")


def kinds_section(ctx: DumpContext) -> Section:
    """Bytes per kind at the peak and at the snapshot, with the classifier's confidence at each
    (the figures ``summary`` prints for each moment; ``-`` where the kind holds nothing then),
    and the bytes the process told (tracked tensors) when the dump lists any."""
    peak = {k.kind: k for k in ctx.filled.peak.kinds}
    now = {k.kind: k for k in ctx.filled.kinds}
    known = ctx.filled.known is not None
    rows = []
    for kind in KINDS:
        if kind in peak or kind in now:
            row: list[object] = [
                kind,
                peak[kind].bytes if kind in peak else 0,
                now[kind].bytes if kind in now else 0,
                round(peak[kind].confidence, 2) if kind in peak else "-",
                round(now[kind].confidence, 2) if kind in now else "-",
            ]
            if known:
                row.append(now[kind].known_bytes if kind in now else 0)
            rows.append(row)
    columns = [
        ("kind", "text"),
        ("at the peak", "bytes"),
        ("at the snapshot", "bytes"),
        ("confidence at the peak", "number"),
        ("confidence at the snapshot", "number"),
    ]
    note = (
        "From lifetimes and frames, no hooks; block bytes, adding up to allocated at the "
        "snapshot: see docs/analysis.md, 'Kinds of memory'."
    )
    if known:
        columns.append(("from the process at the snapshot", "bytes"))
        note = (
            "Blocks holding the tensors the process tracked (its model and optimizer) carry "
            "their kind from the process; the rest is inferred from lifetimes and frames. Block "
            "bytes, adding up to allocated at the snapshot: see docs/analysis.md, 'Kinds known "
            "from the process'."
        )
    return table(
        "kinds",
        "Kinds of memory",
        columns,
        rows,
        empty="No live memory at the peak or the snapshot.",
        note=note,
    )


def tree_section(ctx: DumpContext) -> Section:
    """The peak's call tree (icicle), pruned to what a page can show."""
    peak = ctx.filled.peak
    root = _pruned(peak.tree, max(int(peak.tree.bytes * TREE_SHARE), 1), TREE_DEPTH)
    if peak.name == "snapshot":
        moment = f"At the snapshot (no trace to find a peak in): {fmt(peak.live_bytes)} live"
    else:
        moment = f"{peak.name} at trace entry {peak.position:,}: {fmt(peak.live_bytes)} live"
    if any(child["name"] == NATIVE_ONLY for child in root["children"]):
        moment += f". {_NATIVE_NOTE[:-1]}"
    data = {"root": root, "moment": moment}
    empty = "Nothing was live at the peak." if not peak.tree.bytes else None
    return Section("tree", "Call tree at the peak", "tree", data, empty)


def _pruned(node: CallNode, floor: int, depth: int) -> dict[str, Any]:
    """A node as the icicle draws it: the user's lines, each holding the torch or library
    frames inside it (named in ``calls``, never a box of their own), tiny ones left out."""
    children = [c for c in node.shown_children() if c.bytes >= floor] if depth > 0 else []
    return {
        "name": node.name,
        "bytes": node.bytes,
        "calls": [child.name for child in node.folded()],
        "children": [_pruned(child, floor, depth - 1) for child in children],
    }


_SITE_COLUMNS = [("site", "site"), ("bytes", "bytes"), ("blocks", "number"), ("kind", "text")]


def _site_rows(sites: tuple[SiteBytes, ...]) -> list[list[Any]]:
    """A row per kind of each site (its site, bytes, blocks and kind), as the summary's text
    shows them: a site of several kinds never gives one kind all its bytes. A site reached from
    several callers, on a row each, names its caller (``SITE ← caller CALLER``), as the
    summary's text and a growth cause name them."""
    labels = Counter(site.site for site in sites)

    def named(site: SiteBytes) -> str:
        if labels[site.site] > 1 and site.caller != site.site:
            return f"{site.site} ← caller {site.caller}"
        return site.site

    return [
        [named(site), part.bytes, part.blocks, part.kind]
        for site in sites
        for part in site.by_kind()
    ]


def sites_section(ctx: DumpContext) -> Section:
    """The biggest sites: live at the OOM when the snapshot was taken after it, else at the
    snapshot."""
    s = ctx.summary
    if s.after_oom and s.oom is not None and s.oom.top_sites:
        return table(
            "sites",
            "Biggest sites (live bytes at the OOM)",
            _SITE_COLUMNS,
            _site_rows(s.oom.top_sites),
            empty="No live blocks at the OOM.",
        )
    sites = s.top_sites
    return table(
        "sites",
        "Biggest sites (live bytes at the snapshot)",
        _SITE_COLUMNS,
        _site_rows(sites),
        empty="No live blocks at the snapshot.",
        note=_NATIVE_NOTE if any(site.site == NATIVE_ONLY for site in sites) else None,
    )


def after_oom_sites_section(ctx: DumpContext) -> Section | None:
    """The biggest sites at the snapshot, when it was taken after the OOM (second to those live
    at the OOM)."""
    s = ctx.summary
    if not (s.after_oom and s.oom is not None and s.oom.top_sites):
        return None
    return table(
        "sites_after_oom",
        f"Biggest sites after the OOM (unwinding freed {fmt(s.unwound_bytes)}), at the snapshot",
        _SITE_COLUMNS,
        _site_rows(s.top_sites),
        empty="No live blocks at the snapshot: the unwinding freed them all.",
    )


def steps_section(ctx: DumpContext) -> Section:
    """Live bytes by the step that allocated them."""
    steps = ctx.summary.live_by_step
    rows = [["no step" if s.step is None else str(s.step), s.bytes, s.blocks] for s in steps[-50:]]
    return table(
        "steps",
        "Live bytes by step of allocation",
        [("step", "text"), ("bytes", "bytes"), ("blocks", "number")],
        rows,
        hidden=max(len(steps) - 50, 0),
        empty="No step tags: live blocks carry no 'step=N' metadata (memforensics tags them "
        "inside step() on CUDA and the sim device; NPU cannot tag, and other tools do not).",
    )


DUMP_SECTIONS: list[SectionBuilder] = [
    verdict_section,
    at_risk_section,
    facts_section,
    oom_moment_section,
    replay_section,
    timeline_section,
    segments_section,
    kinds_section,
    tree_section,
    sites_section,
    after_oom_sites_section,
    steps_section,
]


def leaks_section(leaks: Leaks | None) -> Section:
    """Leak trends of a folder's windows (a run section)."""
    if leaks is None or not leaks.windows:
        return table(
            "leaks",
            "Leaks across windows",
            [],
            [],
            empty="No window dumps among these files: leaks compares a rank's step windows "
            "(install(steps=N) with keep_last=None or a few kept), at least three of them.",
        )
    rows = [
        [
            "-" if t.rank is None else str(t.rank),
            t.site,
            t.kind,
            round(t.growth_per_step),
            "-" if t.first_step is None else str(t.first_step),
            t.bytes[-1],
            round(t.confidence, 2),
            "suspect" if t.suspect else "",
        ]
        for t in leaks.trends[:30]
    ]
    few = [window.rank for window in leaks.windows if len(window.steps) < 3]
    note = f"{len(leaks.suspects)} suspect(s)."
    if few:
        note += f" Fewer than 3 windows for rank(s) {few}: growth cannot be told from a one-off."
    if any(t.site == NATIVE_ONLY for t in leaks.trends[:30]):
        note += f" {_NATIVE_NOTE}"
    return table(
        "leaks",
        "Leaks across windows",
        [
            ("rank", "text"),
            ("site", "site"),
            ("kind", "text"),
            ("growth/step", "bytes"),
            ("first step", "text"),
            ("last window", "bytes"),
            ("confidence", "number"),
            ("", "text"),
        ],
        rows,
        hidden=max(len(leaks.trends) - 30, 0),
        note=note,
    )


def unreadable_section(unreadable: list[str]) -> Section | None:
    """Files that could not be read, so the page says what it does not cover."""
    if not unreadable:
        return None
    return table(
        "unreadable",
        f"Unreadable files ({len(unreadable)})",
        [("error", "text")],
        [[error] for error in unreadable],
        note="These dumps are not in this report.",
    )
