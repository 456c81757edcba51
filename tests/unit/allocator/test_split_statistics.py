"""The ``inactive_split`` and ``oversize`` statistics the model keeps step by step, as
``alloc_found_block``, ``free_block``, ``alloc_block`` and ``release_block`` change them, agree
at every point with a count of the blocks and segments they describe."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator_ops import OPS, MiB, Op, apply
from memforensics.allocator import Block, DeviceCachingAllocator, parse_conf

CONFS = ["", "max_split_size_mb:24", "expandable_segments:True", "roundup_power2_divisions:4"]


def _counted(model: DeviceCachingAllocator) -> dict[str, int]:
    """What the statistics should hold now, counted from the blocks themselves."""
    limit = model.settings.max_split_size
    found: dict[str, int] = {}
    for kind, is_small in (("all", None), ("small", True), ("large", False)):
        found[f"split_bytes.{kind}"], found[f"split.{kind}"] = model.split_holes(is_small)
    found["oversize_allocations"] = sum(
        b.size >= limit for b in model.active_blocks.values() if b.allocated
    )
    found["oversize_segments"] = sum(size >= limit for size in model.segments_held.values())
    return found


def _kept(model: DeviceCachingAllocator) -> dict[str, int]:
    """What the statistics hold."""
    found: dict[str, int] = {}
    for kind, owner in (("all", model), ("small", model.small_pool), ("large", model.large_pool)):
        found[f"split_bytes.{kind}"] = owner.inactive_split_bytes.current
        found[f"split.{kind}"] = owner.inactive_split.current
    found["oversize_allocations"] = model.oversize_allocations.current
    found["oversize_segments"] = model.oversize_segments.current
    return found


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conf=st.sampled_from(CONFS), ops=OPS)
def test_kept_split_statistics_match_the_blocks(conf: str, ops: list[Op]) -> None:
    """After every request, free and ``empty_cache`` the inactive split counts and bytes (all,
    small, large) and the oversize allocations and segments equal a fresh count."""
    model = DeviceCachingAllocator(parse_conf(conf), capacity=96 * MiB, allowed=80 * MiB)
    live: list[Block] = []
    for op in ops:
        apply(model, op, live)
        assert _kept(model) == _counted(model)
