"""Config lint from the dump: allocator settings that cannot do what they are set for.

Each finding is a known trap, read from the snapshot's ``allocator_settings`` and what the dump
shows of the device:

- ``garbage_collection_threshold`` without a memory fraction: PyTorch only collects when
  ``set_per_process_memory_fraction`` was called (``set_fraction`` in the allocator), so the
  setting does nothing.
- expandable segments already on while segments fragment: the usual advice does not apply.
- ``max_split_size_mb`` together with expandable segments: oversize blocks are never split or
  merged back, and reserved memory can grow without bound (PyTorch issue 193400).
"""

from __future__ import annotations

from memforensics.allocator import NO_LIMIT, AllocatorSettings
from memforensics.analysis.dump import Dump
from memforensics.analysis.oom import OomMoment


def lint(dump: Dump, settings: AllocatorSettings, moment: OomMoment | None) -> list[str]:
    """Findings, one sentence each (empty when nothing is off)."""
    found: list[str] = []
    expandable = settings.expandable_segments or any(s.is_expandable for s in dump.segments)
    if settings.garbage_collection_threshold > 0:
        fraction = _fraction_set(moment)
        if fraction is False:
            found.append(
                "garbage_collection_threshold is set but no memory fraction is (the OOM's limit"
                " is the whole device): PyTorch only collects under"
                " set_per_process_memory_fraction, so it has no effect"
            )
        elif fraction is None:
            found.append(
                "garbage_collection_threshold acts only under set_per_process_memory_fraction;"
                " this dump cannot tell whether one was set"
            )
    if expandable and settings.max_split_size != NO_LIMIT:
        found.append(
            "max_split_size_mb with expandable segments: oversize blocks are never split, and"
            " reserved memory can grow without bound (PyTorch issue 193400); drop"
            " max_split_size_mb"
        )
    if expandable and moment is not None:
        largest = moment.largest_free_block_bytes or 0
        requested = moment.requested_bytes or 0
        holes = moment.free_in_reserved_bytes or 0
        if requested and largest < requested <= holes + (moment.headroom_bytes or 0):
            found.append(
                "expandable segments are already on, yet the free memory was in pieces:"
                " turning them on is not the fix; free the pinning tensors or lower the peak"
            )
    return found


def _fraction_set(moment: OomMoment | None) -> bool | None:
    """True/False when the OOM's figures tell whether a memory fraction limited the process."""
    if moment is None or None in (
        moment.limit_bytes,
        moment.device_free_bytes,
        moment.reserved_bytes,
    ):
        return None
    assert moment.limit_bytes is not None
    reachable = (moment.device_free_bytes or 0) + (moment.reserved_bytes or 0)
    return moment.limit_bytes < reachable
