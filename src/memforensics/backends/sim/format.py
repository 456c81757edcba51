"""The sim device's state in torch's formats: snapshot segments, blocks, trace entries, stats.

Placement lives in :mod:`memforensics.allocator` (the one model of PyTorch's caching allocator,
shared with the replay); this module only writes what ``torch.cuda.memory._snapshot()`` and
``torch.cuda.memory_stats()`` would report for that state.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

import memforensics.allocator
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


# Stack capture for the ``sim`` device: the caller's Python frames, as torch records them.
#
# This is the one hot path of a recording sim device (it runs on every allocation and free), and
# its caches are module state of their own: frames cached per code position, stacks interned.
# Plain Python: never imports torch.

MALLOC_CPP: Stack = (
    ("??", 0, "torch::unwind::unwind()"),
    ("??", 0, "c10::cuda::CUDACachingAllocator::malloc"),
)
FREE_CPP: Stack = (
    ("??", 0, "torch::unwind::unwind()"),
    ("??", 0, "c10::cuda::CUDACachingAllocator::free"),
)
_SKIP: Frame = ("", 0, "")
_HERE = os.path.dirname(__file__)
_SKIPPED_FILES = frozenset(
    {
        __file__,
        os.path.join(_HERE, "__init__.py"),
        os.path.join(_HERE, "backend.py"),
        os.path.join(_HERE, "device.py"),
        os.path.join(_HERE, "tensor.py"),
        weakref.__file__,
        *(memforensics.allocator.__path__),
    }
)
_CACHE_LIMIT = 1 << 16
_frame_cache: dict[int, Frame] = {}
_frame_codes: list[CodeType] = []  # keeps cached code objects alive, so their ids stay unique
_frame_lock = threading.Lock()
_stack_cache: dict[Stack, Stack] = {}


def capture_stack(cpp: Stack) -> Stack:
    """The caller's Python frames, innermost first, without the sim device's own frames.

    This runs on every allocation and free while history is recorded, so it is the hot path:
    frames are cached per code position (keyed by integers, which hash for free; a code
    object hashes its whole contents) and stacks are interned, so equal stacks share one
    object. That keeps million-event traces small and lets snapshots share frame lists.
    """
    frames = list(cpp)
    frame: FrameType | None = sys._getframe(1)
    cache = _frame_cache
    while frame is not None:
        code = frame.f_code
        found = cache.get(id(code) * 1048576 + frame.f_lasti)
        if found is None:
            found = _frame_of(code, frame.f_lasti, frame.f_lineno)
        if found is not _SKIP:
            frames.append(found)
        frame = frame.f_back
    stack = tuple(frames)
    if len(_stack_cache) >= _CACHE_LIMIT:
        _stack_cache.clear()
    return _stack_cache.setdefault(stack, stack)


def _frame_of(code: CodeType, lasti: int, line: int | None) -> Frame:
    """Build and cache the frame of one code position (a cache miss of ``capture_stack``)."""
    skipped = code.co_filename in _SKIPPED_FILES  # also weakref.finalize's __call__ on GC frees
    found = _SKIP if skipped else (code.co_filename, line or 0, code.co_name)
    with _frame_lock:  # a code must stay alive exactly as long as its cache entry
        if len(_frame_cache) >= _CACHE_LIMIT:
            _frame_cache.clear()
            _frame_codes.clear()
        _frame_codes.append(code)
        _frame_cache[id(code) * 1048576 + lasti] = found
    return found


def memory_stats(allocator: DeviceCachingAllocator) -> dict[str, int]:
    """The allocator's statistics under the key names of ``torch.cuda.memory_stats()``."""
    max_split = allocator.settings.to_snapshot()["max_split_size"]
    stats = {
        "num_alloc_retries": allocator.num_alloc_retries,
        "num_ooms": allocator.num_ooms,
        "num_device_alloc": allocator.num_device_alloc,
        "num_device_free": allocator.num_device_free,
        "num_sync_all_streams": allocator.num_sync_all_streams,
        # requests ``throw_on_cudamalloc_oom`` turns away before cudaMalloc: that policy is not
        # modelled (a request over the limit fails as an OOM), so none is counted
        "num_oom_rejections": 0,
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
        "inactive_split": allocator.inactive_split,
        "inactive_split_bytes": allocator.inactive_split_bytes,
    }
    kinds = {"large_pool": allocator.large_pool, "small_pool": allocator.small_pool}
    for name, stat in named.items():
        for field in ("current", "peak", "allocated", "freed"):
            stats[f"{name}.all.{field}"] = getattr(stat, field)
            for kind, pool_stats in kinds.items():
                stats[f"{name}.{kind}.{field}"] = getattr(getattr(pool_stats, name), field)
    for name in ("oversize_allocations", "oversize_segments"):  # one Stat each, not per pool
        for field in ("current", "peak", "allocated", "freed"):
            stats[f"{name}.{field}"] = getattr(getattr(allocator, name), field)
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
        "segment_pool_id": head.pool.owner,
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
