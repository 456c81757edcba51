"""Which shape a snapshot file has, who likely wrote it, and what that shape cannot tell.

People bring files they saved long before they heard of memforensics. Those files come in the
shapes PyTorch and torch_npu actually wrote, read from their sources:

- ``torch.cuda.memory._snapshot()`` / ``_dump_snapshot`` (PyTorch >= 2.1,
  ``torch/csrc/cuda/memory_snapshot.cpp``): a dict of ``segments`` and ``device_traces``; blocks
  carry ``address``, ``requested_size`` and ``frames``; trace entries ``time_us``; newer releases
  add ``allocator_settings``, ``external_annotations`` and ``user_metadata``.
- PyTorch 2.0 and 1.13 (``THCPModule_memorySnapshot`` in ``torch/csrc/cuda/Module.cpp``): the
  same dict, but a block's stack is under ``history`` (``[{addr, real_size, frames}]``), blocks
  have no ``address``, trace entries no ``time_us``; 1.13 also writes no ``requested_size``.
- ``torch.cuda.memory_snapshot()``, the public API: only the ``segments`` list, no trace.
- torch_npu (``THNPModule_memorySnapshot``): the dict without ``time_us``, ``allocator_settings``
  or ``external_annotations``, plus its workspace allocator's segments, marked in the trace by
  ``workspace_snapshot`` entries. Early torch_npu returned a bare list of segments without
  ``stream``, blocks holding only ``size`` and ``state``.

This module only *reads* the shape; figures stay computed from what is present, and each
:class:`SnapshotShape` lists, in ``limits``, what the file cannot tell, so nothing is guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from memforensics._errors import SnapshotLoadError
from memforensics._units import format_bytes as fmt
from memforensics.analysis.dump.model import ALLOCATED, NPU_WORKSPACE, Segment, as_int
from memforensics.analysis.schema import NOT_IN_JSON

SNAPSHOT = "snapshot"
SEGMENT_LIST = "segment-list"

PYTORCH_2_0 = "PyTorch 2.0"
PYTORCH_1_13 = "PyTorch 1.13 or older"
EARLY_NPU = "torch_npu (early: no streams)"

TRACE = "trace"
ONE_EVENT = "one event"
STACKS_ONLY = "stacks, no trace"
NO_HISTORY = "none"
NOTHING_ALLOCATED = "nothing allocated"
"""What a file records of the allocator's history (:attr:`SnapshotShape.history`): a trace of
events; a trace of one event (the legacy ``_record_memory_history(True)`` keeps one entry), too
short to rule anything out; no trace but live blocks that carry their stacks
(``_record_memory_history(enabled="state")``, or a PyTorch 2.0 block's ``history``); nothing
at all; or nothing allocated and nothing recorded (an empty snapshot)."""
_SCAN_ENTRIES = 2000  # workspace entries are prepended, and time_us is on every entry or none


@dataclass(frozen=True, slots=True)
class SnapshotShape:
    """What the file is: ``container`` (``snapshot`` dict or ``segment-list``), its likely
    ``producer``, the keys current PyTorch writes that it lacks, and what it cannot tell."""

    container: str = SNAPSHOT
    producer: str = "PyTorch 2.1 or newer"
    missing: tuple[str, ...] = ()
    history: str = TRACE  # TRACE, ONE_EVENT, STACKS_ONLY, NO_HISTORY or NOTHING_ALLOCATED
    limits: tuple[str, ...] = field(default=(), metadata=NOT_IN_JSON)  # the summary's ``limits``

    @property
    def predates_expandable(self) -> bool:
        """Written by a release before expandable segments (PyTorch and torch_npu 2.1)."""
        return self.producer in (PYTORCH_2_0, PYTORCH_1_13, EARLY_NPU)


def split_top_level(snapshot: object, source: str) -> tuple[list[Any], list[list[Any]], str]:
    """The raw segment list, the per-device traces and the container of any known shape."""
    if isinstance(snapshot, list):
        return snapshot, [], SEGMENT_LIST
    if not isinstance(snapshot, dict):
        kind = type(snapshot).__name__
        raise SnapshotLoadError(f"{source}: not a memory snapshot (top level is a {kind})")
    segments = snapshot.get("segments")
    if not isinstance(segments, list):
        raise SnapshotLoadError(f"{source}: not a memory snapshot (no 'segments' list)")
    traces = snapshot.get("device_traces", [])
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise SnapshotLoadError(f"{source}: not a memory snapshot ('device_traces' is not lists)")
    return segments, traces, SNAPSHOT


@dataclass
class _Evidence:
    """What a pass over the raw blocks and the start of each trace found."""

    legacy_blocks: bool = False
    requested: bool = False
    history_real_size: bool = False
    stacks: bool = False  # a live block's or a trace event's stack has a frame
    allocated: bool = False
    streams: bool = True
    timed: bool | None = None
    recorded: bool = False
    events: int = 0  # history events (not ``snapshot`` markers) seen, counted up to 2
    segments: bool = False
    workspace: frozenset[int] = frozenset()


def _scan(raw_segments: list[Any], traces: list[list[Any]]) -> _Evidence:
    found = _Evidence()
    found.segments = bool(raw_segments)
    for raw in raw_segments:
        if isinstance(raw, dict):
            found.streams = found.streams and "stream" in raw
            blocks = raw.get("blocks")
            for block in blocks if isinstance(blocks, list) else ():
                if isinstance(block, dict):
                    _scan_block(block, found)
    _scan_traces(traces, found)
    return found


def _scan_block(block: dict[str, Any], found: _Evidence) -> None:
    if "address" not in block and "frames" not in block:
        found.legacy_blocks = True
    found.requested = found.requested or "requested_size" in block
    found.allocated = found.allocated or block.get("state") == ALLOCATED
    history = block.get("history")
    if isinstance(history, list) and history and isinstance(history[-1], dict):
        found.history_real_size = found.history_real_size or "real_size" in history[-1]
        found.stacks = found.stacks or bool(history[-1].get("frames"))
    found.stacks = found.stacks or bool(block.get("frames"))


def _scan_traces(traces: list[list[Any]], found: _Evidence) -> None:
    workspace: set[int] = set()
    for trace in traces:
        for entry in trace[:_SCAN_ENTRIES]:
            if type(entry) is not dict:
                continue
            action = entry.get("action")
            if action == "workspace_snapshot":
                address = as_int(entry.get("addr"))
                if address is not None:
                    workspace.add(address)
            elif action != "snapshot":
                found.recorded = True
                found.stacks = found.stacks or bool(entry.get("frames"))
                found.events += found.events < 2
                if found.timed is None:  # markers may lack it where events carry it
                    found.timed = "time_us" in entry
        found.events += 2 * (len(trace) > _SCAN_ENTRIES)  # more than one, whatever they are
    found.workspace = frozenset(workspace)


def read_shape(
    snapshot: object,
    raw_segments: list[Any],
    traces: list[list[Any]],
    container: str,
    *,
    device_family: str | None = None,
) -> SnapshotShape:
    """Name the shape of ``snapshot`` and the limits that follow from it (no figure changes)."""
    found = _scan(raw_segments, traces)
    npu = device_family == "npu" or bool(found.workspace) or not found.streams
    if npu:
        producer = "torch_npu" if found.streams else EARLY_NPU
    elif found.legacy_blocks:
        producer = PYTORCH_2_0 if found.requested else PYTORCH_1_13
    else:
        producer = "PyTorch 2.1 or newer"
    keys = snapshot if isinstance(snapshot, dict) else {}
    missing = [
        key
        for key, absent in (
            ("device_traces", "device_traces" not in keys),
            ("requested_size", not found.requested),
            ("time_us", found.timed is False),
            ("allocator_settings", "allocator_settings" not in keys),
            ("external_annotations", "external_annotations" not in keys),
            ("stream", not found.streams),
        )
        if absent
    ]
    limits = tuple(_limits(container, found, keys))
    return SnapshotShape(container, producer, tuple(missing), _history(found), limits)


def _history(found: _Evidence) -> str:
    """What the file records of the allocator's history (see :data:`TRACE`)."""
    if found.recorded:
        return ONE_EVENT if found.events == 1 else TRACE
    if found.stacks:
        return STACKS_ONLY
    return NO_HISTORY if found.segments else NOTHING_ALLOCATED


def _limits(container: str, found: _Evidence, keys: dict[str, Any]) -> list[str]:
    limits: list[str] = []
    if container == SEGMENT_LIST:
        limits.append(
            "a segment list (as torch.cuda.memory_snapshot() returns) has no allocator history:"
            " the OOM request, memory over time, the step of each live block and leak suspects"
            " cannot be known from it"
        )
    elif not found.segments and not found.recorded:
        limits.append(
            "nothing allocated: the snapshot holds no segment and its trace no event, so there"
            " is nothing to explain (was it taken on another device, or before any allocation?)"
        )
    elif not found.recorded and found.stacks:
        limits.append(
            "stacks recorded, no trace: live blocks carry the stacks that allocated them, but no"
            " event was kept, so the OOM request, memory over time and the step of each live"
            " block cannot be known from it"
        )
    elif not found.recorded:
        limits.append(
            "allocator history was not recorded when this snapshot was taken: the OOM request,"
            " memory over time and the step of each live block cannot be known from it"
        )
    elif found.events == 1:
        limits.append(
            "the trace holds one event (the legacy _record_memory_history(True) keeps one):"
            " too short to rule out an OOM or to find the peak"
        )
    if found.allocated and not found.stacks:
        limits.append(
            "no block carries a stack (stacks were not recorded): every site is <before recording>"
        )
    if found.timed is False:
        old = found.legacy_blocks or not found.streams
        who = " (PyTorch before 2.1, or torch_npu)" if old else ""
        limits.append(
            f"trace entries carry no time_us{who}: memory over time is drawn by event number,"
            " not seconds"
        )
    if not found.requested and not found.history_real_size and found.allocated:
        limits.append(
            "requested sizes are not recorded: only block sizes (after the allocator's"
            " rounding) are known"
        )
    if found.legacy_blocks:
        limits.append(
            "written before expandable segments existed (PyTorch and torch_npu 2.1): the"
            " fragmentation fix needs a newer release"
        )
    elif "allocator_settings" not in keys and container == SNAPSHOT:
        limits.append(
            "allocator settings (PYTORCH_*_ALLOC_CONF) are not recorded: whether expandable"
            " segments were on is read from the segments alone"
        )
    return limits


def mark_workspace(segments: tuple[Segment, ...], traces: list[list[Any]]) -> tuple[Segment, ...]:
    """torch_npu's workspace segments, found by their ``workspace_snapshot`` trace entries, get
    blocks in state ``npu_workspace``: reserved memory, but neither live tensors nor holes the
    caching allocator could reuse, so a verdict must not count them as free."""
    found = _Evidence()
    _scan_traces(traces, found)
    if not found.workspace:
        return segments
    return tuple(
        replace(segment, blocks=tuple(replace(b, state=NPU_WORKSPACE) for b in segment.blocks))
        if segment.address in found.workspace
        else segment
        for segment in segments
    )


def workspace_limit(segments: tuple[Segment, ...]) -> str | None:
    """One sentence on the workspace segments of a device, or None if it has none."""
    held = [s for s in segments if s.blocks and all(b.state == NPU_WORKSPACE for b in s.blocks)]
    if not held:
        return None
    size = sum(segment.total_size for segment in held)
    return (
        f"{fmt(size)} in {len(held)} segment(s) is torch_npu's workspace memory (marked by"
        " workspace_snapshot trace entries): counted as reserved, not as free inside reserved,"
        " since only operator workspaces can use it"
    )
