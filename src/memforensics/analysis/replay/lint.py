"""Config lint from the dump: allocator settings that cannot do what they are set for.

Each finding is a known trap, read from the snapshot's ``allocator_settings`` and what the dump
shows of the device:

- ``garbage_collection_threshold`` without a memory fraction: PyTorch collects only under a
  per-process limit. Older releases set one on any ``set_per_process_memory_fraction`` call
  (``set_fraction``); newer ones only for a fraction below 1.0 (``setMemoryFraction`` leaves
  ``allowed_memory_maximum`` unset at 1.0), from that call or from the conf key
  ``per_process_memory_fraction``. Without one the setting does nothing.
- expandable segments already on while segments fragment: the usual advice does not apply.
- ``max_split_size_mb`` together with expandable segments: ``get_free_block`` still keeps a free
  block of ``max_split_size`` or more from any smaller request, while ``should_split`` ignores
  ``max_split_size`` in expandable segments, so a large request is handed such a block and the
  rest is split off. Freed oversize blocks sit idle for the smaller requests while the segment
  maps more pages: reserved memory can grow without bound (PyTorch issue 123548).
"""

from __future__ import annotations

from memforensics.allocator import NO_LIMIT, AllocatorSettings
from memforensics.analysis.dump import Dump
from memforensics.analysis.oom import OomMoment

MEMORY_FRACTION = (
    "a memory fraction (torch.cuda.set_per_process_memory_fraction, below 1.0 in newer PyTorch,"
    " or per_process_memory_fraction in the conf string)"
)
"""What garbage collection needs, in the words of every finding and what-if row."""


def lint(dump: Dump, settings: AllocatorSettings, moment: OomMoment | None) -> list[str]:
    """Findings, one sentence each (empty when nothing is off)."""
    found: list[str] = []
    expandable = settings.expandable_segments or any(s.is_expandable for s in dump.segments)
    if settings.garbage_collection_threshold > 0:
        fraction = _fraction_set(moment)
        if settings.memory_fraction is not None and settings.memory_fraction < 1.0:
            fraction = True
        if fraction is False:
            found.append(
                "garbage_collection_threshold is set but no memory fraction is (the OOM's limit"
                f" is the whole device): PyTorch only collects under {MEMORY_FRACTION}, so it"
                " has no effect"
            )
        elif fraction is None:
            found.append(
                f"garbage_collection_threshold acts only under {MEMORY_FRACTION};"
                " this dump cannot tell whether one was set"
            )
    if expandable and settings.max_split_size != NO_LIMIT:
        found.append(
            "max_split_size_mb with expandable segments: a free block of max_split_size or more"
            " is kept from every smaller request, yet a larger request takes it and the rest is"
            " split off; freed oversize blocks sit idle while the segment grows, and reserved"
            " memory can grow without bound (PyTorch issue 123548); drop max_split_size_mb"
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
        moment.device_total_bytes,
        moment.device_free_bytes,
        moment.reserved_bytes,
    ):
        return None
    assert moment.device_total_bytes is not None
    reachable = (moment.device_free_bytes or 0) + (moment.reserved_bytes or 0)
    return moment.device_total_bytes < reachable
