"""CUB's temporary storage: the block a CUB device algorithm asks PyTorch's caching allocator
for through ``CUB_WRAPPER`` (``aten/src/ATen/cuda/cub.cuh``), which calls the algorithm once to
size it, allocates it and calls again; it is freed as the wrapper returns.

The sizes follow CCCL 2.8 and 3.0 (``cub/device/dispatch/dispatch_radix_sort.cuh``,
``tuning/tuning_radix_sort.cuh``), the CUB of the CUDA 12.9 and 13.0 toolkits torch 2.13 is
built with; their tuning for the sorts below is the same. CUB's temporaries are carved out of
one block by ``AliasTemporaries`` (``util_temporary_storage.cuh``): each rounded up to 256 B,
plus 255 B to align the block's start. An algorithm that needs none asks for 1 B.

Sized here: ``DeviceRadixSort::SortPairs`` for 4- and 8-byte keys beside 8-byte values, and
for 1- and 2-byte keys beside them on capability 9.0 and newer,
``SortKeys`` for 8-byte keys, both with 64-bit offsets (torch passes an ``int64_t`` count),
and ``DeviceSegmentedRadixSort::SortPairs``: the sort ``index_put_with_sort_kernel`` makes of
its linear index, and ``sort``'s of long rows; and, over ``int64`` keys and values, the
single-pass algorithms ``nn.Embedding``'s backward runs after its sort:
``DeviceSelect::UniqueByKey``, ``DeviceScan::ExclusiveScan`` and
``DeviceScan::InclusiveSumByKey`` / ``InclusiveScanByKey``, whose storage is a tile-status
array (``ScanTileState``, ``ReduceByKeyScanTileState``) sized as CCCL 3.0 sizes it, the CUB of
CUDA 13.0 that torch 2.13's default wheel is built with (2.8 does not alias the status array
on its own, 256 B less). Each one's
tuning depends on the policy the device's architecture selects (``ChainedPolicy``: the newest
policy not newer than the architecture the kernels were compiled for), so the size is given
for capability 7.0 and up; before that it is not derived here (:data:`None`).

Sized from CCCL 3.0 alone, the CUB of torch 2.13's default wheel (CUDA 13.0):
``DeviceScan::InclusiveScan`` (a one-row ``cumsum``), ``DeviceSelect::Flagged`` and
``DeviceReduce::Sum`` in one tile (``nonzero``); for ``unique``, ``DeviceRadixSort::SortKeys``
of 4-byte keys (and of 1 and 2 bytes from 9.0), the truncating ``InclusiveScan`` of ``int``
into ``int64_t``, ``DeviceSelect::Unique`` and ``DeviceRunLengthEncode::Encode``. CCCL 2.8
aliases a scan's tile states once where 3.0 aliases them twice.
"""

from __future__ import annotations

from typing import NamedTuple, TypeVar

ALIGN = 256
"""``AliasTemporaries``' alignment of each temporary (``ALIGN_BYTES``)."""
MAX_SMEM_PER_BLOCK = 48 * 1024
"""``cub::detail::max_smem_per_block``, which bounds the threads ``RegBoundScaling`` keeps."""
ONESWEEP_RADIX_BITS = 8
"""Bits a onesweep pass sorts on, in every policy here."""
PORTION_SIZE_LIMIT = (1 << 28) - 1
"""The items a onesweep portion holds at most, rounded down to whole tiles."""


class RadixPolicy(NamedTuple):
    """A radix-sort tuning policy's nominal 4-byte shapes for 8-byte values with 64-bit
    offsets, before ``RegBoundScaling`` scales them to the dominant type's size: the
    single-tile kernel's (threads, items per thread), the onesweep kernel's threads, and its
    items per thread by the key's size."""

    single_tile: tuple[int, int]
    onesweep_threads: int
    onesweep_items: dict[int, int]
    keys_only_items: int
    """Onesweep items per thread sorting 8-byte keys alone."""


POLICIES: dict[int, RadixPolicy] = {
    700: RadixPolicy((256, 19), 256, {4: 23, 8: 23}, 23),
    800: RadixPolicy((256, 19), 384, {4: 17, 8: 21}, 21),
    900: RadixPolicy((256, 19), 384, {4: 29, 8: 24}, 30),
    1000: RadixPolicy((256, 19), 384, {4: 29, 8: 24}, 30),
}
"""``policy_hub<KeyT, ValueT, OffsetT>``'s policies by the architecture they start at, for
8-byte values (``Policy700``: onesweep 256 threads of ``sizeof(KeyT) == 4 && sizeof(ValueT) ==
4 ? 46 : 23``; ``Policy800``: 384 of ``OFFSET_64BIT && sizeof(KeyT) == 4 && !KEYS_ONLY ? 17 :
21``; ``Policy900`` and ``Policy1000``: 384 of ``OnesweepPolicyKey32``'s ``OFFSET_64BIT ? 29 :
30`` or ``OnesweepPolicyKey64``'s ``sizeof(ValueT) < 8 ? 30 : 24``, keys alone having a
one-byte ``NullType`` for values; every one's
``SingleTilePolicy`` 256 threads of 19). Keys of one or two bytes are in
:data:`SMALL_KEY_ONESWEEP`, from 9.0 only: ``Policy700`` and ``Policy800`` sort them in upsweep
and downsweep passes (``ONESWEEP = sizeof(KeyT) >= sizeof(uint32_t)``), whose temporary storage
follows the occupancy the driver reports."""

SMALL_KEY_ONESWEEP: dict[int, tuple[int, int]] = {1: (384, 18), 2: (512, 23)}
"""Onesweep's nominal (threads, items per thread) for keys of 1 and 2 bytes beside 8-byte values
with 64-bit offsets, on 9.0 and newer (``OnesweepSmallKeyTunedPolicy``'s
``OnesweepSmallKeyPolicy``): ``sm90_small_key_tuning<1, 8, 8>`` and ``<2, 8, 8>``, which
``Policy1000``'s ``sm100_small_key_tuning`` keeps (its own entries for them are commented out).
The single-tile policy is the other keys' (256 threads of 19)."""
SMALL_KEY_ARCH = 900
"""The first architecture whose policy sorts keys of 1 and 2 bytes in onesweep passes."""
NARROW_VALUE_ONESWEEP: dict[int, dict[int, int]] = {
    700: {4: 46, 8: 23},
    800: {4: 17, 8: 21},
    900: {4: 17, 8: 30},
    1000: {4: 17, 8: 30},
}
"""Onesweep's nominal items per thread by the key's size beside 4-byte values (``int32``
positions) with 64-bit offsets, by the architecture a policy starts at: ``Policy700``'s
``sizeof(KeyT) == 4 && sizeof(ValueT) == 4 ? 46 : 23``, ``Policy800``'s ``OFFSET_64BIT &&
sizeof(KeyT) == 4 && !KEYS_ONLY ? 17 : 21``, ``OnesweepPolicyKey32``'s ``sizeof(ValueT) < 8 ?
(OFFSET_64BIT ? 17 : 23)`` and ``OnesweepPolicyKey64``'s ``sizeof(ValueT) < 8 ? 30`` for
``Policy900`` and ``Policy1000``; threads as beside 8-byte values."""


def _policy(capability: tuple[int, int]) -> RadixPolicy | None:
    """The policy a device of ``capability`` runs, or None before 7.0."""
    return by_architecture(POLICIES, capability)


def _scaled(threads: int, items: int, dominant: int) -> tuple[int, int]:
    """``RegBoundScaling``: items per thread scaled from 4-byte to ``dominant``-byte elements,
    threads bounded by the shared memory a block may hold."""
    scaled_items = max(1, items * 4 // max(4, dominant))
    bound = (MAX_SMEM_PER_BLOCK // (dominant * scaled_items) + 31) // 32 * 32
    return min(threads, bound), scaled_items


def aliased(sizes: list[int]) -> int:
    """``AliasTemporaries``' block for temporaries of ``sizes``: each rounded up to
    :data:`ALIGN`, plus ``ALIGN - 1`` to align the start."""
    return sum((size + ALIGN - 1) // ALIGN * ALIGN for size in sizes) + ALIGN - 1


def num_bits(max_key: int) -> int:
    """``get_num_bits`` (``cub.cuh``): the bits a sort of keys from 0 to ``max_key`` sorts on,
    at least 1."""
    return max(1, max_key.bit_length())


def _onesweep(items: int, end_bit: int, tile: int, key_bytes: int, value_bytes: int) -> int:
    """``InvokeOnesweep``'s storage for ``items`` in tiles of ``tile``: per pass a histogram
    of 256 64-bit bins, per tile-block a lookback row of 256 ``int`` counts, the alternate keys
    and values where more than one pass runs, and a counter per pass."""
    portion = PORTION_SIZE_LIMIT // tile * tile
    passes = -(-end_bit // ONESWEEP_RADIX_BITS)
    portions = -(-items // portion)
    blocks = -(-min(items, portion) // tile)
    digits = 1 << ONESWEEP_RADIX_BITS
    several = passes > 1
    return aliased(
        [
            portions * passes * digits * 8,
            blocks * digits * 4,
            items * key_bytes if several else 0,
            items * value_bytes if several else 0,
            portions * passes * 4,
        ]
    )


def radix_sort_pairs(
    items: int,
    end_bit: int,
    capability: tuple[int, int],
    key_bytes: int = 8,
    value_bytes: int = 8,
) -> int | None:
    """Bytes of ``DeviceRadixSort::SortPairs``' temporary storage for ``items`` keys of
    ``key_bytes`` sorted on bits 0 to ``end_bit`` beside values of ``value_bytes`` (8, or 4
    for keys of 4 and 8 bytes: :data:`NARROW_VALUE_ONESWEEP`), not double-buffered
    (torch passes separate input and output arrays, so CUB holds the alternate keys and values
    itself), on a device of ``capability``; None where the policy is not known here (keys of
    1 or 2 bytes before 9.0, :data:`SMALL_KEY_ONESWEEP`). One
    tile's worth (``SingleTilePolicy``) sorts in one block and takes none (1 B); more run the
    onesweep passes (:func:`_onesweep`)."""
    policy = _policy(capability)
    if policy is None:
        return None
    narrow = by_architecture(NARROW_VALUE_ONESWEEP, capability) if value_bytes == 4 else None
    if narrow is not None:
        if key_bytes not in narrow:
            return None
        onesweep = (policy.onesweep_threads, narrow[key_bytes])
    elif value_bytes != 8:
        return None
    elif key_bytes in policy.onesweep_items:
        onesweep = (policy.onesweep_threads, policy.onesweep_items[key_bytes])
    elif key_bytes in SMALL_KEY_ONESWEEP and capability[0] * 100 >= SMALL_KEY_ARCH:
        onesweep = SMALL_KEY_ONESWEEP[key_bytes]
    else:
        return None
    if items == 0:
        return 1
    dominant = max(key_bytes, value_bytes)
    threads, per_thread = _scaled(*policy.single_tile, dominant)
    if items <= threads * per_thread:
        return 1
    threads, per_thread = _scaled(*onesweep, dominant)
    return _onesweep(items, end_bit, threads * per_thread, key_bytes, value_bytes)


KEYS_ONLY_KEY32_ITEMS = {700: 23, 800: 21, 900: 19, 1000: 19}
"""Onesweep items per thread sorting 4-byte keys alone with 64-bit offsets: ``Policy700``'s
23, ``Policy800``'s 21 (``OFFSET_64BIT && sizeof(KeyT) == 4 && !KEYS_ONLY ? 17 : 21``),
``OnesweepPolicyKey32``'s ``20 - OFFSET_64BIT - FLOAT_KEYS`` from 9.0 (18 for ``float``)."""
SMALL_KEYS_ONLY_ONESWEEP: dict[int, dict[int, tuple[int, int]]] = {
    900: {1: (512, 19), 2: (512, 19)},
    1000: {1: (512, 19), 2: (384, 20)},
}
"""Onesweep's (threads, items per thread) sorting keys of 1 and 2 bytes alone with 64-bit
offsets: ``sm90_small_key_tuning<1, 0, 8>`` and ``<2, 0, 8>``; ``sm100_small_key_tuning`` keeps
the first and tunes the second (384 of 20)."""


def radix_sort_keys(
    items: int,
    end_bit: int,
    capability: tuple[int, int],
    key_bytes: int = 8,
    float_keys: bool = False,
) -> int | None:
    """Bytes of ``DeviceRadixSort::SortKeys``' temporary storage for ``items`` keys of
    ``key_bytes`` alone (``float_keys``: C++ ``float``) sorted on bits 0 to ``end_bit``, not
    double-buffered; None where the policy is not known here (keys of 1 or 2 bytes before 9.0,
    which sort in upsweep and downsweep passes)."""
    policy = _policy(capability)
    if policy is None:
        return None
    if key_bytes == 8:
        onesweep = (policy.onesweep_threads, policy.keys_only_items)
    elif key_bytes == 4:
        arch = by_architecture(KEYS_ONLY_KEY32_ITEMS, capability) or 0
        float_less = 1 if float_keys and capability[0] * 100 >= SMALL_KEY_ARCH else 0
        onesweep = (policy.onesweep_threads, arch - float_less)
    else:
        small = by_architecture(SMALL_KEYS_ONLY_ONESWEEP, capability)
        if small is None or key_bytes not in small:
            return None
        onesweep = small[key_bytes]
    if items == 0:
        return 1
    threads, per_thread = _scaled(*policy.single_tile, key_bytes)
    if items <= threads * per_thread:
        return 1
    threads, per_thread = _scaled(*onesweep, key_bytes)
    return _onesweep(items, end_bit, threads * per_thread, key_bytes, 0)


def segmented_radix_sort_pairs(items: int, key_bytes: int) -> int:
    """Bytes of ``DeviceSegmentedRadixSort::SortPairs``' temporary storage for ``items`` keys
    of ``key_bytes`` beside 8-byte values, not double-buffered: the alternate keys and values
    alone (``DispatchSegmentedRadixSort::InvokePasses``), whatever the architecture."""
    return aliased([items * key_bytes, items * 8]) if items else 1


TILE_STATUS_PADDING = 32
"""Tile states beyond the tiles (``num_tiles_to_num_tile_states``, ``TILE_STATUS_PADDING``: a
warp's threads)."""
TILE_STATUS_WORD = 16
"""Bytes of one tile's status word for a 12-byte key and value pair rounded up to a power of
two (``ReduceByKeyScanTileState``'s ``TxnWord``)."""
SCAN_POLICY = (128, 15)
"""``DeviceScan``'s nominal 4-byte (threads, items per thread) for torch's scans: ``policy_hub``'s
``DefaultPolicy`` on every architecture from 6.0. Its tuned tables (``sm80_tuning``,
``sm90_tuning``) are for ``basic_binary_op_t`` operators only (``cuda::std::plus``,
``cuda::minimum``, ``cuda::maximum``), and ``sm100_tuning`` for ``cuda::std::plus``: torch's
``scan_dim`` passes ``std::plus`` and ``std::multiplies``, and ``exclusive_sum`` its own
``SumOp``, which none matches, so every policy falls back to it (``Policy860`` and
``Policy600`` are it)."""
UNIQUE_BY_KEY_TILES = {700: 64 * 5, 800: 256 * 7, 860: 64 * 5, 900: 640 * 7, 1000: 384 * 10}
"""``DeviceSelect::UniqueByKey``'s tile for 8-byte keys beside 4-byte values by the policy's
architecture: ``DefaultPolicy<11, 64>`` (``Policy520``, ``Policy860``: 11 items made 5 for 8
bytes by ``Nominal4BItemsToItems``), ``sm80_tuning`` 256 threads of 7, ``sm90_tuning`` 640 of
7, ``sm100_tuning`` 384 of 10."""
SCAN_BY_KEY_TILES = {700: 256 * 9, 800: 224 * 10, 860: 256 * 9, 900: 224 * 11, 1000: 256 * 23}
"""``DeviceScan::*ByKey``'s tile for 8-byte keys and values under ``plus`` or ``maximum``:
``DefaultPolicy``'s 256 threads of 9 (``Policy520``, ``Policy860``), ``sm80_tuning`` 224 of
10, ``sm90_tuning`` 224 of 11, ``sm100_tuning`` 256 of 23."""
NARROW_UNIQUE_BY_KEY_TILES = {
    700: 64 * 11,
    800: 256 * 11,
    860: 64 * 11,
    900: 512 * 14,
    1000: 512 * 14,
}
"""``DeviceSelect::UniqueByKey``'s tile for 4-byte keys beside ``int`` values:
``DefaultPolicy<11, 64>``, ``sm80_tuning`` 256 threads of 11, ``sm90_tuning`` 512 of 14, which
``sm100_tuning`` inherits for these sizes."""
NARROW_SCAN_BY_KEY_TILES = {
    700: 256 * 9,
    800: 256 * 15,
    860: 256 * 9,
    900: 288 * 14,
    1000: 224 * 20,
}
"""``DeviceScan::*ByKey``'s tile for 4-byte keys and values: ``DefaultPolicy``'s 256 threads of
9, ``sm80_tuning`` 256 of 15, ``sm90_tuning`` 288 of 14, ``sm100_tuning`` 224 of 20. Its
status word is 16 B still (an ``int`` and a 4-byte value make 8 B, ``Log2<9>`` rounds it up)."""

WIDE_VALUE_UNIQUE_BY_KEY_TILES = {
    700: 64 * 5,
    800: 192 * 7,
    860: 64 * 5,
    900: 448 * 11,
    1000: 448 * 11,
}
"""``DeviceSelect::UniqueByKey``'s tile for 8-byte keys beside 8-byte values (Thrust's
``unique_by_key`` of ``int64_t`` positions and an ``int64_t`` range): ``DefaultPolicy<11, 64>``
(5 items of 8 bytes) on 7.x and 8.6, ``sm80_tuning`` 192 threads of 7, ``sm90_tuning`` 448 of
11, which ``sm100_tuning`` inherits for these sizes."""

T = TypeVar("T")


def _tiles(items: int, tile: int) -> int:
    """Tiles of ``tile`` items that cover ``items``."""
    return -(-items // tile)


def by_architecture(tiles: dict[int, T], capability: tuple[int, int]) -> T | None:
    """The entry of the policy a device of ``capability`` runs: the newest not newer than its
    architecture, or None before the oldest."""
    arch = capability[0] * 100 + capability[1] * 10
    chosen = [start for start in tiles if start <= arch]
    return tiles[max(chosen)] if chosen else None


def tile_state(tiles: int, value_bytes: int, primitive: bool) -> int:
    """``ScanTileState::AllocationSize`` for ``tiles`` tiles (CCCL 3.0,
    ``tile_state_allocation_size``): three temporaries aliased in one (descriptors, partials,
    inclusives), one of each per tile and :data:`TILE_STATUS_PADDING`. A ``primitive`` value
    (an integer, ``float``, ``double``: ``ScanTileState<T, true>``) packs status and value into
    one word of twice its size (4 B for 1- and 2-byte values), with no partials or inclusives;
    another (``c10::Half``, ``c10::BFloat16``, ``c10::complex``, which CUB has no traits for)
    takes a 4-byte status and each of the others at the value's size."""
    states = tiles + TILE_STATUS_PADDING
    if primitive:
        word = 16 if value_bytes == 8 else 8 if value_bytes == 4 else 4
        return aliased([states * word, 0, 0])
    return aliased([states * 4, states * value_bytes, states * value_bytes])


def _mem_bound(threads: int, items: int, size: int) -> tuple[int, int]:
    """``MemBoundScaling``: items per thread scaled from 4-byte to ``size``-byte elements (at
    most twice the nominal), threads bounded by the shared memory a block may hold."""
    scaled_items = max(1, min(items * 4 // size, items * 2))
    bound = -(-(MAX_SMEM_PER_BLOCK // (size * scaled_items)) // 32) * 32
    return min(threads, bound), scaled_items


def inclusive_scan(
    items: int,
    accum_bytes: int,
    primitive: bool,
    policy: tuple[int, int] = SCAN_POLICY,
) -> int:
    """Bytes of ``DeviceScan::InclusiveScan``'s (or ``ExclusiveScan``'s) temporary storage
    (CCCL 3.0, ``DispatchScan::Invoke``) for ``items`` values accumulated in ``accum_bytes``:
    the tile states of its decoupled look-back, a tile being ``policy``'s nominal (threads,
    items per thread) (:data:`SCAN_POLICY` unless tuned) scaled to the value's size, which
    ``Invoke`` aliases again as its one temporary."""
    threads, per_thread = _mem_bound(*policy, accum_bytes)
    return aliased([tile_state(_tiles(items, threads * per_thread), accum_bytes, primitive)])


def exclusive_scan(items: int, capability: tuple[int, int], value_bytes: int = 8) -> int | None:
    """Bytes of ``DeviceScan::ExclusiveScan``'s storage for ``items`` ``int64_t`` (or, of 4
    ``value_bytes``, ``int``, accumulated as ``int``) under torch's ``SumOp``
    (``exclusive_sum``), for capability 7.0 and up."""
    if capability < (7, 0):
        return None
    return inclusive_scan(items, value_bytes, primitive=True)


def unique_by_key(
    items: int,
    capability: tuple[int, int],
    key_bytes: int = 8,
    value_bytes: int = 4,
    offset_bytes: int = 8,
) -> int | None:
    """Bytes of ``DeviceSelect::UniqueByKey``'s storage for ``items`` keys of 8 (or 4)
    ``key_bytes`` beside ``int`` values (a counting iterator; or 8-byte keys beside 8-byte
    ``value_bytes``) with 64-bit (or 4 ``offset_bytes``) offsets: the tile states
    (``ScanTileState<OffsetT>``) and no virtual shared memory (every policy's tile of keys
    fits a block's)."""
    if value_bytes == 8:
        tiles_by = WIDE_VALUE_UNIQUE_BY_KEY_TILES
    else:
        tiles_by = NARROW_UNIQUE_BY_KEY_TILES if key_bytes == 4 else UNIQUE_BY_KEY_TILES
    tile = by_architecture(tiles_by, capability)
    if tile is None:
        return None
    return aliased([tile_state(_tiles(items, tile), offset_bytes, primitive=True), 0])


def scan_by_key(items: int, capability: tuple[int, int], key_bytes: int = 8) -> int | None:
    """Bytes of ``DeviceScan::InclusiveSumByKey``'s or ``InclusiveScanByKey``'s storage for
    ``items`` keys and values of 8 (or 4) ``key_bytes``: a status word per tile and its
    padding (``ReduceByKeyScanTileState``, not aliased on its own), and the last key of each
    tile and one more."""
    tiles_by = NARROW_SCAN_BY_KEY_TILES if key_bytes == 4 else SCAN_BY_KEY_TILES
    tile = by_architecture(tiles_by, capability)
    if tile is None:
        return None
    tiles = _tiles(items, tile)
    return aliased([(tiles + TILE_STATUS_PADDING) * TILE_STATUS_WORD, key_bytes * (tiles + 1)])


REDUCE_SUM_SINGLE_TILE = 256 * 16
"""The items ``DeviceReduce::Sum`` of ``int`` counts reduces in one block: ``Policy600``'s
``ReducePolicy`` (256 threads of 16, ``MemBoundScaling`` leaving 4-byte values as they are) on
every architecture, ``Policy1000``'s ``sm100_tuning`` having entries for ``float`` and 8-byte
sums alone. More items run ``InvokePasses``, whose storage (a partial sum per block of
``sm_occupancy * sm_count * subscription_factor``) follows the occupancy the driver reports."""


def reduce_sum(items: int) -> int | None:
    """Bytes of ``DeviceReduce::Sum``'s temporary storage for ``items`` flags summed as
    ``int``: 1 where they fit one tile (``InvokeSingleTile``), None beyond (not derived here,
    :data:`REDUCE_SUM_SINGLE_TILE`)."""
    return 1 if items <= REDUCE_SUM_SINGLE_TILE else None


SELECT_FLAGGED_TILES: dict[int, tuple[int, int]] = {
    500: (128, 5),
    800: (384, 6),
    860: (128, 5),
    900: (384, 11),
    1000: (320, 11),
}
"""``DeviceSelect::Flagged``'s (threads, items per thread) selecting 8-byte primitive items
(``nonzero``'s ``CountingInputIterator<int64_t>``) by flags, with ``int32`` offsets within a
partition, by the architecture a policy starts at (``select::policy_hub``): ``DefaultPolicy``'s
128 threads of ``10 * 4 / 8`` for ``Policy500`` and ``Policy860``; ``sm80_tuning`` and
``sm90_tuning`` for ``flagged::yes, keep_rejects::no, offset_size::_4, primitive::yes,
input_size::_8`` (384 of 6, 384 of 11); ``sm100_tuning``'s (``may_alias::no``) 320 threads of
``Nominal4BItemsToItems<int64_t>(22)``. Each agent's shared memory fits a block, so none takes
virtual shared memory."""


def select_flagged(items: int, capability: tuple[int, int]) -> int:
    """Bytes of ``DeviceSelect::Flagged``'s temporary storage (CCCL 3.0,
    ``DispatchSelectIf::Invoke``) for ``items`` below ``INT32_MAX`` (one partition): the tile
    states of its look-back over ``int32`` offsets, sized as the scan's are, beside no virtual
    shared memory and no streaming counters, aliased in one."""
    policy = by_architecture(SELECT_FLAGGED_TILES, capability)
    threads, per_thread = policy if policy is not None else SELECT_FLAGGED_TILES[500]
    states = tile_state(_tiles(items, threads * per_thread), 4, primitive=True)
    return aliased([states, 0, 0])


INCLUSIVE_SUM_TRUNCATING_TILES: dict[int, tuple[int, int]] = {
    700: SCAN_POLICY,
    800: (320, 12),
    860: SCAN_POLICY,
    900: (128, 24),
}
"""``DeviceScan::InclusiveScan``'s nominal (threads, items per thread) for ``int`` summed into
``int64_t`` under ``::cuda::std::plus<>`` (``inclusive_sum_truncating``, ``cub.cu``): a
``basic_binary_op_t`` with a primitive 4-byte accumulator, so ``sm80_tuning`` (320 of 12) and
``sm90_tuning`` (128 of 24) apply; ``Policy1000`` keeps ``Policy900``'s, its ``sm100_tuning``
wanting the input and output of one size; 7.x and 8.6 run ``DefaultPolicy``."""


def inclusive_sum_truncating(items: int, capability: tuple[int, int]) -> int | None:
    """Bytes of ``DeviceScan::InclusiveScan``'s storage summing ``items`` ``int`` into
    ``int64_t`` (an ``int`` accumulator), for capability 7.0 and up: the tile states of its
    look-back (8-byte words), aliased twice as :func:`inclusive_scan`'s."""
    policy = by_architecture(INCLUSIVE_SUM_TRUNCATING_TILES, capability)
    if policy is None:
        return None
    return inclusive_scan(items, 4, True, policy)


SELECT_UNIQUE_TILES: dict[int, dict[int, tuple[int, int]]] = {
    700: {1: (128, 10), 2: (128, 10), 4: (128, 10), 8: (128, 5)},
    800: {1: (992, 20), 2: (576, 14), 4: (256, 18), 8: (192, 10)},
    860: {1: (128, 10), 2: (128, 10), 4: (128, 10), 8: (128, 5)},
    900: {1: (256, 22), 2: (256, 22), 4: (384, 17), 8: (384, 11)},
    1000: {1: (384, 22), 2: (256, 22), 4: (384, 15), 8: (384, 11)},
}
"""``DeviceSelect::Unique``'s (threads, items per thread) for primitive items of 1, 2, 4 and 8
bytes (``select::policy_hub``, ``flagged::no, keep_rejects::no``, ``int32`` offsets within a
partition): ``DefaultPolicy``'s 128 threads of ``clamp(40 / size, 1, 10)`` on 7.x and 8.6,
``sm80_tuning`` and ``sm90_tuning``; ``sm100_tuning`` (``may_alias::no``) for 1 and 4 bytes
alone (384 of 22 and of 15), ``Policy900``'s for the others. Items CUB has no traits for
(``c10::Half``, ``c10::BFloat16``) take ``DefaultPolicy`` everywhere: 128 of 10."""


def select_unique(
    items: int, item_bytes: int, primitive: bool, capability: tuple[int, int]
) -> int | None:
    """Bytes of ``DeviceSelect::Unique``'s temporary storage (CCCL 3.0,
    ``DispatchSelectIf::Invoke``) for ``items`` below ``INT32_MAX`` of ``item_bytes``: the tile
    states of its look-back over ``int32`` offsets, as :func:`select_flagged`'s; None before
    7.0."""
    tiles = by_architecture(SELECT_UNIQUE_TILES, capability)
    if tiles is None or item_bytes not in tiles:
        return None
    threads, per_thread = tiles[item_bytes] if primitive else (128, 10)
    states = tile_state(_tiles(items, threads * per_thread), 4, primitive=True)
    return aliased([states, 0, 0])


RUN_LENGTH_ENCODE_TILE = 128 * 6
"""``DeviceRunLengthEncode::Encode``'s tile with ``int64_t`` counts: every tuned policy
(``rle::encode``'s ``sm80_tuning``, ``sm90_tuning``, ``sm100_tuning``) is for 4-byte lengths,
so each architecture runs ``DefaultPolicy``, 128 threads of 6 (the key and the length at most
8 bytes each)."""


def run_length_encode(items: int) -> int:
    """Bytes of ``DeviceRunLengthEncode::Encode``'s temporary storage (``DispatchReduceByKey``)
    for ``items`` keys counted in ``int64_t`` over ``int`` offsets, on every architecture: a
    16-byte status word per tile and :data:`TILE_STATUS_PADDING` more
    (``ReduceByKeyScanTileState<int64_t, int>``, one word), aliased once."""
    tiles = _tiles(items, RUN_LENGTH_ENCODE_TILE)
    return aliased([(tiles + TILE_STATUS_PADDING) * TILE_STATUS_WORD])
