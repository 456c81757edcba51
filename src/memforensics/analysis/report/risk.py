"""The report's section for a near-OOM dump: at risk, with fragmentation and headroom then."""

from __future__ import annotations

from memforensics.analysis.oom import at_risk_headline, fragmentation_text, headroom_text
from memforensics.analysis.report.model import DumpContext, Section, table


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
