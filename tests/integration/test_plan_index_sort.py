"""CUDA's sorts under the real ``memforensics plan``: an accumulating ``index_put_``
(``x[ids]``'s backward) takes ``index_put_with_sort_kernel``'s index vectors and CUB's
radix-sort temporary storage, and ``sort`` of one long row its positions and CUB's storage, each
taken and freed inside the kernel in CUDA's order. Two expected traces are real GPUs' (the
shared LM workload's embedding backward, and the 2.7B training step's in ``../shared/data/
real-snapshots/``); the others are derived from ``Indexing.cu``, ``Sort.cpp``,
``SortStable.cu`` and CCCL's radix sort."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

from memforensics.plan import scratch

pytestmark = [pytest.mark.integration, pytest.mark.torch]

GATHER = """
import json, sys
import torch
rows, width, count = (int(a) for a in sys.argv[1:4])
how = sys.argv[4]
w = torch.randn(rows, width, device="cuda", requires_grad=True)
if how == "rows":  # an embedding as ``self.weight[token_ids, :]``
    ids = (torch.randint(0, rows, (count // 256, 256), device="cuda"), slice(None))
elif how == "int32-columns":
    ids = (slice(None), torch.randint(0, width, (count,), device="cuda", dtype=torch.int32))
elif how == "pairs":  # two indexed dimensions
    ids = (torch.randint(0, rows, (count,), device="cuda"),
           torch.randint(0, width, (count,), device="cuda"))
else:  # two indexed dimensions apart, in a tensor of three
    w = torch.randn(rows, 40, width, device="cuda", requires_grad=True)
    ids = (torch.randint(0, rows, (count,), device="cuda"), slice(None),
           torch.randint(0, width, (count,), device="cuda"))
x = w[ids]
g = torch.ones_like(x)
torch.cuda.memory._record_memory_history(max_entries=100000)
x.backward(g)
trace = torch.cuda.memory._snapshot()["device_traces"][0]
kept = {"alloc": "a", "free_completed": "f"}
print(json.dumps([kept[e["action"]] + str(e["size"]) for e in trace if e["action"] in kept]))
"""
"""A gather's backward, traced: the gradient's zeros, then ``index_put_``'s scratch."""

CASES = {
    # the shared LM workload (MAGMA27/assignment2-systems, a GPU under torch 2.9+): 8,192 ids
    # sorted on 14 bits (9,999 rows) in two onesweep passes of three 3,840-id tiles
    # (``Policy800``): 4,096 B of bins, 3,072 of lookback, 65,536 each of alternate keys and
    # values, 256 of counters (8 B rounded), 255 to align
    "lm-embedding-8.0": (
        "8.0",
        "10000 768 8192 rows",
        "a30720000 a65536 a65536 f65536 a65536 a65536 a65536 a138751 f138751 f65536 f65536 "
        "f65536 f65536",
    ),
    # the 2.7B training step (an H100, torch 2.6): 512 ids fit one 2,304-id tile, 1 B
    "one-tile-9.0": (
        "9.0",
        "10000 2560 512 rows",
        "a102400000 a4096 a4096 f4096 a4096 a4096 a4096 a1 f1 f4096 f4096 f4096 f4096",
    ),
    # ``Policy900``: tiles of 4,608, so two blocks of lookback (2,048 B) for the same 8,192 ids
    "lm-embedding-9.0": (
        "9.0",
        "10000 768 8192 rows",
        "a30720000 a65536 a65536 f65536 a65536 a65536 a65536 a137727 f137727 f65536 f65536 "
        "f65536 f65536",
    ),
    # int32 ids made int64 (40,000 B, freed once the linear index is made); keys up to 12,799
    # (14 bits, a slice of one element): bins 4,096, lookback 2,048, alternate keys and values
    # 40,192 each (rounded), counters 256, 255 to align
    "int32-columns-9.0": (
        "9.0",
        "64 200 5000 int32-columns",
        "a51200 a40000 a40000 a40000 f40000 f40000 a40000 a40000 a40000 a87039 f87039 f40000 "
        "f40000 f40000 f40000",
    ),
    # two indexed dimensions: the second's product added into the first's and freed; keys up
    # to 119,999 (17 bits, three passes) in one tile of 4,608
    "two-dimensions-9.0": (
        "9.0",
        "300 400 3000 pairs",
        "a480000 a24000 a24000 f24000 a24000 a24000 f24000 f24000 a24000 a24000 a24000 a55807 "
        "f55807 f24000 f24000 f24000 f24000",
    ),
    # the indexed dimensions brought to the front: ``self`` transposed and copied contiguous
    # (240,000 B) before the sort's vectors, freed after them; 1,000 ids fit one tile
    "dimensions-apart-9.0": (
        "9.0",
        "30 50 1000 apart",
        "a240000 a8000 a8000 f8000 a8000 a8000 f8000 f8000 a240000 a8000 a8000 a8000 a1 f1 "
        "f8000 f8000 f8000 f240000 f8000",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_accumulating_index_put_sorts_its_indices_in_blocks_of_its_own(
    tmp_path: Path, case: str
) -> None:
    """The planned trace of a gather's backward holds the sort's index vectors and CUB's
    temporary storage, block by block in CUDA's order."""
    capability, arguments, expected = CASES[case]
    script(tmp_path, GATHER)
    done = plan(tmp_path, "--device-capability", capability, "train.py", *arguments.split())
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0]) == expected.split()


WRITES = """
import json
import torch
t = torch.zeros(64, 32, device="cuda").t()
v = torch.ones(5000, 64, device="cuda")
ids = torch.randint(0, 32, (5000,), device="cuda")
one = torch.ones((), device="cuda")
m = torch.zeros(100, device="cuda")
torch.cuda.memory._record_memory_history(max_entries=100000)
t.index_put_((ids,), v, accumulate=True)
m.index_put_((ids,), one, accumulate=True)
trace = torch.cuda.memory._snapshot()["device_traces"][0]
kept = {"alloc": "a", "free_completed": "f"}
print(json.dumps([kept[e["action"]] + str(e["size"]) for e in trace if e["action"] in kept]))
"""


def test_an_accumulating_write_copies_a_transposed_target_and_a_broadcast_value(
    tmp_path: Path,
) -> None:
    """``index_put_(…, accumulate=True)`` into a transposed tensor works on a contiguous copy
    of it (8,192 B, held to the end), and a scalar value is broadcast to the indexed shape and
    made contiguous (20,000 B, after the linear index, freed before it); 5,000 keys of at most
    31 and 99 sort in one pass, so CUB holds no alternate keys or values: 2,048 B of bins,
    2,048 of lookback for two 4,608-id tiles, 256 of counters, 255 to align. Each forward call
    first checks its index's range (``wrapIndexOnce``): ``aminmax``'s two 8-B bounds (5,000
    ids reduce in one block, no staging), a 1-B ``bool`` for each ``_assert_async``, the
    bounds freed."""
    script(tmp_path, WRITES)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    assert scratch.staging_bytes((5000,), (1,), frozenset({0}), 16, 0, (9, 0), input_vec=4) is None
    check = "a8 a8 a1 f1 a1 f1 f8 f8"
    sort = "a40000 a40000 a40000 a4607 f4607 f40000 f40000 f40000"
    expected = (
        f"a8192 {check} a40000 a40000 f40000 {sort} f40000 f8192 "
        f"{check} a40000 a40000 f40000 a20000 {sort} f20000 f40000"
    )
    assert json.loads(done.stdout.splitlines()[0]) == expected.split()


LONG_WRITE = """
import json
import torch
m = torch.zeros(1000, device="cuda")
ids = torch.randint(0, 1000, (1_000_000,), device="cuda")
one = torch.ones((), device="cuda")
torch.cuda.memory._record_memory_history(max_entries=100000)
m.index_put_((ids,), one, accumulate=True)
trace = torch.cuda.memory._snapshot()["device_traces"][0]
kept = {"alloc": "a", "free_completed": "f"}
print(json.dumps([kept[e["action"]] + str(e["size"]) for e in trace if e["action"] in kept]))
"""


def test_a_forward_writes_range_check_stages_a_long_indexs_aminmax(tmp_path: Path) -> None:
    """A forward ``index_put_`` of a million ids checks their range before wrapping them
    (``wrapIndexOnce``): ``aminmax``'s two 8-B bounds, the staging buffer and semaphores its
    reduction splits into (``MinMaxOps`` over ``int64``: a 16-B ``pair`` accumulator, 4 values
    a load), a 1-B ``bool`` per ``_assert_async``, the bounds freed; then the wrapped index and
    its product."""
    n = 1_000_000
    staged = scratch.staging_bytes((n,), (1,), frozenset({0}), 16, 0, (9, 0), input_vec=4)
    assert staged is not None
    buffer, semaphores = staged
    check = f"a8 a8 a{buffer} a{semaphores} f{semaphores} f{buffer} a1 f1 a1 f1 f8 f8"
    expected = f"{check} a{8 * n} a{8 * n} f{8 * n}".split()
    script(tmp_path, LONG_WRITE)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])[: len(expected)] == expected


SORTED = """
import json, sys
import torch
dtype, n = getattr(torch, sys.argv[1]), int(sys.argv[2])
x = (torch.randn(n, device="cuda") * 1000).to(dtype)
torch.cuda.memory._record_memory_history(max_entries=100000)
i = x.argsort()
v, j = torch.sort(x.view(1, -1), descending=True, stable=True)
trace = torch.cuda.memory._snapshot()["device_traces"][0]
kept = {"alloc": "a", "free_completed": "f"}
print(json.dumps([kept[e["action"]] + str(e["size"]) for e in trace if e["action"] in kept]))
"""
"""An ``argsort`` of one long row (its values freed after), then a ``sort`` of it as a row."""

SORTS = {
    # float32 keys: positions (800,000 B), then four passes of tiles of 5,376 (19 blocks):
    # 8,192 B of bins, 19,456 of lookback, 400,128 and 800,000 of alternate keys and values,
    # 256 of counters, 255 to align
    "float32-9.0": ("9.0", "float32 100000", "a400000 a800000 a800000 a1228287 f1228287 f800000"),
    # int64 keys: eight passes, tiles of 3,840 (27 blocks)
    "int64-8.0": ("8.0", "int64 100000", "a800000 a800000 a800000 a1644543 f1644543 f800000"),
    # bfloat16 keys on 9.0 (sm90_small_key_tuning<2, 8, 8>: 512 threads of 23, scaled to 11
    # for 8-byte values): two passes of tiles of 5,632 (18 blocks): 4,096 B of bins, 18,432
    # of lookback, 200,192 and 800,000 of alternate keys and values, 256 of counters, 255
    "bfloat16-9.0": ("9.0", "bfloat16 100000", "a200000 a800000 a800000 a1023231 f1023231 f800000"),
    # the same on 10.0, whose table keeps 9.0's entry for these keys and values
    "float16-10.0": ("10.0", "float16 100000", "a200000 a800000 a800000 a1023231 f1023231 f800000"),
    # uint8 keys (<1, 8, 8>: 384 threads of 18, scaled to 9): one pass of tiles of 3,456 (29
    # blocks): 2,048 B of bins, 29,696 of lookback, no alternate keys or values, 256, 255
    "uint8-9.0": ("9.0", "uint8 100000", "a100000 a800000 a800000 a32255 f32255 f800000"),
    # 4,096 or fewer sort in place
    "short-9.0": ("9.0", "float32 4096", "a16384 a32768"),
}


@pytest.mark.parametrize("case", list(SORTS))
def test_a_long_rows_sort_takes_its_positions_and_cubs_storage(tmp_path: Path, case: str) -> None:
    """``sort`` and ``argsort`` of one row longer than 4,096 take the row's positions and CUB's
    radix-sort storage after their outputs and free both as they return."""
    capability, arguments, once = SORTS[case]
    values = once.split()[0]
    expected = [*once.split(), f"f{values[1:]}", *once.split()]
    script(tmp_path, SORTED)
    done = plan(tmp_path, "--device-capability", capability, "train.py", *arguments.split())
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0]) == expected


ROWS = """
import json, sys
import torch
rows, n = int(sys.argv[1]), int(sys.argv[2])
x = torch.randn(rows, n, device="cuda")
torch.cuda.memory._record_memory_history(max_entries=100000)
v, i = torch.sort(x)
trace = torch.cuda.memory._snapshot()["device_traces"][0]
kept = {"alloc": "a", "free_completed": "f"}
print(json.dumps([kept[e["action"]] + str(e["size"]) for e in trace if e["action"] in kept]))
"""

ROW_SORTS = {
    # fewer than 128 rows, sorted whole: two arrays of (position, row) pairs (320,000 B each),
    # the sorted keys (160,000), CUB's storage for float32 keys beside the pairs (8 tiles of
    # 5,376, four passes: 496,895 B), then for the pairs as 8-byte keys on the rows' 2 bits
    # (7 tiles of 5,760, one pass: 9,727 B)
    "4-rows": (
        "4 10000",
        "a160000 a320000 a320000 a320000 a160000 a496895 f496895 f160000 a9727 f9727 f320000 "
        "f320000",
    ),
    # 128 rows or more: the positions (8,000,000 B), then CUB's segmented sort's alternate
    # keys and values (4,000,000 + 8,000,000 + 255 B)
    "200-rows": ("200 5000", "a4000000 a8000000 a8000000 a12000255 f12000255 f8000000"),
}


@pytest.mark.parametrize("case", list(ROW_SORTS))
def test_rows_sorted_together_take_cubs_storage_by_how_many_they_are(
    tmp_path: Path, case: str
) -> None:
    """``sort`` of several rows longer than 4,096: a whole sort of values and row ids for
    fewer than 128 rows, CUB's segmented sort for more, each with its own blocks."""
    arguments, expected = ROW_SORTS[case]
    script(tmp_path, ROWS)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py", *arguments.split())
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0]) == expected.split()
