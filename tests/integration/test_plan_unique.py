"""``torch.unique`` and ``torch.unique_consecutive`` under the real ``memforensics plan``: CUDA's
sorted copy, positions, running sums, length and CUB storage around their outputs, each output
made as long as the input and shrunk with ``resize_``, which keeps its block (docs/plan.md,
"``unique``'s scratch and full-length outputs")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import EACH_TRACED_ALONE, plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

UNIQUES = (
    """
import json
import torch
x = torch.arange(10000, device="cuda") % 50
s = x.sort().values
t = x.view(100, 100).t()
f = (torch.arange(6000, device="cuda") % 7).float()
b = torch.arange(3000, device="cuda") % 3 == 0
y = (torch.arange(4000, device="cuda") % 3).reshape(1000, 4)
calls = [
    lambda: torch.unique(x, return_inverse=True, return_counts=True),
    lambda: torch.unique(t),
    lambda: torch.unique(f),
    lambda: torch.unique_consecutive(s, return_inverse=True),
    lambda: torch.unique(b, return_counts=True),
    lambda: torch.unique(y, dim=0, return_inverse=True, return_counts=True),
    lambda: torch.unique_consecutive(y.t(), dim=1),
]
"""
    + EACH_TRACED_ALONE
    + """u = torch.unique(x)
print(json.dumps({"traces": traces, "kept": [u.numel(), u.untyped_storage().nbytes()]}))
"""
)
"""Seven calls on values the script made (50 distinct of 10,000, runs of 7 floats, a mask,
three distinct rows), each traced alone on 9.0."""

TRACES = [
    # int64, sorted with its positions: the sorted copy, the ``arange``, the sorted positions,
    # SortPairs on 64 bits (8 passes: 16,384 B of bins, 3 tiles of 4,608: 3,072 of look-back,
    # 80,128 each of alternate keys and values, 256 of counters, + 255), the ``arange`` freed;
    # the inverse, its running sum and the truncating sum's 1,023 B (4 tiles of 3,072); the
    # values, the 8-B length, the counts, the run-length encoding's 1,023 B (14 tiles of 768);
    # the length, the positions and the sorted copy freed. The outputs are 80,000 B each
    "a80000 a80000 a80000 a180223 f180223 f80000 a80000 a80000 a1023 f1023 f80000 "
    "a80000 a8 a80000 a1023 f1023 f8 f80000 f80000",
    # a transposed view: its contiguous copy first, held to the end; SortKeys of 8-byte keys
    # alone (384 of 15 = 5,760 a tile: 2 tiles, no alternate values: 99,071 B), then
    # DeviceSelect::Unique's 1,023 B (384 of 11 for 8 bytes: 3 tiles)
    "a80000 a80000 a99071 f99071 a80000 a8 a1023 f1023 f8 f80000 f80000",
    # float32: SortKeys of float keys (384 of 18: one tile, four passes), Unique's 1,023 B
    "a24000 a33791 f33791 a24000 a8 a1023 f1023 f8 f24000",
    # consecutive: no sort; the inverse, the differences as ``int``, the sum, the values
    "a80000 a40000 a1023 f1023 f40000 a80000 a8 a1023 f1023 f8",
    # a mask: the 4-byte count of true values, the one-tile reduction (1 B), the values (2 B)
    # and the counts (16 B) shrunk to the two kinds present
    "a4 a1 f1 a2 a16 f4",
    # rows (Thrust): the rows' positions, the merge sort's 8,703 B (a partition for one tile
    # and one more, 8 B, and the alternate keys, 8,000 B, each rounded to 256, + 255), their
    # running sum and the inverse, ``adjacent_difference``'s 255 B, ``inclusive_scan``'s
    # 1,279 B (one tile of 224 x 12: 33 16-byte states, aliased twice), an ``arange`` of
    # 1,001, ``unique_by_key``'s 1,535 B (one tile of 448 x 11: 33 8-byte states, aliased
    # three times, beside a 4-byte count), the counts of the 3 distinct rows,
    # ``adjacent_difference``'s 255 B, then ``index_select``'s 3 rows
    "a8000 a8703 f8703 a8000 a8000 a255 f255 a1279 f1279 f8000 "
    "a8008 a1535 f1535 a24 a255 f255 f8008 a96 f8000",
    # columns of the transpose: moved to the front they are the rows as they lie (no copy);
    # no sort; ``unique``'s 1,535 B (4 tiles of 64 x 5: 36 8-byte states beside a 4-byte
    # count); every column a run of its own
    "a8000 a1535 f1535 a32000 f8000",
]


def test_unique_takes_cudas_scratch_and_keeps_full_length_blocks(tmp_path: Path) -> None:
    """Every ``unique`` and ``unique_consecutive`` form takes CUDA's blocks in CUDA's order and
    sizes, and 50 distinct values of 10,000 keep the 80,000-B block they were made in."""
    script(tmp_path, UNIQUES)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[0])
    assert facts["traces"] == TRACES
    assert facts["kept"] == [50, 80000]


OWN_META = """
import json
import torch
x = torch.zeros(100000, device="meta", dtype=torch.long)
u = torch.unique(x, return_inverse=True, return_counts=True)
print(json.dumps([torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()]))
"""


def test_unique_of_the_scripts_own_meta_tensor_takes_nothing(tmp_path: Path) -> None:
    """``unique`` of a tensor the script put on ``meta`` itself takes no block: a GPU holds no
    memory for it either."""
    script(tmp_path, OWN_META)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0]) == [0, 0]
