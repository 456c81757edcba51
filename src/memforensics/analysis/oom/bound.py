"""The most bytes live at once, as a lower bound no allocator setting can go under.

Split from :mod:`memforensics.analysis.oom.history`: where ``state_before`` rebuilds the whole
layout at one point of the trace, this is one backward pass over the trace counting only live
bytes (each block at its least possible size), which is what the proof of a verdict needs.
"""

from __future__ import annotations

from memforensics.allocator import K_MIN_BLOCK_SIZE
from memforensics.analysis.dump.load import Dump
from memforensics.analysis.dump.model import ALLOCATED, PENDING_FREE


def peak_live_bytes(dump: Dump, until: int | None = None) -> tuple[int, int] | None:
    """The most bytes live at once up to trace index ``until`` (the failing request counted at
    an ``oom`` entry), each block at its least possible size (its request rounded to 512 bytes,
    which no setting undercuts); and the index where that peak was reached.

    One backward pass from the final blocks: before an ``alloc`` its block was not live, before
    a ``free_completed`` it was. Blocks freed but still waiting for other streams count as live.
    None when the trace contradicts the final state (a bound must not rest on such history).
    """
    live: dict[int, int] = {}
    for segment in dump.segments:
        for block in segment.blocks:
            if block.state in (ALLOCATED, PENDING_FREE):
                live[block.address] = _least(block.requested_size)
    running = sum(live.values())
    trace = dump.trace
    stop = len(trace) - 1 if until is None else min(until, len(trace) - 1)
    peak, where = (running, len(trace) - 1) if until is None else (0, -1)
    for position in range(len(trace) - 1, -1, -1):
        entry = trace[position]
        if type(entry) is not dict:
            continue
        action = entry.get("action")
        size = entry.get("size")
        if position <= stop and running > peak:
            peak, where = running, position
        if action == "alloc":
            address = entry.get("addr")
            least = live.pop(address, None) if type(address) is int else None
            if least is None:
                return None
            running -= least
        elif action == "free_completed" or action == "free":  # noqa: PLR1714  # hot loop
            address = entry.get("addr")
            if type(address) is not int or type(size) is not int or address in live:
                return None
            least = _least(size)
            live[address] = least
            running += least
        elif (
            action == "oom"
            and position <= stop
            and type(size) is int
            and running + _least(size) > peak
        ):
            peak, where = running + _least(size), position
    if running > peak:
        peak, where = running, -1
    return peak, where


def _least(requested: int) -> int:
    """The smallest block any setting gives a request: rounded up to 512 bytes."""
    return max(K_MIN_BLOCK_SIZE, -(-requested // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE)
