"""Which devices a dump holds, and which one to read when nobody says.

One process that drives several GPUs (DataParallel, pipeline stages in one process) writes one
snapshot whose segments and ``device_traces`` cover every device. Reading only one of them
silently hides the others, so every device is counted here, and the device to explain is
chosen from what the dump itself holds:

1. the device whose trace records the ``oom`` (the failing allocation's device);
2. else the sidecar's ``device_index``, when the dump holds anything on that device;
3. else the device with the most reserved memory (then the busiest trace).

The sidecar comes second on purpose: sidecars written before schema 2 record the device that
was current at ``install()``, which is 0 on every rank of a job that calls ``set_device``
later, and trusting it would read an empty trace. When it disagrees with the dump, a warning
says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memforensics.analysis.dump.meta import oom_positions
from memforensics.analysis.dump.model import ALLOCATED, Segment
from memforensics.analysis.schema import json_key


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """One device of a dump: what it reserved and holds, and whether its trace has an OOM."""

    device: int = field(metadata=json_key("device_index"))
    reserved_bytes: int
    allocated_bytes: int
    segments: int
    history_events: int = field(metadata=json_key("trace_entries"))
    oom: bool


@dataclass(frozen=True, slots=True)
class DeviceChoice:
    """The device to read, why, and what disagreed on the way."""

    device: int | None
    reason: str
    warnings: tuple[str, ...] = ()


def _last_oom(trace: list[Any]) -> tuple[int, int] | None:
    """(time_us or -1, index) of the trace's last ``oom`` entry."""
    found = oom_positions(trace)
    if not found:
        return None
    stamp = trace[found[-1]].get("time_us")
    return (stamp if type(stamp) is int else -1, found[-1])


def device_usage(segments: tuple[Segment, ...], traces: list[list[Any]]) -> tuple[DeviceUsage, ...]:
    """Every device with a segment or a non-empty trace, in device order.

    Looking for an OOM reads each trace's actions once (:mod:`~memforensics.analysis.dump.meta`).
    """
    totals: dict[int, list[int]] = {}
    for segment in segments:
        if segment.device is None:
            continue
        entry = totals.setdefault(segment.device, [0, 0, 0])
        entry[0] += segment.total_size
        entry[1] += sum(block.size for block in segment.blocks if block.state == ALLOCATED)
        entry[2] += 1
    for index, trace in enumerate(traces):
        if trace:
            totals.setdefault(index, [0, 0, 0])
    return tuple(
        DeviceUsage(
            device=device,
            reserved_bytes=reserved,
            allocated_bytes=allocated,
            segments=count,
            history_events=len(trace_of(traces, device)),
            oom=_last_oom(trace_of(traces, device)) is not None,
        )
        for device, (reserved, allocated, count) in sorted(totals.items())
    )


def trace_of(traces: list[list[Any]], device: int | None) -> list[Any]:
    """``device``'s trace, or ``[]`` when the file has none for it (never a negative index)."""
    if device is None or not 0 <= device < len(traces):
        return []
    return traces[device]


def choose_device(
    usage: tuple[DeviceUsage, ...],
    traces: list[list[Any]],
    hint: int | None,
    *,
    old_sidecar: bool = True,
) -> DeviceChoice:
    """The device to explain by default (see the module docstring for the order);
    ``old_sidecar``: the hint comes from a sidecar before schema 2 (say why it may be wrong)."""
    why = " (sidecars before schema 2 record the device current at install())" * old_sidecar
    held = {item.device: item for item in usage}
    if not held:
        return DeviceChoice(hint, "the sidecar's device (the dump holds no memory)")
    failed = [item.device for item in usage if item.oom]
    if len(held) == 1:
        (chosen,) = held
        reason, conflict = "the only device in this dump", f"the dump holds only device {chosen}"
    elif failed:
        chosen = max(
            failed,
            key=lambda device: (
                (_last_oom(trace_of(traces, device)) or (-1, -1))[0],
                device == hint,
                held[device].reserved_bytes,
            ),
        )
        reason = "the OOM's device: its trace records the OOM"
        conflict = f"the trace records the OOM on device {chosen}"
    elif hint is not None and hint in held:
        return DeviceChoice(hint, "the device the sidecar names")
    else:
        chosen = max(
            held.values(), key=lambda item: (item.reserved_bytes, item.history_events, -item.device)
        ).device
        reason = "the device with the most reserved memory"
        conflict = f"the dump holds nothing on it; reading device {chosen}"
    if hint is None or hint == chosen:
        return DeviceChoice(chosen, reason)
    return DeviceChoice(chosen, reason, (f"the sidecar says device {hint}, but {conflict}{why}",))
