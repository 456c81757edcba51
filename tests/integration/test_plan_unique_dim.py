"""``torch.unique`` and ``torch.unique_consecutive`` along a ``dim`` under the real
``memforensics plan``: ``unique_dim_cuda_template`` (``aten/src/ATen/native/cuda/Unique.cu``)
runs Thrust with ``ThrustAllocator``, so each Thrust call takes one block of scratch from the
caching allocator and frees it as it returns (docs/plan.md, "``unique``'s scratch and
full-length outputs"). The sizes here are derived from CCCL 3.0's Thrust and CUB source, on
four architectures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import EACH_TRACED_ALONE, plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

ROWS = 100_000
"""Slices along the ``dim``: enough for many tiles of every algorithm."""

UNIQUE_DIMS = (
    f"""
import json
import torch
x = (torch.arange({ROWS}, device="cuda") % 7).reshape({ROWS}, 1)
z = (torch.arange(2 * {ROWS}, device="cuda") % 7).reshape(2, {ROWS})
calls = [
    lambda: torch.unique(x, dim=0, return_inverse=True, return_counts=True),
    lambda: torch.unique(z, dim=1),
    lambda: torch.unique_consecutive(x, dim=0, return_counts=True),
]
"""
    + EACH_TRACED_ALONE
    + """print(json.dumps(traces))
"""
)
"""Rows of one ``int64`` (7 distinct, no two neighbours equal), the columns of a (2, n)
tensor (7 distinct; moved to the front they are not contiguous), each call traced alone."""


def aligned(*sizes: int) -> int:
    """``AliasTemporaries`` (``util_temporary_storage.cuh``): each size rounded up to 256 B,
    plus 255 B."""
    return sum(-(-size // 256) * 256 for size in sizes) + 255


def tile_states(tiles: int, word: int) -> int:
    """``ScanTileState<T, true>::AllocationSize``: a status word per tile and 32 more (a warp's
    padding), the partials and inclusives of a primitive value empty, aliased."""
    return aligned((tiles + 32) * word, 0, 0)


def tiles(items: int, tile: int) -> int:
    """Tiles of ``tile`` items covering ``items``."""
    return -(-items // tile)


SCAN_TILE = {"7.0": 128 * 7, "8.0": 288 * 11, "9.0": 224 * 12, "10.0": 416 * 11}
"""``DeviceScan``'s tile over ``int64_t`` under ``plus<>``: ``DefaultPolicy`` 128 x 15,
``sm80_tuning<_8>`` 288 x 22, ``sm90_tuning<_8>`` 224 x 24, ``sm100_tuning`` (plus, 4-byte
offsets, 8-byte values) 416 x 23, each scaled by ``MemBoundScaling`` to 8 bytes (items x 4 / 8)."""
UNIQUE_BY_KEY_TILE = {"7.0": 64 * 5, "8.0": 192 * 7, "9.0": 448 * 11, "10.0": 448 * 11}
"""``DeviceSelect::UniqueByKey``'s tile for 8-byte keys and values: ``DefaultPolicy<11, 64>``
(``Nominal4BItemsToItems<int64_t>(11)`` = 5), ``sm80_tuning`` 192 x 7, ``sm90_tuning`` 448 x 11,
``sm100_tuning`` inheriting ``sm90_tuning``."""
MERGE_SORT_TILE = 256 * 8
"""``DeviceMergeSort``'s ``Policy600``: 256 threads of ``Nominal4BItemsToItems<int64_t>(17)``."""
UNIQUE_TILE = 64 * 5
"""Thrust's own ``UniqueAgent``, tuned for 5.2 alone: 64 threads of 11 x 4 / 8 items."""


def merge_sort(m: int) -> int:
    """``thrust::sort`` by a comparator: a ``uint32_t`` merge partition per tile and one more,
    the alternate ``int64_t`` keys, no values, no virtual shared memory."""
    return aligned((tiles(m, MERGE_SORT_TILE) + 1) * 4, m * 8, 0, 0)


ADJACENT_DIFFERENCE = aligned(0)
"""``thrust::adjacent_difference`` into another array: ``MayAlias::No``, no temporary."""


def inclusive_scan(m: int, capability: str) -> int:
    """``thrust::inclusive_scan`` of ``int64_t``: 16-byte tile states, aliased again by
    ``DispatchScan``."""
    return aligned(tile_states(tiles(m, SCAN_TILE[capability]), 16))


def unique_by_key(m: int, capability: str) -> int:
    """``thrust::unique_by_key``: CUB's storage (8-byte states of ``uint32_t`` offsets and no
    virtual shared memory, aliased) beside the 4-byte count."""
    cub = aligned(tile_states(tiles(m, UNIQUE_BY_KEY_TILE[capability]), 8), 0)
    return aligned(cub, 4)


def unique(m: int) -> int:
    """``thrust::unique``: the 4-byte count beside the agent's ``int`` tile states and no
    virtual shared memory."""
    return aligned(4, aligned(tile_states(tiles(m, UNIQUE_TILE), 8), 0))


def expected(capability: str) -> list[str]:
    """Each call's blocks in ``unique_dim_cuda_template``'s order."""
    m, positions, ends = ROWS, ROWS * 8, (ROWS + 1) * 8
    sort, scan = merge_sort(m), inclusive_scan(m, capability)
    by_key, adjacent = unique_by_key(m, capability), ADJACENT_DIFFERENCE
    return [
        # positions, sort; running sum, inverse, differences, scan, sum freed; range,
        # unique_by_key, the 7 counts, their differences, range freed; 7 rows; positions freed
        f"a{positions} a{sort} f{sort} a{positions} a{positions} a{adjacent} f{adjacent} "
        f"a{scan} f{scan} f{positions} a{ends} a{by_key} f{by_key} a56 a{adjacent} "
        f"f{adjacent} f{ends} a56 f{positions}",
        # the columns' contiguous copy, positions, sort, unique, 2 x 7 values, both freed
        f"a{2 * positions} a{positions} a{sort} f{sort} a{unique(m)} f{unique(m)} a112 "
        f"f{positions} f{2 * positions}",
        # no sort; every row a run: range, unique_by_key, n counts, differences, n rows
        f"a{positions} a{ends} a{by_key} f{by_key} a{positions} a{adjacent} f{adjacent} "
        f"f{ends} a{positions} f{positions}",
    ]


@pytest.mark.parametrize("capability", ["7.0", "8.0", "9.0", "10.0"])
def test_unique_along_a_dim_takes_thrusts_scratch_in_order(tmp_path: Path, capability: str) -> None:
    """Along a ``dim``, each Thrust call's scratch (merge sort, adjacent differences, scan,
    ``unique``, ``unique_by_key``) is taken and freed at its place among the outputs, sized
    by the architecture's tuning."""
    script(tmp_path, UNIQUE_DIMS)
    done = plan(tmp_path, "--device-capability", capability, "train.py")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0]) == expected(capability)
