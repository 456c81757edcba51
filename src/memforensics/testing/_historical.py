"""Snapshots in the shapes older PyTorch and torch_npu wrote, and dumps that cover several devices.

Each converter takes what :class:`~memforensics.testing.SnapshotBuilder` builds (the current
``torch.cuda.memory._snapshot()`` shape) and rewrites it key for key into what the named release
wrote, read from that release's source:

- :func:`as_pytorch_1_13`: ``THCPModule_memorySnapshot`` in ``torch/csrc/cuda/Module.cpp`` of
  1.13: blocks ``{size, state, history: [{addr, real_size, frames}]}`` (no ``address``, no
  ``requested_size``), segments without ``requested_size``/``segment_pool_id``/
  ``is_expandable``/``frames``; trace entries ``{frames, action, addr, size, stream}`` with
  ``device_free`` *instead of* ``addr`` for ``oom``, and no ``time_us``.
- :func:`as_pytorch_2_0`: the same with ``requested_size`` on segments and blocks.
- :func:`as_segment_list`: ``torch.cuda.memory_snapshot()``, the snapshot's ``segments`` only.
- :func:`as_torch_npu`: ``THNPModule_memorySnapshot`` of torch_npu 2.x: the current dict without
  ``time_us``, ``user_metadata``, ``allocator_settings`` and ``external_annotations``, plus one
  workspace-allocator segment whose trace entries (``workspace_snapshot``, ``segment_alloc``,
  ``alloc``) are put first, as ``NPUWorkspaceAllocator::get_trace`` does.
- :func:`as_torch_npu_early`: early torch_npu's bare list of segments without ``stream``,
  blocks holding only ``size`` and ``state``.

:func:`several_devices` and :func:`wrong_sidecar_device` build the multi-device cases.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any

from memforensics.testing._scenarios import make_sidecar
from memforensics.testing._synthetic import (
    CACHE,
    INACTIVE,
    OPTIMIZER,
    TRAIN,
    Block,
    GiB,
    MiB,
    SnapshotBuilder,
    SnapshotTruth,
)

_LEGACY_SEGMENT_KEYS = (
    "device",
    "address",
    "total_size",
    "allocated_size",
    "active_size",
    "stream",
    "segment_type",
)


def _legacy_block(block: dict[str, Any], *, requested: bool) -> dict[str, Any]:
    raw: dict[str, Any] = {"size": block["size"], "state": block["state"]}
    if requested:
        raw["requested_size"] = block.get("requested_size", block["size"])
    frames = block.get("frames")
    if frames:
        real = block.get("requested_size", block["size"])
        raw["history"] = [{"addr": block["address"], "real_size": real, "frames": frames}]
    return raw


def _legacy_entry(entry: dict[str, Any]) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    if entry.get("frames"):
        raw["frames"] = entry["frames"]
    raw["action"] = entry["action"]
    if entry["action"] == "oom":
        raw["device_free"] = entry.get("device_free", 0)
    else:
        raw["addr"] = entry["addr"]
    raw["size"] = entry["size"]
    raw["stream"] = entry.get("stream", 0)
    return raw


def _legacy(snapshot: dict[str, Any], *, requested: bool) -> dict[str, Any]:
    segments = []
    for segment in snapshot["segments"]:
        raw = {key: segment[key] for key in _LEGACY_SEGMENT_KEYS if key in segment}
        if requested:
            raw["requested_size"] = segment.get("requested_size", segment["allocated_size"])
        raw["blocks"] = [_legacy_block(b, requested=requested) for b in segment["blocks"]]
        segments.append(raw)
    traces = [[_legacy_entry(e) for e in trace] for trace in snapshot["device_traces"]]
    return {"segments": segments, "device_traces": traces}


def as_pytorch_1_13(snapshot: dict[str, Any]) -> dict[str, Any]:
    """``snapshot`` as PyTorch 1.13 wrote it (stacks in ``history``, no ``requested_size``)."""
    return _legacy(snapshot, requested=False)


def as_pytorch_2_0(snapshot: dict[str, Any]) -> dict[str, Any]:
    """``snapshot`` as PyTorch 2.0 wrote it (1.13's shape plus ``requested_size``)."""
    return _legacy(snapshot, requested=True)


def as_segment_list(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    """What ``torch.cuda.memory_snapshot()`` returns for the same state: the segments only."""
    return copy.deepcopy(snapshot["segments"])


def as_torch_npu(snapshot: dict[str, Any], *, workspace: int | None = MiB(4)) -> dict[str, Any]:
    """``snapshot`` as torch_npu writes it; ``workspace`` bytes of workspace segment (or none)."""
    segments = copy.deepcopy(snapshot["segments"])
    traces = [
        [{k: v for k, v in e.items() if k not in ("time_us", "user_metadata")} for e in trace]
        for trace in snapshot["device_traces"]
    ]
    if workspace:
        device = segments[0]["device"] if segments else 0
        address = max((s["address"] + s["total_size"] for s in segments), default=1 << 40)
        address += MiB(2) - address % MiB(2)
        block: dict[str, Any] = {
            "address": address,
            "size": workspace,
            "requested_size": workspace - 32,
            "state": INACTIVE,
            "frames": [],
        }
        segments.append(
            {
                "device": device,
                "address": address,
                "total_size": workspace,
                "allocated_size": 0,
                "active_size": 0,
                "requested_size": 0,
                "stream": 0,
                "segment_pool_id": (0, 0),
                "segment_type": "large",
                "is_expandable": False,
                "frames": [],
                "blocks": [block],
            }
        )
        marks = [
            {"action": action, "addr": address, "size": workspace, "stream": 0}
            for action in ("workspace_snapshot", "segment_alloc", "alloc")
        ]
        traces[device] = marks + traces[device]
    return {"segments": segments, "device_traces": traces}


def npu_truth(truth: SnapshotTruth, workspace: int = MiB(4)) -> SnapshotTruth:
    """The truth of :func:`as_torch_npu`'s snapshot: its workspace segment is reserved memory
    (one more segment and block), but not free memory a tensor could use."""
    return replace(
        truth,
        reserved_bytes=truth.reserved_bytes + workspace,
        segments=truth.segments + 1,
        blocks=truth.blocks + 1,
    )


def as_torch_npu_early(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    """Early torch_npu's ``_npu_memorySnapshot()``: a list of segments, no streams, no stacks."""
    keys = ("device", "address", "total_size", "allocated_size", "active_size", "segment_type")
    return [
        {
            **{key: segment[key] for key in keys},
            "blocks": [{"size": b["size"], "state": b["state"]} for b in segment["blocks"]],
        }
        for segment in snapshot["segments"]
    ]


@dataclass(frozen=True)
class MultiDeviceDump:
    """One snapshot covering several devices, its sidecar, and the truth on each device."""

    snapshot: dict[str, Any]
    sidecar: dict[str, Any] | None
    truths: dict[int, SnapshotTruth]
    oom_device: int | None


def _merge(builders: dict[int, SnapshotBuilder]) -> dict[str, Any]:
    count = max(builders) + 1
    segments: list[dict[str, Any]] = []
    traces: list[list[dict[str, Any]]] = [[] for _ in range(count)]
    for device, builder in sorted(builders.items()):
        built = builder.build()
        segments += built["segments"]
        traces[device] = built["device_traces"][device]
    return {
        "segments": segments,
        "device_traces": traces,
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False},
    }


def several_devices(
    *, oom_device: int | None = 1, sidecar_device: int | None = 0
) -> MultiDeviceDump:
    """A process driving three GPUs (DataParallel-like): 2 GiB live on device 0, 3.5 GiB on
    device 1, 1.5 GiB on device 2. With ``oom_device``, that device's trace ends with an OOM
    of 1 GiB that its 64 MiB of holes cannot hold (exhausted); the sidecar (if
    ``sidecar_device`` is not None) names ``sidecar_device``, as schema-1 sidecars did."""
    builders: dict[int, SnapshotBuilder] = {}
    layouts = {
        0: [Block(GiB(2), site=TRAIN)],
        1: [Block(GiB(2), site=TRAIN), Block(MiB(64), state=INACTIVE, site=None)],
        2: [Block(GiB(1), site=OPTIMIZER), Block(MiB(512), site=CACHE)],
    }
    for device, blocks in layouts.items():
        builder = SnapshotBuilder(device=device, base_address=0x7F00_0000_0000 + (device << 36))
        builder.segment(*blocks)
        if device == 1:
            builder.segment(Block(GiB(1), site=OPTIMIZER), Block(MiB(448), site=CACHE))
        builder.churn(6 + 3 * device)
        if device == oom_device:
            builder.oom(requested=GiB(1), device_free=MiB(32))
        builders[device] = builder
    sidecar = None
    if sidecar_device is not None:
        kind = "oom" if oom_device is not None else "window"
        sidecar = make_sidecar(kind, device_index=sidecar_device)
    truths = {device: builder.truth() for device, builder in builders.items()}
    return MultiDeviceDump(_merge(builders), sidecar, truths, oom_device)


def wrong_sidecar_device(*, device: int = 3, events: int = 43) -> MultiDeviceDump:
    """One rank on ``device`` of an 8-GPU node whose sidecar says ``device_index: 0`` (the
    device current at ``install()``, before ``set_device``): all memory and a trace of exactly
    ``events`` entries ending in an OOM are on ``device``; traces of the other 7 are empty."""
    builder = SnapshotBuilder(device=device)
    builder.segment(Block(GiB(1), site=TRAIN), Block(MiB(8), state=INACTIVE, site=None))
    used = len(builder.build()["device_traces"][device])
    builder.churn(events - used - 1)
    builder.oom(requested=MiB(512), device_free=MiB(16))
    built = builder.build()
    built["device_traces"] += [[] for _ in range(8 - len(built["device_traces"]))]
    oom = {"requested_bytes": None, "device_free_bytes": MiB(16), "device_total_bytes": None}
    sidecar = make_sidecar("oom", rank=device, device_index=0, step=7, oom=oom)
    return MultiDeviceDump(built, sidecar, {device: builder.truth()}, device)
