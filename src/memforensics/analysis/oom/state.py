"""The allocator's state at one point of the trace: segments with the blocks live inside them.

:mod:`~memforensics.analysis.oom.history` builds it by undoing the trace; the OOM moment, the
replay's start layout and the blame read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class LiveBlock:
    """A block held by the program (or freed and waiting for its streams) at that point."""

    address: int
    requested: int
    size: int | None  # None: not known exactly (guessed from the request when placed)
    pending: bool
    stream: int


Held = tuple[int, "int | None", bool, int]
"""A live block while the trace is undone: requested bytes, size if known, pending, stream."""


@dataclass(slots=True)
class SegmentState:
    """One segment (an expandable segment: one mapped range) and the live blocks inside."""

    address: int
    size: int
    stream: int
    is_small: bool
    expandable: bool
    blocks: list[LiveBlock] = field(default_factory=list)

    @property
    def end(self) -> int:
        """First address past the segment."""
        return self.address + self.size


@dataclass(frozen=True)
class AllocatorState:
    """Segments with their live blocks, by address; ``problems`` the contradictions met."""

    segments: tuple[SegmentState, ...]
    problems: tuple[str, ...]
    problem_count: int

    @property
    def reserved(self) -> int:
        """Bytes in segments."""
        return sum(segment.size for segment in self.segments)

    @property
    def allocated(self) -> int:
        """Bytes in live blocks (sizes as placed)."""
        return sum(block.size or 0 for seg in self.segments for block in seg.blocks)

    @property
    def live_blocks(self) -> int:
        """Number of live blocks."""
        return sum(len(segment.blocks) for segment in self.segments)

    def free_runs(self) -> list[tuple[SegmentState, int, int]]:
        """Every free run ``(segment, address, size)``: adjacent free blocks always merge,
        so a gap between live blocks is one free block."""
        runs: list[tuple[SegmentState, int, int]] = []
        for segment in self.segments:
            cursor = segment.address
            for block in segment.blocks:
                if block.address > cursor:
                    runs.append((segment, cursor, block.address - cursor))
                cursor = max(cursor, block.address + (block.size or 0))
            if segment.end > cursor:
                runs.append((segment, cursor, segment.end - cursor))
        return runs
