"""The model's bookkeeping shortcuts (stats a replay does not read, rounding remembered per
request size) change no decision and none of the figures a replay reads."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator_ops import OPS, MiB, Op, apply
from memforensics.allocator import Block, DeviceCachingAllocator, parse_conf, round_size

CONFS = ["", "roundup_power2_divisions:4", "expandable_segments:True", "max_split_size_mb:24",
         "roundup_power2_divisions:[1:2,8:4,>:8],garbage_collection_threshold:0.6"]  # fmt: skip


def _drive(model: DeviceCachingAllocator, ops: list[Op]) -> list[object]:
    """Every decision the model makes, as (address, size) per request or None for an OOM."""
    live: list[Block] = []
    seen: list[object] = []
    for op in ops:
        block = apply(model, op, live)
        if op[0] == "alloc":
            seen.append(None if block is None else (block.address, block.size))
    reserved, allocated = model.reserved_bytes, model.allocated_bytes
    seen.append((reserved.current, reserved.peak, allocated.current, allocated.peak))
    return seen


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conf=st.sampled_from(CONFS), ops=OPS)
def test_a_model_keeping_only_byte_stats_decides_as_the_full_one(
    conf: str, ops: list[tuple[str, int, int, int]]
) -> None:
    """``all_stats=False`` (what a replay runs) places every block where the full model does,
    fails the same requests and ends with the same reserved and allocated bytes and peaks."""
    settings_ = parse_conf(conf)

    def model(all_stats: bool) -> DeviceCachingAllocator:
        return DeviceCachingAllocator(
            settings_, capacity=96 * MiB, allowed=80 * MiB, all_stats=all_stats
        )

    assert _drive(model(False), ops) == _drive(model(True), ops)


def test_rounding_is_right_past_the_sizes_the_model_remembers() -> None:
    """Requests of more distinct sizes than the model remembers still get the block size
    ``round_size`` gives under roundup_power2_divisions, remembered or not."""
    settings_ = parse_conf("roundup_power2_divisions:4")
    model = DeviceCachingAllocator(settings_, capacity=1 << 50)
    for size in range(MiB + 1, MiB + 70_001):
        for repeat in range(1 + (size % 7 == 0)):  # some sizes asked again, once remembered
            block = model.malloc(size)
            assert block is not None
            assert block.size == round_size(settings_, size), (size, repeat)
            model.free(block)
