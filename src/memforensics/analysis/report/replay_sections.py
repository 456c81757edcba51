"""The report's replay sections: the what-if table and the allocator state at the OOM.

Kept apart from ``_report_sections`` because a replay re-runs the trace once per setting: it is
built only for an OOM dump, on the OOM's device, and its refusals are shown instead of a table
whenever the replay could not reproduce what the real allocator did.
"""

from __future__ import annotations

from typing import Any

from memforensics.analysis.replay.replay import replay
from memforensics.analysis.report.model import DumpContext, Section, table


def oom_moment_section(ctx: DumpContext) -> Section | None:
    """The figures the verdict was judged on: the request, the allocation, external memory."""
    moment = ctx.summary.oom_state
    if ctx.summary.oom is None or moment is None:
        return None
    unknown = moment.why_unknown or "not recorded in this dump"
    figures: list[tuple[str, int | None]] = [
        ("request (the user's, rounded to 512 B)", moment.requested_bytes),
        ("allocation (what the allocator asked the driver for)", moment.allocation_bytes),
        ("limit", moment.limit_bytes),
        ("device free", moment.device_free_bytes),
        ("reserved by PyTorch", moment.reserved_bytes),
        ("outside PyTorch (limit - free - reserved)", moment.external_bytes),
        ("largest free block", moment.largest_free_block_bytes),
    ]
    rows: list[list[Any]] = [["state judged", ["text", moment.source]]]
    rows += [
        [label, ["text", unknown] if value is None else ["bytes", value]]
        for label, value in figures
    ]
    data = {"rows": rows, "warnings": []}
    return Section("oom_moment", "At the moment of the OOM", "facts", data)


def replay_section(ctx: DumpContext) -> Section | None:
    """Would another allocator setting have avoided this OOM? (only for OOM dumps)."""
    if ctx.summary.oom is None or not ctx.oom_device:
        return None
    result = replay(ctx.dump)
    if not result.trusted:
        return table(
            "replay",
            "What if: other allocator settings",
            [],
            [],
            empty="The replay refuses to answer: " + "; ".join(result.refusals),
        )
    rows = [
        [
            row.conf or "(as recorded)",
            "OOM" if row.oom else "fits",
            row.peak_reserved_bytes,
            row.fragmentation_at_peak_bytes,
            row.first_failure_bytes,
        ]
        for row in result.what_if
    ]
    fidelity = "n/a" if result.fidelity is None else f"{result.fidelity:.0%}"
    return table(
        "replay",
        "What if: other allocator settings",
        [
            ("setting", "text"),
            ("outcome", "text"),
            ("peak reserved", "bytes"),
            ("fragmentation at peak", "bytes"),
            ("first failing request", "bytes"),
        ],
        rows,
        note=f"Replayed through memforensics' model of the caching allocator; it reproduced "
        f"{fidelity} of the recorded segment events first (memforensics replay FILE for the "
        "self-check, blame and lint).",
    )
