"""The JSON sidecar written after each snapshot: who, where, when, and (for OOM) why.

The static part (rank, host, pid, versions) is computed once at install; each dump adds what
changes, including the device: the failing device for an OOM, the current one for other dumps
(ranks usually call ``set_device(local_rank)`` after ``install()``). Every key in DESIGN.md is
always present; an unknown value is null, never missing, so readers across 2,000 ranks can rely
on the shape.

Schema 2 (this version): ``pid`` is always the training process's, ``device_index`` is read per
dump, and ``oom`` separates ``requested_bytes`` (the user's request, from the trace) from
``allocation_bytes`` (what the allocator asked the driver for). Schema 1 wrote the observer's
allocation size as ``requested_bytes``.

``peak_allocated_bytes`` (added within schema 2, as ``tensors``) is the allocator's own
``allocated_bytes.all.peak`` when the dump was taken: the most allocated at once since the
process began or last reset its peaks, which a trace of bounded length may no longer show; null
when the framework does not say.

``tensors`` (added within schema 2: readers that do not know it ignore it) lists the tracked
models' and optimizers' tensors when the process told capture about them
(:mod:`~memforensics.capture.track`), null otherwise; ``tensors_dropped`` counts those past the
bound.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from memforensics._layout import NEAR_OOM, PEAK_ALLOCATED
from memforensics._version import __version__
from memforensics.capture.track import TrackedTensors

SCHEMA_VERSION = 2


@dataclass(frozen=True, slots=True)
class SidecarContext:
    """Facts about the process that every sidecar repeats."""

    rank: int
    world_size: int | None
    device: str
    torch_version: str | None
    hostname: str
    pid: int
    """The training process's pid: also what a forked writer's sidecar records."""

    @classmethod
    def collect(
        cls,
        *,
        rank: int,
        world_size: int | None,
        device: str,
        torch_version: str | None,
    ) -> SidecarContext:
        """Gather host and pid now, in the training process."""
        return cls(rank, world_size, device, torch_version, socket.gethostname(), os.getpid())


def build_sidecar(
    context: SidecarContext,
    *,
    kind: str,
    snapshot_file: Path,
    snapshot_bytes: int,
    created_at: datetime,
    device_index: int | None,
    steps: tuple[int, int] | None = None,
    step: int | None = None,
    partial: bool = False,
    truncated: bool | None = None,
    trace_entries: int | None = None,
    oom: dict[str, Any] | None = None,
    near_oom: dict[str, Any] | None = None,
    tensors: TrackedTensors | None = None,
    peak_allocated_bytes: int | None = None,
) -> dict[str, Any]:
    """One sidecar object with every contract key present; a near-OOM one says why
    (``reason``) and carries its figures (``near_oom``); ``tensors``: the tracked tensors read
    at the snapshot, None when nothing is tracked."""
    sidecar: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "kind": kind,
        "rank": context.rank,
        "world_size": context.world_size,
        "hostname": context.hostname,
        "pid": context.pid,
        "device": context.device,
        "device_index": device_index,
        "steps": list(steps) if steps is not None else None,
        "step": step,
        "created_at": created_at.isoformat(),
        "snapshot_file": snapshot_file.name,
        "snapshot_bytes": snapshot_bytes,
        "torch_version": context.torch_version,
        "memforensics_version": __version__,
        "partial": partial,
        "truncated": truncated,
        "trace_entries": trace_entries,
        "tensors": tensors.entries if tensors is not None else None,
        "tensors_dropped": tensors.dropped if tensors is not None else None,
        PEAK_ALLOCATED: peak_allocated_bytes,
    }
    if kind == "oom":
        sidecar["oom"] = oom_record(**(oom or {}))
    elif kind == NEAR_OOM:
        sidecar["reason"] = (near_oom or {}).get("reason")
        sidecar["near_oom"] = near_oom
    return sidecar


def oom_record(
    requested_bytes: int | None = None,
    allocation_bytes: int | None = None,
    device_total_bytes: int | None = None,
    device_free_bytes: int | None = None,
    stack: list[dict[str, Any]] | None = None,
    allocator: dict[str, Any] | None = None,
    source: str | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """The sidecar's ``oom`` object; ``source`` says whether the observer or step() saw it.

    ``requested_bytes`` is the user's request rounded to the block size (the trace's last
    ``oom`` entry; null without history), ``allocation_bytes`` what the allocator tried to get
    from the driver (the size PyTorch's error text prints), ``device_total_bytes`` the limit
    (per-process limit when a memory fraction is set, else the device total).
    """
    return {
        "requested_bytes": requested_bytes,
        "allocation_bytes": allocation_bytes,
        "device_total_bytes": device_total_bytes,
        "device_free_bytes": device_free_bytes,
        "stack": stack,
        "allocator": allocator,
        "source": source,
        "error": error,
    }


def requested_from_trace(snapshot: Any, device_index: int | None) -> int | None:
    """The size of the last ``oom`` trace entry: the user's request, rounded to the block size.

    The failing device's trace is searched first; when its index is unknown or out of range,
    the newest ``oom`` entry of any device. None without history (no trace, no ``oom`` entry).
    """
    try:
        traces = snapshot.get("device_traces") or []
        if device_index is not None and 0 <= device_index < len(traces):
            ordered = [traces[device_index]]
        else:
            ordered = list(traces)
        best: tuple[int, int] | None = None  # (time_us, size)
        for trace in ordered:
            for entry in reversed(trace or ()):
                if isinstance(entry, dict) and entry.get("action") == "oom":
                    size = entry.get("size")
                    when = entry.get("time_us")
                    if isinstance(size, int):
                        moment = when if isinstance(when, int) else 0
                        if best is None or moment >= best[0]:
                            best = (moment, size)
                    break
        return best[1] if best is not None else None
    except Exception:  # noqa: BLE001 - an odd snapshot is still dumped; this is metadata
        return None


def allocated_peak(stats: Any) -> int | None:
    """``allocated_bytes.all.peak`` of the allocator's statistics, None where they hold no
    count of bytes (a framework without it, a failed read)."""
    value = stats.get("allocated_bytes.all.peak") if isinstance(stats, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def trace_length(snapshot: Any) -> int | None:
    """Number of trace entries on the busiest device in a snapshot (None if no traces)."""
    try:
        traces = snapshot.get("device_traces")
        if not traces:
            return None
        return max(len(trace) for trace in traces)
    except Exception:  # noqa: BLE001 - an odd snapshot is still dumped; this is metadata
        return None
