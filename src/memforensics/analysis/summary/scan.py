"""The two passes over a dump that ``summary``, ``diff`` and ``leaks`` share.

One over segments and blocks (each live block with its site and caller, memoized per frames
list) and at most one backward pass over the trace that stops as soon as it has the last
``oom`` entry and the step of every live block.
"""

from __future__ import annotations

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
    Walks the trace backwards and stops once both questions are answered.
    """
    steps: dict[int, int | None] = {}
    wanted: dict[int, int] = {}
    for block in live:
        step = parse_step(block.user_metadata)
        if step is not None:
            steps[block.address] = step
        else:
            wanted[block.address] = block.requested_size
    oom: OomRecord | None = None
    for entry in reversed(dump.trace):
        if type(entry) is not dict:
            continue
        action = entry.get("action")
        if action == "alloc" and wanted:
            address = entry.get("addr")
            if type(address) is int and address in wanted:
                size = wanted.pop(address)
                if entry.get("size") in (size, None):
                    steps[address] = parse_step(entry.get("user_metadata"))
        elif action == "oom" and oom is None:
            oom = OomRecord(
                requested_bytes=as_int(entry.get("size")),
                device_free_bytes=as_int(entry.get("device_free")),
                device_total_bytes=None,
                source="trace",
            )
        if oom is not None and not wanted:
            break
    return oom, steps


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
    )
