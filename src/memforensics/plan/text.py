"""The words of a plan: what ``memforensics plan`` prints about a :class:`PlanResult`."""

from __future__ import annotations

from memforensics._units import format_bytes
from memforensics.plan.runner import PlanResult

OUT_OF_SCOPE_DISTRIBUTED = (
    "memforensics plan: distributed collectives are out of scope for now: the plan models one "
    "process on one device, and NCCL's own buffers are not counted"
)


def plan_text(result: PlanResult, snapshots: list[str], verdict: dict[str, str] | None) -> str:
    """The plan as a few lines: the figures, whether it fits, and where the snapshots are."""
    conf = result.allocator_conf or "default allocator settings"
    lines = [
        f"Planned on {result.device_name}: {format_bytes(result.device_bytes)}, capability "
        f"{result.capability}, {conf} (predicted, not measured)",
        f"  peak allocated   {format_bytes(result.peak_allocated_bytes)}",
        f"  peak reserved    {format_bytes(result.peak_reserved_bytes)}",
        f"  segments         {result.segments} at the end, {result.peak_segments} at most",
    ]
    needed = format_bytes(result.needed_bytes)
    context = format_bytes(result.context_bytes)
    if result.oom_message is not None:
        lines.append(f"Does not fit: predicted OOM. {result.oom_message.split('. If ')[0]}.")
        if verdict:
            lines.append(f"  verdict: {verdict['label']}. {verdict['explanation']}")
            if verdict["advice"]:
                lines.append(f"  → {verdict['advice']}")
    elif result.fits:
        lines.append(
            f"Fits: {needed} with the CUDA context ({context}) of "
            f"{format_bytes(result.device_bytes)}."
        )
    else:
        lines.append(
            f"Does not fit: {needed} with the CUDA context ({context}) is more than "
            f"{format_bytes(result.device_bytes)}."
        )
    for path in snapshots:
        lines.append(f"Predicted snapshot: {path}")
    return "\n".join(lines)
