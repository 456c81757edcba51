"""The two passes over a dump that ``summary``, ``diff`` and ``leaks`` share.

One over segments and blocks (each live block with its site and caller, memoized per frames
list) and one over the trace for the step of every live block: the last event at a live
block's address is normally its own ``alloc``, so the last position of each such address
(the events at those addresses picked out in C) answers most blocks, and a backward walk,
stopping once it has answered them all, only the rest. The last ``oom`` entry is the dump's
own (:attr:`Dump.oom_positions`).
"""

from __future__ import annotations

from itertools import compress, repeat
from typing import Any

from memforensics.analysis.dump import (
    ALLOCATED,
    BEFORE_RECORDING,
    INACTIVE,
    PENDING_FREE,
    Block,
    Dump,
    OomRecord,
    as_int,
    attribute,
    parse_step,
)


class Tally:
    """Running totals over blocks: bytes by state, the largest free block, live bytes by site
    (per site: block bytes, blocks, requested bytes)."""

    def __init__(self) -> None:
        self.allocated = self.active = self.free = self.largest = self.blocks = 0
        self.sites: dict[tuple[str, str], list[int]] = {}
        self.live: list[tuple[Block, str, str]] = []
        self._site_cache: dict[int, tuple[str, str]] = {}

    def add(self, block: Block) -> None:
        self.blocks += 1
        if block.state == ALLOCATED:
            self.allocated += block.size
            self.active += block.size
            site, caller = self.site(block)
            entry = self.sites.setdefault((site, caller), [0, 0, 0])
            entry[0] += block.size
            entry[1] += 1
            entry[2] += block.requested_size
            self.live.append((block, site, caller))
        elif block.state == PENDING_FREE:
            self.active += block.size
        elif block.state == INACTIVE:
            self.free += block.size
            self.largest = max(self.largest, block.size)

    def site(self, block: Block) -> tuple[str, str]:
        """``(site, caller)`` of a block, memoized per frames list (a hostile file may share one
        many times)."""
        if block.frames is None:
            return BEFORE_RECORDING, BEFORE_RECORDING
        key = id(block.frames)
        found = self._site_cache.get(key)
        if found is None:
            found = self._site_cache[key] = attribute(block.frames)
        return found


def live_sites(dump: Dump) -> list[tuple[Block, str, str]]:
    """Every allocated block of a dump with its site and caller."""
    tally = Tally()
    for segment in dump.segments:
        for block in segment.blocks:
            tally.add(block)
    return tally.live


def live_blocks(dump: Dump) -> list[tuple[Block, str]]:
    """Every allocated block of a dump with its site (used by diff and report too)."""
    return [(block, site) for block, site, _caller in live_sites(dump)]


def scan_trace(dump: Dump, live: list[Block]) -> tuple[OomRecord | None, dict[int, int | None]]:
    """The trace's last ``oom`` entry, and the step of each live block (by address).

    A block's step is its own ``user_metadata``; else the latest ``alloc`` at its address asking
    for the block's requested size (trace entries carry requests, not block sizes; a live block
    cannot have been allocated over, so that entry is its own).
    """
    steps: dict[int, int | None] = {}
    wanted: dict[int, int] = {}
    for block in live:
        step = parse_step(block.user_metadata)
        if step is not None:
            steps[block.address] = step
        else:
            wanted[block.address] = block.requested_size
    trace = dump.trace
    if wanted:
        _steps_from_last_events(trace, wanted, steps)
    if wanted:
        _steps_walking_back(trace, wanted, steps)
    oom: OomRecord | None = None
    if dump.oom_positions:
        entry = trace[dump.oom_positions[-1]]
        oom = OomRecord(
            requested_bytes=as_int(entry.get("size")),
            device_free_bytes=as_int(entry.get("device_free")),
            device_total_bytes=None,
            source="trace",
        )
    return oom, steps


def _steps_from_last_events(
    trace: list[Any], wanted: dict[int, int], steps: dict[int, int | None]
) -> None:
    """Answer (and drop from ``wanted``) every block whose address's last event is its alloc,
    and drop every block whose address the trace never mentions (made before it)."""
    try:
        addresses = list(map(dict.get, trace, repeat("addr")))
        hits = list(compress(range(len(addresses)), map(wanted.__contains__, addresses)))
    except TypeError:  # an entry that is no dict (or an unhashable address): walk instead
        return
    last = {addresses[position]: position for position in hits}  # events at wanted addresses
    for address in list(wanted):
        position = last.get(address)
        if position is None:
            del wanted[address]
            continue
        entry = trace[position]
        if entry.get("action") == "alloc" and entry.get("size") in (wanted[address], None):
            steps[address] = parse_step(entry.get("user_metadata"))
            del wanted[address]


def _steps_walking_back(
    trace: list[Any], wanted: dict[int, int], steps: dict[int, int | None]
) -> None:
    """The latest matching ``alloc`` of each address still in ``wanted``, walking back."""
    for entry in reversed(trace):
        if type(entry) is not dict or entry.get("action") != "alloc":
            continue
        address = entry.get("addr")
        if type(address) is int and address in wanted:
            size = wanted.pop(address)
            if entry.get("size") in (size, None):
                steps[address] = parse_step(entry.get("user_metadata"))
            if not wanted:
                return


def merge_oom(
    sidecar: OomRecord | None, trace: OomRecord | None, kind: str | None
) -> OomRecord | None:
    """Prefer the sidecar's OOM facts, filling its gaps from the trace's ``oom`` entry."""
    if sidecar is None:
        if trace is None and kind == "oom":
            return OomRecord(None, None, None, "sidecar")
        return trace
    if trace is None:
        return sidecar
    return OomRecord(
        requested_bytes=sidecar.requested_bytes
        if sidecar.requested_bytes is not None
        else trace.requested_bytes,
        device_free_bytes=sidecar.device_free_bytes
        if sidecar.device_free_bytes is not None
        else trace.device_free_bytes,
        device_total_bytes=sidecar.device_total_bytes,
        source="sidecar",
        allocation_bytes=sidecar.allocation_bytes,
    )
