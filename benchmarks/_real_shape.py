"""Benchmark snapshots shaped like real ones, so memory figures mean what they will on a real dump.

The real snapshots in shared/data load into about 4x their file size; the sim's and the
synthetic builder's into 8-10x, because their stacks are short and their entries tiny. What
makes a real dump is measured on those files (see docs/analysis.md, "Benchmarks"):

* each trace entry is a dict of 6 keys (``action addr size stream time_us frames``) with its
  own ``frames`` list, 25 frames deep at the median with ``stacks="python"``-plus-C++ (89 on a
  compiled transformer), while the frame dicts themselves are shared: 529 distinct dicts serve
  181,587 frame references in the CNN dump, 3,175 serve 932,169 in the transformer one;
* the mix is about 38 % ``alloc``, 30 % ``free_requested``, 30 % ``free_completed``, 2 %
  ``segment_alloc`` and the odd ``snapshot``;
* segments and blocks carry the same frames lists.

:func:`real_shaped` builds such a dict with a seeded RNG: a pool of frame dicts, a few hundred
stack templates (code paths) over them, and entries that each get a fresh list copy of one.
"""

from __future__ import annotations

import random
from typing import Any

MiB = 1 << 20


def _frame_pool(rng: random.Random, size: int) -> list[dict[str, Any]]:
    pool = []
    for index in range(size):
        kind = rng.random()
        if kind < 0.45:
            frame = {"filename": "??", "line": 0, "name": f"c10::op_{index}(at::Tensor const&)"}
        elif kind < 0.6:
            frame = {"filename": "CUDACachingAllocator.cpp", "line": 0, "name": f"alloc_{index}"}
        elif kind < 0.9:
            path = f"/usr/lib/python3.12/site-packages/torch/nn/modules/m{index % 40}.py"
            frame = {"filename": path, "line": index % 900, "name": "forward"}
        else:
            frame = {"filename": f"/work/model/layer{index % 25}.py", "line": index, "name": "fwd"}
        pool.append(frame)
    return pool


SHORT = (8, 40)
"""Frames per stack of the short-stack variant (``stacks="python"`` without C++ frames)."""


def stack_templates(
    rng: random.Random, count: int = 400, *, depths: tuple[int, int] | None = None
) -> list[list[Any]]:
    """``count`` code paths over a pool of 3,000 shared frame dicts, real-shaped in depth (or
    uniform in ``depths``); an entry takes ``list(template)``, its own list over the shared
    dicts, as PyTorch writes it."""
    return _templates(rng, _frame_pool(rng, 3000), count, depths)


def _templates(
    rng: random.Random, pool: list[dict[str, Any]], count: int, depths: tuple[int, int] | None
) -> list[list[Any]]:
    entry = {"filename": "/work/train.py", "line": 1, "name": "<module>"}
    found = []
    for _ in range(count):
        if depths is None:
            depth = max(8, int(rng.lognormvariate(3.3, 0.45)))  # median ~27, long tail to ~90
        else:
            depth = rng.randint(*depths)
        found.append([rng.choice(pool) for _ in range(depth - 1)] + [entry])
    return found


def real_shaped(
    events: int, *, seed: int = 0, segments: int = 400, depths: tuple[int, int] | None = None
) -> dict[str, Any]:
    """A snapshot dict with ``events`` trace entries and ``segments`` segments, real-shaped
    (``depths``: every stack between these many frames, e.g. :data:`SHORT`)."""
    rng = random.Random(seed)
    templates = stack_templates(rng, depths=depths)
    trace: list[dict[str, Any]] = []
    base, clock = 0x7F00_0000_0000, 1_764_000_000_000_000
    live: list[tuple[int, int]] = []
    next_addr = base + (1 << 36)
    while len(trace) < events:
        clock += rng.randint(1, 400)
        roll = rng.random()
        if roll < 0.02:
            size = 20 * MiB
            trace.append(_entry("segment_alloc", next_addr, size, clock, rng, templates))
            next_addr += size
        elif roll < 0.40 or not live:
            size = rng.choice((512, 4096, 65536, MiB, 4 * MiB))
            live.append((next_addr, size))
            trace.append(_entry("alloc", next_addr, size, clock, rng, templates))
            next_addr += size
        else:
            addr, size = live.pop(rng.randrange(len(live)))
            trace.append(_entry("free_requested", addr, size, clock, rng, templates))
            trace.append(_entry("free_completed", addr, size, clock + 1, rng, templates))
    return {
        "segments": [_segment(base + i * 20 * MiB, rng, templates) for i in range(segments)],
        "device_traces": [trace],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False},
        "external_annotations": [],
    }


def _entry(
    action: str, addr: int, size: int, clock: int, rng: random.Random, templates: list[list[Any]]
) -> dict[str, Any]:
    return {
        "action": action,
        "addr": addr,
        "size": size,
        "stream": 0,
        "time_us": clock,
        "frames": list(rng.choice(templates)),  # its own list, shared frame dicts: as torch
    }


def _segment(address: int, rng: random.Random, templates: list[list[Any]]) -> dict[str, Any]:
    blocks, offset = [], 0
    while offset < 20 * MiB:
        size = min(rng.choice((MiB, 2 * MiB, 4 * MiB)), 20 * MiB - offset)
        state = "active_allocated" if rng.random() < 0.8 else "inactive"
        block = {"address": address + offset, "size": size, "requested_size": size, "state": state}
        block["frames"] = list(rng.choice(templates)) if state != "inactive" else []
        blocks.append(block)
        offset += size
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    return {
        "device": 0,
        "address": address,
        "total_size": 20 * MiB,
        "allocated_size": allocated,
        "active_size": allocated,
        "requested_size": allocated,
        "stream": 0,
        "segment_type": "large",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": [],
        "blocks": blocks,
    }
