"""The lower bound: the least memory the workload needed, which no allocator setting undercuts.

Each block counts at its least possible size, its request rounded up to 512 bytes (no setting
gives a request less). The most bytes ever live at once, so counted, plus the memory outside
PyTorch at the OOM is what any allocator would have needed; above the limit, no setting could
have fit and the OOM is proven exhaustion. One backward pass over the trace, counting live
bytes only, finds that peak; the layout itself is never rebuilt.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memforensics.allocator import K_MIN_BLOCK_SIZE
from memforensics.analysis.dump import ALLOCATED, PENDING_FREE, Dump
from memforensics.analysis.oom.history import has_history
from memforensics.analysis.oom.moment import FINAL, OomMoment
from memforensics.analysis.schema import json_key

LIMIT = "limit"  # the recorded limit (per-process limit, else the device's total)
CAPACITY = "capacity"  # no limit recorded: reserved plus device free at the OOM stands for it


@dataclass(frozen=True, slots=True)
class LowerBound:
    """The least memory the workload needed: most bytes ever live at once (least rounding),
    plus the memory outside PyTorch at the OOM; proven exhausted when above the limit."""

    peak_live_bytes: int
    """The most bytes live at once (each block at its least size), the request not counted."""
    external_bytes: int
    limit_bytes: int
    limit_source: str  # LIMIT, or CAPACITY when no limit was recorded
    needed_bytes: int
    """Peak live plus the request made at that peak plus external."""
    margin_bytes: int
    """How far the need exceeds the limit (negative: room that placement could use)."""
    proven: bool = field(metadata=json_key("proven_exhausted"))
    """No allocator setting could have fit."""
    request_bytes: int = 0
    """The failed request at its least size, when the peak is at it (0: the peak is elsewhere)."""

    @classmethod
    def of(
        cls, peak_live: int, external: int, limit: int, source: str = LIMIT, request: int = 0
    ) -> LowerBound:
        """The bound of ``peak_live`` plus ``request`` plus ``external`` bytes against
        ``limit``."""
        needed = peak_live + request + external
        return cls(
            peak_live, external, limit, source, needed, needed - limit, needed > limit, request
        )


def lower_bound(dump: Dump, moment: OomMoment) -> LowerBound | None:
    """Most bytes ever live at once (least rounding) plus the external memory at the OOM.

    The peak runs over the recorded trace up to the OOM, the failed request included; without
    history, over the live blocks at the OOM plus the request. Without a recorded limit the
    bound is against the capacity the allocator had at the OOM, reserved plus device free (no
    memory outside PyTorch is then known, so none is counted). None when neither is known.
    """
    external = moment.external_bytes
    limit, source = moment.device_total_bytes, LIMIT
    if limit is None and moment.reserved_bytes is not None and moment.device_free_bytes is not None:
        limit, source, external = moment.reserved_bytes + moment.device_free_bytes, CAPACITY, 0
    if limit is None or external is None:
        return None
    peak, request = 0, 0  # live bytes at the peak, and the request made there
    if moment.source == FINAL or moment.index is None:
        live = sum(
            _least(block.requested_size)
            for segment in dump.segments
            for block in segment.blocks
            if block.state in (ALLOCATED, PENDING_FREE)
        )
        peak, request = live, _least(moment.requested_bytes) if moment.requested_bytes else 0
    if moment.index is not None and has_history(dump):
        found = peak_live_bytes(dump, until=moment.index)
        if found is not None and found[0] + found[2] > peak + request:
            peak, request = found[0], found[2]
    return LowerBound.of(peak, external, limit, source, request)


def peak_live_bytes(dump: Dump, until: int | None = None) -> tuple[int, int, int] | None:
    """The most bytes needed at once up to trace index ``until``, each block at its least
    possible size (its request rounded to 512 bytes, which no setting undercuts): the bytes
    live then, the index where that peak was reached, and the failing request's least size
    when the peak is at an ``oom`` entry (else 0; live plus it is what was needed).

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
    asked = 0  # the failing request counted in ``peak`` (at an ``oom`` entry)
    for position in range(len(trace) - 1, -1, -1):
        entry = trace[position]
        if type(entry) is not dict:
            continue
        action = entry.get("action")
        size = entry.get("size")
        if position <= stop and running > peak:
            peak, where, asked = running, position, 0
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
            peak, where, asked = running + _least(size), position, _least(size)
    if running > peak:
        peak, where, asked = running, -1, 0
    return peak - asked, where, asked


def _least(requested: int) -> int:
    """The smallest block any setting gives a request: rounded up to 512 bytes."""
    return max(K_MIN_BLOCK_SIZE, -(-requested // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE)
