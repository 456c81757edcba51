"""The words for a near-OOM dump (at risk, not failed) and for a request too large for the
device (what it exceeds, and the smaller request that fixes it): what ``summary``, ``plan``
and the report say."""

from __future__ import annotations

from collections.abc import Sequence

from memforensics._units import format_bytes as fmt
from memforensics.analysis.oom.moment import OomMoment
from memforensics.analysis.oom.risk import AtRisk


def sum_terms(terms: Sequence[tuple[int | None, str]]) -> list[str]:
    """The words of a sum's terms, each given beside its bytes, with every term of 0 B left
    out: it adds nothing, and ``+ 0 B outside PyTorch`` under a per-process limit (which bounds
    PyTorch's own memory) or ``0 B free in reserved segments plus`` only reads as noise. A term
    of unknown bytes (None) is kept, as its words say so; where no term holds a known figure
    but 0 B, every term is kept, so the sum still says what it adds."""
    if not any(size for size, _ in terms):
        return [words for _, words in terms]
    return [words for size, words in terms if size != 0]


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


def capacity_text(moment: OomMoment) -> str:
    """What a request too large for the device exceeds: ``the 819.20 MiB per-process limit
    (set_per_process_memory_fraction; the device had 79.48 GiB free)``, ``the 79.50 GiB PyTorch
    could get with nothing else live (the 80.00 GiB limit less 512.00 MiB outside PyTorch)``,
    ``the 1.00 GiB limit``, or where no limit is recorded, the capacity standing in for it."""
    limit, capacity = moment.device_total_bytes, moment.capacity_bytes
    if moment.per_process_limit:
        return (
            f"the {fmt(limit)} per-process limit (set_per_process_memory_fraction; the device"
            f" had {fmt(moment.device_free_bytes)} free)"
        )
    could = f"the {fmt(capacity)} PyTorch could get with nothing else live"
    if limit is None:
        return f"{could} (reserved + device free at the OOM; no limit recorded)"
    if capacity is not None and capacity < limit:
        return f"{could} (the {fmt(limit)} limit less {fmt(limit - capacity)} outside PyTorch)"
    return f"the {fmt(limit)} limit"


def request_too_large_text(moment: OomMoment) -> str:
    """The verdict's sentence for a request that alone exceeds what PyTorch could get: never
    that live memory fills the device."""
    live = moment.allocated_bytes
    beside = f"; {fmt(live)} was live beside it" if live else ""
    return (
        f"The {fmt(moment.requested_bytes)} request alone exceeds {capacity_text(moment)}: no"
        f" allocator setting, and no memory freed, could serve it{beside}."
    )


SMALLER_REQUEST = (
    "Make that one allocation smaller: a smaller batch or sequence where it is made, or compute"
    " that op in chunks (attention over blocks of queries, logits over slices of the"
    " vocabulary)."
)
RAISE_FRACTION = "raise set_per_process_memory_fraction so the limit holds the request"
"""The fix a per-process limit the device has room beyond allows."""


def request_too_large_advice(moment: OomMoment) -> str:
    """Make the request smaller; under a per-process limit the device has room beyond, or
    raise that limit."""
    if moment.raising_limit_serves:
        return f"{SMALLER_REQUEST[:-1]}; or {RAISE_FRACTION}."
    return SMALLER_REQUEST
