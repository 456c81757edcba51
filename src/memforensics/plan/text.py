"""The words of a plan: what ``memforensics plan`` prints about a :class:`PlanResult`."""

from __future__ import annotations

from memforensics._units import format_bytes
from memforensics.plan.runner import PlanResult
from memforensics.plan.vary import VaryRow

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
            if verdict.get("cause"):
                lines.append(f"  cause: {verdict['cause']}")
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


def vary_text(name: str, rows: list[VaryRow], best: str | None, best_expandable: str | None) -> str:
    """One row per value, then the largest value that fits, as given and with expandable
    segments."""

    def size(value: int | None) -> str:
        return format_bytes(value) if value is not None else "-"

    def yes(value: bool | None) -> str:
        return {True: "yes", False: "no", None: "failed"}[value]

    width = max(len(name), *(len(r.value) for r in rows))
    lines = [
        f"  {name:<{width}}  {'peak allocated':>14}  {'peak reserved':>14}  fits  "
        "fits with expandable_segments"
    ]
    for r in rows:
        lines.append(
            f"  {r.value:<{width}}  {size(r.peak_allocated_bytes):>14}  "
            f"{size(r.peak_reserved_bytes):>14}  {yes(r.fits):<4}  {yes(r.fits_expandable)}"
        )
        if r.error:
            lines.append(f"    {r.error}")
    lines.append(f"Largest {name} that fits: {best if best is not None else 'none'}")
    lines.append(
        f"Largest {name} that fits with expandable_segments:True: "
        f"{best_expandable if best_expandable is not None else 'none'}"
    )
    return "\n".join(lines)
