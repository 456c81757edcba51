"""Typed views of a snapshot's segments and blocks, built defensively from untrusted data.

A snapshot is a plain dict whose shape has drifted across PyTorch releases (``history`` lists
instead of ``frames``, blocks without ``address``, tuple ``segment_pool_id``), and a file may be
damaged or hostile. Segments and blocks (thousands) are checked and converted once here, so the
analysis code can trust them; the trace (possibly millions of entries) stays a raw list and is
read defensively where it is used, because converting it would cost as much as loading it.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass

from memforensics._errors import SnapshotLoadError
from memforensics.allocator import AllocatorSettings, round_size

# Block size of a trace allocation: the one unit every figure of live bytes is counted in.
#
# A trace's ``alloc`` and free entries carry the caller's request; segments and blocks carry the
# rounded block size, which is what occupies the device and what PyTorch's ``allocated_bytes``
# counter counts. Kinds, the peak, the timeline and ``diff`` all count blocks, so a trace
# allocation is counted at its block's size: the snapshot's own block where the snapshot still
# holds it, else the allocator model's ``round_size`` under the recorded settings.
#
# Rounding is a floor, not always the block: the allocator hands over a free block without
# splitting it when the remainder would be too small to keep (at most 1 MiB in the large pool, or
# ``max_non_split_rounding_mb`` above ``max_split_size_mb``), so a block freed during the trace may
# have been up to that much bigger than its rounded request.


def block_size(settings: AllocatorSettings, requested: int, known: int | None = None) -> int:
    """The block a trace allocation of ``requested`` bytes occupied.

    ``known``: the snapshot's block at the allocation's address, when it is still live there
    (it wins: it is what the allocator really handed over). Otherwise ``round_size`` under
    ``settings``; a request of 0 bytes (or none) occupies no block.
    """
    if known is not None and known > 0:
        return known
    if requested <= 0:
        return 0
    return round_size(settings, requested)


ALLOCATED = "active_allocated"
PENDING_FREE = "active_pending_free"
INACTIVE = "inactive"
# Not a PyTorch state: a block of torch_npu's workspace allocator (see ``dump.shapes``). Its
# memory is reserved, but it is neither a tensor nor a hole the caching allocator could reuse.
NPU_WORKSPACE = "npu_workspace"


@dataclass(frozen=True, slots=True)
class Block:
    """One block of a segment: live (allocated), freed but awaiting its stream, or a free hole."""

    address: int
    size: int
    requested_size: int
    state: str
    frames: object
    user_metadata: object


@dataclass(frozen=True, slots=True)
class Segment:
    """One region the caching allocator reserved from the device, cut into blocks."""

    address: int
    total_size: int
    device: int | None
    stream: int | None
    segment_type: str
    is_expandable: bool
    blocks: tuple[Block, ...]


WIDEST = 1 << 64
"""Integers a snapshot's numbers can hold (sizes, addresses, lines are 64-bit at most): a
wider one is no number the allocator wrote, and some could not even be printed."""


def as_int(value: object) -> int | None:
    """``value`` when it is a real int (not a bool) within 64 bits, else None."""
    if isinstance(value, int) and not isinstance(value, bool) and -WIDEST < value < WIDEST:
        return value
    return None


def _size(value: object, where: str, source: str) -> int:
    size = as_int(value)
    if size is None or size < 0:
        shown = _odd_number(value)
        raise SnapshotLoadError(f"{source}: not a memory snapshot ({where} is {shown})")
    return size


def _shown() -> reprlib.Repr:
    """Shows a value that is no size in a few dozen characters, however large it is."""
    shown = reprlib.Repr()
    shown.maxlevel = shown.maxdict = shown.maxlist = shown.maxtuple = 2
    shown.maxstring = shown.maxother = 40
    return shown


_SHOWN = _shown()


def _odd_number(value: object) -> str:
    """How a size that is no size is named in the one-line refusal; a value holding an integer
    too long for python to print (past ``sys.get_int_max_str_digits()``) by its type."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            return f"{_SHOWN.repr(value):.40}"
        except ValueError:
            return f"a {type(value).__name__} holding a number too long to print"
    if -WIDEST < value < 0:
        return "negative"
    return "a number past 64 bits"


def segments_from_list(raw_segments: list[object], source: str) -> tuple[Segment, ...]:
    """Convert a list of segment dicts (a snapshot's ``segments``, or ``memory_snapshot()``)."""
    return tuple(_segment(raw, index, source) for index, raw in enumerate(raw_segments))


def _segment(raw: object, index: int, source: str) -> Segment:
    where = f"segments[{index}]"
    if not isinstance(raw, dict):
        raise SnapshotLoadError(f"{source}: not a memory snapshot ({where} is not a dict)")
    address = as_int(raw.get("address")) or 0
    raw_blocks = raw.get("blocks", [])
    if not isinstance(raw_blocks, list):
        raise SnapshotLoadError(f"{source}: not a memory snapshot ({where}.blocks is not a list)")
    blocks: list[Block] = []
    offset = address
    for block_index, raw_block in enumerate(raw_blocks):
        block = _block(raw_block, offset, f"{where}.blocks[{block_index}]", source)
        blocks.append(block)
        offset = block.address + block.size
    total = as_int(raw.get("total_size"))
    if total is None or total < 0:
        total = sum(block.size for block in blocks)
    segment_type = raw.get("segment_type")
    return Segment(
        address=address,
        total_size=total,
        device=as_int(raw.get("device")),
        stream=as_int(raw.get("stream")),
        segment_type=segment_type if isinstance(segment_type, str) else "large",
        is_expandable=raw.get("is_expandable") is True,
        blocks=tuple(blocks),
    )


def _block(raw: object, offset: int, where: str, source: str) -> Block:
    """A block; old snapshots lack ``address`` (blocks are contiguous) and keep ``history``."""
    if not isinstance(raw, dict):
        raise SnapshotLoadError(f"{source}: not a memory snapshot ({where} is not a dict)")
    size = _size(raw.get("size"), f"{where}.size", source)
    state = raw.get("state")
    if not isinstance(state, str):
        raise SnapshotLoadError(f"{source}: not a memory snapshot ({where}.state is missing)")
    address = as_int(raw.get("address"))
    frames = raw.get("frames")
    requested = as_int(raw.get("requested_size"))
    history = raw.get("history")
    if isinstance(history, list) and history and isinstance(history[-1], dict):
        # PyTorch 1.13-2.0: the live allocation is the block's latest history entry, and its
        # ``real_size`` is what was asked for (1.13 writes no ``requested_size`` at all).
        latest = history[-1]
        if frames is None:
            frames = latest.get("frames")
        if requested is None and state == ALLOCATED:
            requested = as_int(latest.get("real_size"))
    return Block(
        address=offset if address is None else address,
        size=size,
        requested_size=size if requested is None else requested,
        state=state,
        frames=frames,
        user_metadata=raw.get("user_metadata"),
    )
