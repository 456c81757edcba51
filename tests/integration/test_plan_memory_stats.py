"""``torch.cuda.memory_stats()`` under the real ``memforensics plan``: every key CUDA's caching
allocator reports, and the statistics of fragmentation (inactive split blocks) and of oversize
blocks changed as the allocator changes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

MiB = 1 << 20
FIELDS = ("current", "peak", "allocated", "freed")
PER_POOL = ("allocation", "allocated_bytes", "active", "active_bytes", "inactive_split",
            "inactive_split_bytes", "requested_bytes", "reserved_bytes", "segment")  # fmt: skip
COUNTERS = ("num_alloc_retries", "num_ooms", "num_oom_rejections", "num_sync_all_streams",
            "num_device_alloc", "num_device_free", "max_split_size")  # fmt: skip
DOCUMENTED = {
    *(f"{name}.{pool}.{field}" for name in PER_POOL
      for pool in ("all", "large_pool", "small_pool") for field in FIELDS),
    *(f"{name}.{field}" for name in ("oversize_allocations", "oversize_segments")
      for field in FIELDS),
    *COUNTERS,
}  # fmt: skip
"""The keys ``torch.cuda.memory_stats``'s documentation lists for the native allocator with
no private pool."""

FRAGMENTED = """
import json
import torch
torch.cuda.memory._set_allocator_settings("max_split_size_mb:40")
a, b, c, d, e = (torch.empty(3 << 20, dtype=torch.uint8, device="cuda") for _ in range(5))
del b, d  # two 3 MiB holes in the 20 MiB segment, besides its 5 MiB tail
holes = torch.cuda.memory_stats()
del c  # the two holes and c become one 9 MiB free block
merged = torch.cuda.memory_stats()
torch.cuda.reset_peak_memory_stats()
reset = torch.cuda.memory_stats()
big = torch.empty(50 << 20, dtype=torch.uint8, device="cuda")  # over max_split_size
oversize = torch.cuda.memory_stats()
del big
torch.cuda.empty_cache()
print(json.dumps({"holes": holes, "merged": merged, "reset": reset, "oversize": oversize,
                  "end": torch.cuda.memory_stats(), "summary": torch.cuda.memory_summary()}))
"""


def test_memory_stats_reports_inactive_split_and_oversize_figures_as_the_allocator(
    tmp_path: Path,
) -> None:
    """Every documented key is there; freeing blocks of a split 20 MiB segment makes the
    inactive split blocks and bytes rise and merging them makes them fall, with peaks and
    totals (``inactive_split_bytes.all.peak`` is the 17 MiB left after the first 3 MiB), and
    a 50 MiB tensor over ``max_split_size`` counts as an oversize allocation and segment."""
    script(tmp_path, FRAGMENTED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[0])
    assert set(found["end"]) == DOCUMENTED
    holes, merged, reset = found["holes"], found["merged"], found["reset"]
    # 17 MiB tail, shrunk by four more 3 MiB blocks to 5 MiB, then b and d freed
    assert holes["inactive_split.all.current"] == 3
    assert holes["inactive_split_bytes.all.current"] == 11 * MiB
    assert holes["inactive_split_bytes.all.peak"] == 17 * MiB
    assert holes["inactive_split_bytes.all.allocated"] == 17 * MiB + 2 * 3 * MiB
    assert holes["inactive_split_bytes.all.freed"] == 4 * 3 * MiB
    assert holes["inactive_split_bytes.large_pool.peak"] == 17 * MiB
    assert holes["inactive_split_bytes.small_pool.peak"] == 0
    assert merged["inactive_split.all.current"] == 2
    assert merged["inactive_split.all.peak"] == 3
    assert merged["inactive_split_bytes.all.current"] == 14 * MiB  # 9 MiB and the 5 MiB tail
    assert reset["inactive_split_bytes.all.peak"] == 14 * MiB
    assert reset["inactive_split.all.peak"] == 2
    oversize, end = found["oversize"], found["end"]
    assert end["max_split_size"] == 40 * MiB
    assert oversize["oversize_allocations.current"] == 1
    assert oversize["oversize_segments.current"] == 1
    assert (end["oversize_allocations.current"], end["oversize_allocations.freed"]) == (0, 1)
    assert (end["oversize_segments.current"], end["oversize_segments.peak"]) == (0, 1)
    assert end["oversize_segments.freed"] == 1  # empty_cache gave its segment back
    assert "Non-releasable memory" in found["summary"]
    assert "Oversize GPU segments" in found["summary"]
