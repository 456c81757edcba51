"""The sim device's state in torch's formats: snapshot segments, blocks, trace entries, stats.

Placement lives in :mod:`memforensics.allocator` (the one model of PyTorch's caching allocator,
shared with the replay); this module only writes what ``torch.cuda.memory._snapshot()`` and
``torch.cuda.memory_stats()`` would report for that state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memforensics.allocator import Block, DeviceCachingAllocator, segment_blocks

Frame = tuple[str, int, str]
"""One Python frame as ``(filename, line, name)``: immutable so stacks can be shared."""
Stack = tuple[Frame, ...]
"""Frames innermost first, as torch stores them."""
Context = tuple[Stack, str]
"""What the sim keeps on a block: the allocation's stack and its ``user_metadata``."""
Entry = tuple[str, int, int, int, int, Stack, str, "int | None"]
"""A trace event: action, addr, size, stream, time_us, stack, user_metadata, device_free."""
FrameLists = Callable[[Stack], list[dict[str, Any]]]
"""Turns a stored stack into the snapshot's list of frame dicts."""
_NO_CONTEXT: Context = ((), "")


def memory_stats(allocator: DeviceCachingAllocator) -> dict[str, int]:
    """The allocator's statistics under the key names of ``torch.cuda.memory_stats()``."""
    split_bytes, split_count = allocator.inactive_split()
    max_split = allocator.settings.to_snapshot()["max_split_size"]
    stats = {
        "inactive_split_bytes.all.current": split_bytes,
        "inactive_split.all.current": split_count,
        "num_alloc_retries": allocator.num_alloc_retries,
        "num_ooms": allocator.num_ooms,
        "num_device_alloc": allocator.num_device_alloc,
        "num_device_free": allocator.num_device_free,
        "num_sync_all_streams": allocator.num_sync_all_streams,
        "max_split_size": max_split,
    }
    named = {
        "allocated_bytes": allocator.allocated_bytes,
        "active_bytes": allocator.active_bytes,
        "requested_bytes": allocator.requested_bytes,
        "reserved_bytes": allocator.reserved_bytes,
        "allocation": allocator.allocation,
        "active": allocator.active,
        "segment": allocator.segment,
    }
    for name, stat in named.items():
        for field in ("current", "peak", "allocated", "freed"):
            stats[f"{name}.all.{field}"] = getattr(stat, field)
    return dict(sorted(stats.items()))


def frame_dict(frame: Frame) -> dict[str, Any]:
    """One frame as torch writes it."""
    return {"filename": frame[0], "line": frame[1], "name": frame[2]}


def segment_dict(head: Block, device: int, frames: FrameLists) -> dict[str, Any]:
    """One segment (an expandable one: one mapped range) as ``_snapshot()`` writes it."""
    blocks = [block_dict(block, frames) for block in segment_blocks(head)]
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    active = [b for b in blocks if b["state"] != "inactive"]
    context = head.segment_context
    stack, _metadata = context if isinstance(context, tuple) else _NO_CONTEXT
    return {
        "device": device,
        "address": head.address,
        "total_size": sum(b["size"] for b in blocks),
        "allocated_size": allocated,
        "active_size": sum(b["size"] for b in active),
        "requested_size": sum(b["requested_size"] for b in active),
        "stream": head.stream,
        "segment_type": "small" if head.pool.is_small else "large",
        "segment_pool_id": (0, 0),
        "is_expandable": head.expandable is not None,
        "frames": frames(stack),
        "blocks": blocks,
    }


def block_dict(block: Block, frames: FrameLists) -> dict[str, Any]:
    """One block; inactive ones have no frames and a zero ``requested_size``, as in torch."""
    if block.allocated:
        state = "active_allocated"
    elif block.event_count > 0:
        state = "active_pending_free"
    else:
        state = "inactive"
    stack, metadata = block.context if isinstance(block.context, tuple) else _NO_CONTEXT
    found: dict[str, Any] = {
        "address": block.address,
        "size": block.size,
        "requested_size": block.requested_size if state != "inactive" else 0,
        "state": state,
        "frames": frames(stack),
    }
    if metadata:
        found["user_metadata"] = metadata
    return found


def entry_dict(entry: Entry, frames: FrameLists) -> dict[str, Any]:
    """One trace event; an ``oom`` event also carries ``device_free``."""
    action, addr, size, stream, time_us, stack, metadata, device_free = entry
    found: dict[str, Any] = {
        "action": action,
        "addr": addr,
        "size": size,
        "stream": stream,
        "time_us": time_us,
        "frames": frames(stack),
        "user_metadata": metadata,
    }
    if device_free is not None:
        found["device_free"] = device_free
    return found
