"""The JSON sidecar written after each snapshot: who, where, when, and (for OOM) why.

The static part (rank, host, versions) is computed once at install; each dump only adds what
changes. Every key in DESIGN.md is always present; an unknown value is null, never missing, so
readers across 2,000 ranks can rely on the shape.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from memforensics._version import __version__

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class SidecarContext:
    """Facts about the process that every sidecar repeats."""

    rank: int
    world_size: int | None
    device: str
    device_index: int | None
    torch_version: str | None
    hostname: str
    pid: int

    @classmethod
    def collect(
        cls,
        *,
        rank: int,
        world_size: int | None,
        device: str,
        device_index: int | None,
        torch_version: str | None,
    ) -> SidecarContext:
        """Gather host and pid now (the pid is re-read per dump in case of fork)."""
        return cls(
            rank, world_size, device, device_index, torch_version, socket.gethostname(), os.getpid()
        )


def build_sidecar(
    context: SidecarContext,
    *,
    kind: str,
    snapshot_file: Path,
    snapshot_bytes: int,
    created_at: datetime,
    steps: tuple[int, int] | None = None,
    step: int | None = None,
    partial: bool = False,
    truncated: bool | None = None,
    trace_entries: int | None = None,
    oom: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One sidecar object with every contract key present."""
    sidecar: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "kind": kind,
        "rank": context.rank,
        "world_size": context.world_size,
        "hostname": context.hostname,
        "pid": os.getpid(),
        "device": context.device,
        "device_index": context.device_index,
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
    }
    if kind == "oom":
        sidecar["oom"] = oom_record(**(oom or {}))
    return sidecar


def oom_record(
    requested_bytes: int | None = None,
    device_total_bytes: int | None = None,
    device_free_bytes: int | None = None,
    stack: list[dict[str, Any]] | None = None,
    allocator: dict[str, Any] | None = None,
    source: str | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """The sidecar's ``oom`` object; ``source`` says whether the observer or step() saw it."""
    return {
        "requested_bytes": requested_bytes,
        "device_total_bytes": device_total_bytes,
        "device_free_bytes": device_free_bytes,
        "stack": stack,
        "allocator": allocator,
        "source": source,
        "error": error,
    }


def trace_length(snapshot: Any) -> int | None:
    """Number of trace entries on the busiest device in a snapshot (None if no traces)."""
    try:
        traces = snapshot.get("device_traces")
        if not traces:
            return None
        return max(len(trace) for trace in traces)
    except Exception:  # noqa: BLE001 - an odd snapshot is still dumped; this is metadata
        return None
