"""CUB's temporary storage from CCCL's dispatch sources and tuning policies: radix sorts
(``index_put_with_sort_kernel``'s, ``sort``'s), scans and flagged selections; 138,751 B and
1 B are real GPUs' figures."""

from __future__ import annotations

import pytest

from memforensics.plan.cub_storage import (
    aliased,
    exclusive_scan,
    inclusive_scan,
    inclusive_sum_truncating,
    num_bits,
    radix_sort_keys,
    radix_sort_pairs,
    reduce_sum,
    run_length_encode,
    scan_by_key,
    segmented_radix_sort_pairs,
    select_flagged,
    select_unique,
    unique_by_key,
)


@pytest.mark.parametrize(
    ("items", "end_bit", "capability", "expected"),
    [
        # the shared LM workload's 8,192 ids, 14 bits: two passes, three 3,840-id tiles (real)
        (8192, 14, (8, 0), 138_751),
        # an 8.6 or 8.9 part runs the 8.0 policy
        (8192, 14, (8, 9), 138_751),
        # Policy900's tiles of 4,608: two blocks of lookback
        (8192, 14, (9, 0), 137_727),
        (8192, 14, (12, 0), 137_727),
        # Policy700's tiles of 2,816: three blocks
        (8192, 14, (7, 5), 138_751),
        # one pass (8 bits): no alternate keys or values
        (8192, 8, (8, 0), 2048 + 3072 + 256 + 255),
        # one tile of 2,304 sorts in a single block and takes none (the 2.7B step's 512, real)
        (512, 20, (9, 0), 1),
        (2304, 20, (9, 0), 1),
        (2305, 20, (9, 0), 3 * 2048 + 1024 + 2 * 18_688 + 256 + 255),
    ],
)
def test_radix_sort_pairs_storage_is_cubs(
    items: int, end_bit: int, capability: tuple[int, int], expected: int
) -> None:
    """The bytes ``DeviceRadixSort::SortPairs`` asks for, by policy, passes and tiles."""
    assert radix_sort_pairs(items, end_bit, capability) == expected


def test_before_volta_the_policy_is_not_derived() -> None:
    """Capabilities older than the 7.0 policy are not sized (no guess)."""
    assert radix_sort_pairs(8192, 14, (6, 1)) is None


def test_temporaries_are_aligned_to_256_bytes_plus_the_start() -> None:
    """``AliasTemporaries``: each temporary rounded up to 256 B, 255 B to align the start."""
    assert aliased([1, 0, 256, 257]) == 256 + 256 + 512 + 255


def test_the_sort_covers_the_bits_of_its_largest_key() -> None:
    """``get_num_bits``: at least one bit; 9,999 rows take 14."""
    assert [num_bits(n) for n in (0, 1, 2, 3, 4, 9999)] == [1, 1, 2, 2, 3, 14]


@pytest.mark.parametrize(
    ("items", "capability", "expected"),
    [
        # Policy900's OnesweepPolicyKey32 beside 8-byte values: 384 threads of 29 scaled to 14,
        # tiles of 5,376, so 19 blocks; four passes; 400,128 B of alternate keys (rounded),
        # 800,000 of alternate values
        (100_000, (9, 0), 4 * 2048 + 19 * 1024 + 400_128 + 800_000 + 256 + 255),
        # Policy800's 17 scaled to 8: tiles of 3,072, 33 blocks
        (100_000, (8, 0), 4 * 2048 + 33 * 1024 + 400_128 + 800_000 + 256 + 255),
        (2304, (8, 0), 1),
    ],
)
def test_four_byte_keys_beside_eight_byte_values(
    items: int, capability: tuple[int, int], expected: int
) -> None:
    """``sort``'s keys (float32, int32) beside their int64 positions, on all 32 bits."""
    assert radix_sort_pairs(items, 32, capability, key_bytes=4) == expected


def test_keys_of_one_or_two_bytes_are_not_derived_before_hopper() -> None:
    """Half, bfloat16 and byte keys: ``Policy700`` and ``Policy800`` sort them in passes sized
    by occupancy; no guess."""
    assert radix_sort_pairs(100_000, 16, (8, 0), key_bytes=2) is None
    assert radix_sort_pairs(100_000, 8, (7, 5), key_bytes=1) is None


@pytest.mark.parametrize(
    ("items", "end_bit", "capability", "key_bytes", "expected"),
    [
        # sm90_small_key_tuning<2, 8, 8>: 512 threads of 23 scaled to 11, tiles of 5,632, so
        # 18 blocks; two passes; 200,192 B of alternate keys (rounded), 800,000 of values
        (100_000, 16, (9, 0), 2, 2 * 2048 + 18 * 1024 + 200_192 + 800_000 + 256 + 255),
        # 10.0 keeps 9.0's entry for these
        (100_000, 16, (10, 0), 2, 2 * 2048 + 18 * 1024 + 200_192 + 800_000 + 256 + 255),
        # <1, 8, 8>: 384 threads of 18 scaled to 9, tiles of 3,456, 29 blocks; one pass
        (100_000, 8, (9, 0), 1, 2048 + 29 * 1024 + 256 + 255),
        # one tile of the single-tile policy (2,304) takes none
        (2304, 16, (9, 0), 2, 1),
    ],
)
def test_small_keys_sort_in_onesweep_passes_from_hopper(
    items: int, end_bit: int, capability: tuple[int, int], key_bytes: int, expected: int
) -> None:
    """``OnesweepSmallKeyTunedPolicy``'s tiles for keys of 1 and 2 bytes beside int64
    positions."""
    assert radix_sort_pairs(items, end_bit, capability, key_bytes) == expected


def test_keys_alone_sort_in_wider_tiles() -> None:
    """``SortKeys`` of 8-byte keys: 384 threads of 30 scaled to 15 on 9.0 (tiles of 5,760),
    of 21 scaled to 10 on 8.0 (3,840); one pass holds no alternate keys."""
    assert radix_sort_keys(40_000, 2, (9, 0)) == 2048 + 7 * 1024 + 256 + 255
    assert radix_sort_keys(40_000, 2, (8, 0)) == 2048 + 11 * 1024 + 256 + 255
    assert radix_sort_keys(2304, 2, (8, 0)) == 1


def test_a_segmented_sort_holds_the_alternate_keys_and_values_alone() -> None:
    """``DeviceSegmentedRadixSort::SortPairs``: the alternate keys and values, rounded, plus
    255 B, on every architecture and for keys of any size."""
    assert segmented_radix_sort_pairs(1_000_000, 4) == 4_000_000 + 8_000_000 + 255
    assert segmented_radix_sort_pairs(1000, 2) == 2048 + 8192 + 255


@pytest.mark.parametrize(
    ("items", "capability", "expected"),
    [
        # up to 16 tiles: 48 status words of 16 B fit 768 B, +255, aligned again: 1,279
        (8192, (9, 0), 1279),
        (16 * 896, (8, 0), 1279),
        # 17 tiles: 49 words (784 B) take 1,024 + 255, aligned again: 1,535
        (16 * 896 + 1, (8, 0), 1535),
        (1, (7, 0), 1279),
    ],
)
def test_an_exclusive_scans_storage_is_its_tile_states_aligned_twice(
    items: int, capability: tuple[int, int], expected: int
) -> None:
    """``DeviceScan::ExclusiveScan`` over ``int64_t`` (896 to a tile under torch's ``SumOp``):
    ``ScanTileState``'s words aliased on their own and again by the dispatch (CCCL 3.0)."""
    assert exclusive_scan(items, capability) == expected


def test_unique_by_keys_tiles_follow_the_architectures_tuning() -> None:
    """``DeviceSelect::UniqueByKey``'s tiles for 8-byte keys: 4,480 on 9.0 (16 tiles fit 1,279
    B, 17 take 1,535), 1,792 on 8.0, 320 on 8.6 (``Policy860``'s default)."""
    assert unique_by_key(16 * 4480, (9, 0)) == 1279
    assert unique_by_key(16 * 4480 + 1, (9, 0)) == 1535
    assert unique_by_key(17 * 1792, (8, 0)) == 1535
    assert unique_by_key(17 * 320, (8, 6)) == 1535
    assert unique_by_key(8192, (6, 1)) is None


def test_a_scan_by_keys_storage_keeps_a_key_per_tile() -> None:
    """``DeviceScan::*ByKey`` over 8-byte keys and values: a 16-B word per tile and 32 more,
    once aligned, beside the last key of each tile and one more (2,464 to a tile on 9.0)."""
    assert scan_by_key(8192, (9, 0)) == 768 + 256 + 255
    assert scan_by_key(33 * 2464, (9, 0)) == 1280 + 512 + 255
    assert scan_by_key(8192, (6, 1)) is None


@pytest.mark.parametrize(
    ("items", "accum_bytes", "primitive", "expected"),
    [
        # float32: tiles of 1,920, 53 and 32 states of 8 B (680 B): 768 + 255, then 1,024 + 255
        (100_000, 4, True, 1279),
        # int64: tiles of 896, 112 and 32 states of 16 B (2,304 B): 2,304 + 255, 2,560 + 255
        (100_000, 8, True, 2815),
        # bfloat16: tiles of 3,840, 59 states: 4-B statuses and 2-B partials and inclusives
        (100_000, 2, False, 3 * 256 + 255 + 1 + 255),
        # one value still takes 32 + 1 states
        (1, 4, True, 512 + 255 + 1 + 255),
    ],
)
def test_a_scans_storage_is_its_tile_states(
    items: int, accum_bytes: int, primitive: bool, expected: int
) -> None:
    """``DeviceScan::InclusiveScan`` (CCCL 3.0) under ``DefaultPolicy``: tile states aliased by
    ``tile_state_allocation_size`` and again by ``Invoke``."""
    assert inclusive_scan(items, accum_bytes, primitive) == expected


@pytest.mark.parametrize(
    ("items", "capability", "expected"),
    [
        (3000, (9, 0), 1023),  # one tile of 4,224, 33 states of 8 B
        (100_000, (8, 0), 1279),  # 44 tiles of 2,304
        (100_000, (8, 6), 2047),  # DefaultPolicy's 640: 157 tiles, 189 states
        (100_000, (10, 0), 1023),  # 29 tiles of 3,520
    ],
)
def test_a_flagged_selection_takes_its_tile_states(
    items: int, capability: tuple[int, int], expected: int
) -> None:
    """``DeviceSelect::Flagged`` of int64 positions, by the architecture's tile."""
    assert select_flagged(items, capability) == expected


def test_a_sum_of_flags_is_sized_in_one_tile_only() -> None:
    """``DeviceReduce::Sum`` asks for 1 B up to 4,096 items; past that it follows the
    occupancy, not derived."""
    assert reduce_sum(4096) == 1
    assert reduce_sum(4097) is None


def test_four_byte_ids_sort_and_scan_with_their_own_tuning() -> None:
    """``nn.Embedding``'s backward over ``int32`` ids: the sort of 4-byte keys beside 4-byte
    positions in onesweep tiles of 6,528 on 8.0 and 9.0 (11,776 on 7.x) past one tile of
    4,864, ``unique_by_key``'s tiles of 7,168 on 9.0, the scans by key's of 4,032 with a
    4-byte key per tile, and ``exclusive_sum``'s of 1,920 ``int``."""
    # four passes over two tiles: bins 8,192, lookback 2,048, keys and values 32,768 each
    assert radix_sort_pairs(8192, 32, (9, 0), 4, 4) == 8192 + 2048 + 2 * 32768 + 256 + 255
    assert radix_sort_pairs(8192, 32, (8, 0), 4, 4) == 76_287
    assert radix_sort_pairs(8192, 32, (7, 0), 4, 4) == 76_287 - 1024
    assert radix_sort_pairs(4864, 32, (9, 0), 4, 4) == 1
    assert radix_sort_pairs(4865, 32, (9, 0), 4, 4) == 8192 + 1024 + 2 * 19_712 + 256 + 255
    assert radix_sort_pairs(8192, 16, (9, 0), 2, 4) is None
    assert unique_by_key(16 * 7168, (9, 0), 4) == 1279
    assert unique_by_key(16 * 7168 + 1, (9, 0), 4) == 1535
    assert scan_by_key(33 * 4032, (9, 0), 4) == 1280 + 256 + 255
    assert exclusive_scan(100_000, (9, 0), 4) == 1279


@pytest.mark.parametrize(
    ("items", "end_bit", "capability", "key_bytes", "float_keys", "expected"),
    [
        # float32 on 9.0: OnesweepPolicyKey32's 20 - 1 - 1 = 18 (tiles of 6,912), four passes
        (6000, 32, (9, 0), 4, True, 4 * 2048 + 1024 + 24_064 + 256 + 255),
        # int32 on 9.0: 19 (7,296 a tile), 14 blocks, alternate keys of 400,128 B
        (100_000, 32, (9, 0), 4, False, 4 * 2048 + 14 * 1024 + 400_128 + 256 + 255),
        # 2-byte keys alone: sm90_small_key_tuning<2, 0, 8> 512 of 19, sm100's 384 of 20
        (100_000, 16, (9, 0), 2, False, 2 * 2048 + 11 * 1024 + 200_192 + 256 + 255),
        (100_000, 16, (10, 0), 2, False, 2 * 2048 + 14 * 1024 + 200_192 + 256 + 255),
        # before 9.0 they sort in upsweep and downsweep passes: not sized
        (100_000, 16, (8, 0), 2, False, None),
        # one tile of the single-tile policy (4,864 keys of 4 bytes) takes none
        (4864, 32, (8, 0), 4, False, 1),
    ],
)
def test_keys_of_any_size_sort_alone(
    items: int,
    end_bit: int,
    capability: tuple[int, int],
    key_bytes: int,
    float_keys: bool,
    expected: int | None,
) -> None:
    """``SortKeys`` (``unique``'s sort without the inverse) of 4-byte keys and, from 9.0, of 1
    and 2 bytes, with 64-bit offsets."""
    assert radix_sort_keys(items, end_bit, capability, key_bytes, float_keys) == expected


def test_a_truncating_sum_takes_the_tuned_scan_tiles() -> None:
    """``inclusive_sum_truncating`` (``int`` into ``int64_t`` under ``plus<>``): 3,840 a tile
    on 8.0, 3,072 on 9.0 and 10.0, 1,920 on 7.x; 8-byte states, aliased twice."""
    assert inclusive_sum_truncating(100_000, (8, 0)) == 768 + 255  # 27 + 32 states: 472 → 767
    assert inclusive_sum_truncating(100_000, (9, 0)) == 1024 + 255  # 33 + 32: 520 → 1,023
    assert inclusive_sum_truncating(100_000, (10, 0)) == 1024 + 255
    assert inclusive_sum_truncating(100_000, (7, 0)) == 1024 + 255  # 53 + 32: 680 → 1,023
    assert inclusive_sum_truncating(100_000, (6, 0)) is None


def test_a_unique_selection_takes_its_tile_states() -> None:
    """``DeviceSelect::Unique``: ``sm80_tuning``'s 256 of 18 for 4-byte items (22 tiles),
    ``DefaultPolicy``'s 128 of 10 on 7.x and for half and bfloat16 (79 tiles)."""
    assert select_unique(100_000, 4, True, (8, 0)) == 768 + 255  # 54 states: 432 → 767
    assert select_unique(100_000, 4, True, (7, 5)) == 1280 + 255  # 111 states: 888 → 1,279
    assert select_unique(100_000, 2, False, (9, 0)) == 1280 + 255
    assert select_unique(100_000, 8, True, (6, 0)) is None


def test_a_run_length_encoding_takes_one_status_word_per_tile() -> None:
    """``DeviceRunLengthEncode::Encode`` with ``int64_t`` counts: ``DefaultPolicy``'s 768 keys a
    tile everywhere, 16-byte words for 131 tiles and 32 more, aliased once."""
    assert run_length_encode(100_000) == 2816 + 255
