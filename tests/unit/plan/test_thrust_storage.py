"""Thrust's temporary storage from CCCL 3.0's Thrust and the CUB dispatchers it calls, for the
calls ``unique_dim_cuda_template`` makes over ``int64_t`` positions; each figure is worked out
here from ``AliasTemporaries`` (:func:`_aliased`) and the tuning policies' tiles."""

from __future__ import annotations

from memforensics.plan.thrust_storage import (
    adjacent_difference,
    inclusive_sum,
    merge_sort_keys,
    unique,
    unique_by_key,
)


def _aliased(*sizes: int) -> int:
    """``AliasTemporaries``: each temporary rounded up to 256 B, plus 255 B to align."""
    return sum(-(-size // 256) * 256 for size in sizes) + 255


def _states(tiles: int, word: int) -> int:
    """``ScanTileState::AllocationSize`` of a primitive value: a word per tile and 32 more."""
    return _aliased((tiles + 32) * word, 0, 0)


def test_a_merge_sort_holds_a_partition_per_tile_and_the_alternate_keys() -> None:
    """2,048 keys fit one tile (two 4-B partitions, 256 B) beside 16,384 B of alternate keys;
    one more key is a second tile; before 6.0 the tile is another policy's, not derived."""
    assert merge_sort_keys(2048, (9, 0)) == _aliased(2 * 4, 2048 * 8, 0, 0) == 16895
    assert merge_sort_keys(2049, (9, 0)) == _aliased(3 * 4, 2049 * 8, 0, 0) == 17151
    assert merge_sort_keys(2048, (5, 2)) is None


def test_an_adjacent_difference_into_another_array_asks_for_nothing() -> None:
    """``MayAlias::No``: no temporary, 255 B once aliased."""
    assert adjacent_difference() == 255


def test_a_scans_tile_follows_the_architectures_tuning() -> None:
    """Tiles of 2,688 on 9.0 (224 x 12) and of 896 on 8.6 (``DefaultPolicy``), 16-B states
    aliased twice; none derived before 7.0."""
    assert inclusive_sum(32 * 2688, (9, 0)) == _aliased(_states(32, 16)) == 1535
    assert inclusive_sum(32 * 2688 + 1, (9, 0)) == _aliased(_states(33, 16)) == 1791
    assert inclusive_sum(48 * 2688 + 1, (9, 0)) == _aliased(_states(49, 16)) == 2047
    assert inclusive_sum(48 * 896 + 1, (8, 6)) == 2047
    assert inclusive_sum(1000, (6, 1)) is None


def test_unique_takes_its_own_agents_tiles_on_every_architecture() -> None:
    """Thrust's ``UniqueAgent`` of 64 x 5 (320 items a tile), 8-B states aliased with no
    virtual shared memory, beside the 4-B count."""
    assert unique(32 * 320) == _aliased(4, _aliased(_states(32, 8), 0)) == 1535
    assert unique(32 * 320 + 1) == _aliased(4, _aliased(_states(33, 8), 0)) == 1791


def test_unique_by_key_takes_cubs_tiles_for_eight_byte_keys_and_values() -> None:
    """448 x 11 on 9.0, 192 x 7 on 8.0, 8-B states of 32-bit offsets aliased with no virtual
    shared memory, beside the 4-B count; none derived before 7.0."""
    assert unique_by_key(32 * 4928, (9, 0)) == _aliased(_aliased(_states(32, 8), 0), 4) == 1535
    assert unique_by_key(33 * 1344 + 1, (8, 0)) == _aliased(_aliased(_states(34, 8), 0), 4)
    assert unique_by_key(33 * 1344 + 1, (8, 0)) == 1791
    assert unique_by_key(1000, (6, 1)) is None
