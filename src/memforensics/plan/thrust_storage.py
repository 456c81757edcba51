"""Thrust's temporary storage: the blocks a Thrust algorithm run with PyTorch's
``at::cuda::ThrustAllocator`` asks the caching allocator for (``raw_alloc``), one
``temporary_array<std::uint8_t>`` per call, taken before its kernels and freed as it returns.

The sizes follow the Thrust of CCCL 3.0 (``thrust/system/cuda/detail/``), the CCCL of the CUDA
13.0 toolkit torch 2.13's default wheel is built with, for the calls
``unique_dim_cuda_template`` (``aten/src/ATen/native/cuda/Unique.cu``) makes over its ``int64_t``
slice positions, each under 2^31 of them (Thrust's 32-bit offsets):

- ``thrust::sort`` by a comparator (a device lambda, not ``less``): ``merge_sort``
  (``sort.h``), ``cub::DispatchMergeSort`` keys alone with ``uint32_t`` offsets: a merge
  partition per tile and one more (4 B each), and the alternate keys;
- ``thrust::adjacent_difference`` from one array into another (``adjacent_difference.h``):
  ``DispatchAdjacentDifference`` with ``MayAlias::No`` asks for no temporary, which
  ``AliasTemporaries`` makes 255 B;
- ``thrust::inclusive_scan`` of ``int64_t`` in place under ``plus<>`` (``scan.h``):
  ``DispatchScan`` with ``uint32_t`` offsets, whose tile is tuned (``basic_binary_op_t``);
- ``thrust::unique`` (``unique.h``): Thrust's own ``UniqueAgent`` (tuned for 5.2 alone, so on
  every architecture) over ``int`` offsets, its tile states beside an ``int`` count;
- ``thrust::unique_by_key`` (``unique_by_key.h``): ``cub::DeviceSelect::UniqueByKey`` with
  ``uint32_t`` offsets beside a ``uint32_t`` count.

Every agent's shared memory fits a block for 8-byte items, so none takes virtual shared memory.
The CUB parts are :mod:`~memforensics.plan.cub_storage`'s.
"""

from __future__ import annotations

from memforensics.plan import cub_storage

MERGE_SORT_TILE = 256 * 8
"""``DeviceMergeSort``'s tile for 8-byte keys: ``policy_hub``'s ``Policy600`` (every
architecture from 6.0) 256 threads of ``Nominal4BItemsToItems<int64_t>(17)``."""
MERGE_SORT_ARCH = (6, 0)
"""The first capability :data:`MERGE_SORT_TILE` is the tile of (``Policy520`` before)."""
OFFSET = 4
"""Bytes of Thrust's 32-bit offsets and of the selection's count."""
SCAN_TILES: dict[int, tuple[int, int]] = {
    700: cub_storage.SCAN_POLICY,
    800: (288, 22),
    860: cub_storage.SCAN_POLICY,
    900: (224, 24),
    1000: (416, 23),
}
"""``DeviceScan``'s nominal (threads, items per thread) summing ``int64_t`` under
``::cuda::std::plus<>`` (a ``basic_binary_op_t``) with ``uint32_t`` offsets: ``DefaultPolicy``
on 7.x and 8.6, ``sm80_tuning`` and ``sm90_tuning`` for 8-byte primitive accumulators,
``sm100_tuning`` for ``plus`` over 8-byte values with 4-byte offsets (its input and output of
one size)."""
UNIQUE_NOMINAL = (64, 11)
"""``__unique::Tuning<sm52, T>``: 64 threads of 11 nominal 4-byte items, the only tuning, so
every architecture's."""


def merge_sort_keys(items: int, capability: tuple[int, int], key_bytes: int = 8) -> int | None:
    """Bytes of ``thrust::sort``'s merge sort of ``items`` 8-byte keys alone
    (``DispatchMergeSort::Invoke``): the merge partitions (a ``uint32_t`` per tile and one
    more) and the alternate keys, aliased; None before 6.0."""
    if capability < MERGE_SORT_ARCH or key_bytes != 8:
        return None
    tiles = -(-items // MERGE_SORT_TILE)
    return cub_storage.aliased([(tiles + 1) * OFFSET, items * key_bytes, 0, 0])


def adjacent_difference() -> int:
    """Bytes of ``thrust::adjacent_difference`` from one array into another: no temporary,
    aliased (255 B), whatever the length."""
    return cub_storage.aliased([0])


def inclusive_sum(items: int, capability: tuple[int, int]) -> int | None:
    """Bytes of ``thrust::inclusive_scan`` of ``items`` ``int64_t``: the tile states of
    ``DispatchScan``'s look-back (16-byte words), aliased twice; None before 7.0."""
    policy = cub_storage.by_architecture(SCAN_TILES, capability)
    if policy is None:
        return None
    return cub_storage.inclusive_scan(items, 8, True, policy)


def unique(items: int, item_bytes: int = 8) -> int:
    """Bytes of ``thrust::unique`` of ``items`` of ``item_bytes``: the ``int`` count and the
    agent's storage (``ScanTileState<int>``'s 8-byte words, no virtual shared memory),
    aliased; its tile is :data:`UNIQUE_NOMINAL` scaled to the item's size."""
    threads, nominal = UNIQUE_NOMINAL
    per_thread = min(nominal, max(1, nominal * 4 // item_bytes))
    tiles = -(-items // (threads * per_thread))
    agent = cub_storage.aliased([cub_storage.tile_state(tiles, OFFSET, primitive=True), 0])
    return cub_storage.aliased([OFFSET, agent])


def unique_by_key(items: int, capability: tuple[int, int]) -> int | None:
    """Bytes of ``thrust::unique_by_key`` of ``items`` 8-byte keys beside 8-byte values:
    ``DeviceSelect::UniqueByKey``'s storage with 32-bit offsets and the ``uint32_t`` count,
    aliased; None where CUB's is not sized."""
    storage = cub_storage.unique_by_key(items, capability, 8, 8, OFFSET)
    if storage is None:
        return None
    return cub_storage.aliased([storage, OFFSET])
