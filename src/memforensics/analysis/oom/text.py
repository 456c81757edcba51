"""The words for a near-OOM dump: at risk, not failed; what ``summary`` and the report say."""

from __future__ import annotations

from memforensics._units import format_bytes as fmt
from memforensics.analysis.oom.risk import AtRisk


def at_risk_headline(risk: AtRisk) -> str:
    """``at risk: the allocator retried 3 times before this snapshot`` (or why else)."""
    retries = risk.alloc_retries
    if risk.trigger == "alloc_retries" and retries is not None:
        times = "once" if retries == 1 else f"{retries:,} times"
        return f"at risk: the allocator retried {times} before this snapshot"
    if risk.reason:
        return f"at risk: {risk.reason}"
    return "at risk: memory was near the limit when this snapshot was taken"


def fragmentation_text(risk: AtRisk) -> str:
    """``12.00 MiB free inside reserved, largest block 8.00 MiB (33 % scattered)``."""
    share = risk.fragmentation
    scattered = "" if share is None else f" ({share * 100:.0f} % scattered)"
    return (
        f"{fmt(risk.free_in_reserved_bytes)} free inside reserved, largest block "
        f"{fmt(risk.largest_free_block_bytes)}{scattered}"
    )


def headroom_text(risk: AtRisk) -> str:
    """``56.00 MiB of the 256.00 MiB limit (outside PyTorch 0 B)``, or why it is unknown."""
    if risk.headroom_bytes is None or risk.device_total_bytes is None:
        return "unknown: the sidecar records no limit"
    outside = fmt(risk.outside_pytorch_bytes)
    return (
        f"{fmt(risk.headroom_bytes)} of the {fmt(risk.device_total_bytes)} limit"
        f" (outside PyTorch {outside})"
    )


def at_risk_lines(risk: AtRisk) -> list[str]:
    """``summary``'s block for a near-OOM dump, indented like its table."""
    lines = [f"  {at_risk_headline(risk)}"]
    if risk.reason:
        lines.append(f"  why          {risk.reason}")
    lines.append(f"  fragmented   {fragmentation_text(risk)}")
    lines.append(f"  headroom     {headroom_text(risk)}")
    lines.append("  No OOM happened; this is the state before one, not a verdict.")
    return lines
