"""Settings that cannot change a single decision of a run, and the settings a run decides by.

Two what-if rows whose settings differ only in what cannot matter on a trace make the same
decisions at every request, so one run answers both. Two such cases are proven here from the
model's code:

- ``garbage_collection_threshold`` without a memory fraction: every place that reads it
  (``malloc``'s collection, ``get_free_block``'s age count) first checks ``allowed``;
- ``max_split_size`` (with ``max_non_split_rounding_size``, read only beyond it) above every
  block the run can hold: blocks never outgrow the segment they are cut from, and no segment
  outgrows :func:`largest_block`, so every comparison with ``max_split_size`` in
  ``get_free_block``, ``should_split`` and ``release_available_cached_blocks`` comes out as it
  does with no limit. Expandable segments grow blocks past one request's segment: there the
  limit is always kept.
"""

from __future__ import annotations

from dataclasses import replace

from memforensics.allocator._blocks import K_LARGE_BUFFER, K_ROUND_LARGE, K_SMALL_BUFFER
from memforensics.allocator._settings import NO_LIMIT, AllocatorSettings
from memforensics.allocator._sizes import round_size


def largest_block(settings: AllocatorSettings, largest_request: int) -> int:
    """No block or segment of a non-expandable run whose requests are at most
    ``largest_request`` bytes is larger than this (an upper bound over every rounded request
    and every size ``get_allocation_size`` can return for one)."""
    rounded = round_size(settings, max(largest_request, 0))
    own_segment = -(-rounded // K_ROUND_LARGE) * K_ROUND_LARGE
    return max(rounded, own_segment, K_SMALL_BUFFER, settings.large_segment_size)


def deciding_settings(
    settings: AllocatorSettings, *, fraction: bool, largest_request: int
) -> AllocatorSettings:
    """``settings`` with what cannot change a decision set to its default: a run under either
    makes the same decisions, when ``fraction`` says whether a memory fraction limits the
    device and no request of the run exceeds ``largest_request`` bytes."""
    if not fraction and settings.garbage_collection_threshold:
        settings = replace(settings, garbage_collection_threshold=0.0)
    if (
        not settings.expandable_segments
        and settings.max_split_size != NO_LIMIT
        and settings.max_split_size > largest_block(settings, largest_request)
    ):
        settings = replace(
            settings, max_split_size=NO_LIMIT, max_non_split_rounding_size=K_LARGE_BUFFER
        )
    return settings
