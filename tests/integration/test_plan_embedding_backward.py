"""``nn.Embedding``'s and ``nn.EmbeddingBag``'s backward under the real ``memforensics plan``:
``embedding_dense_backward_cuda`` (``aten/src/ATen/native/cuda/Embedding.cu``) and
``embedding_backward_cuda_kernel`` (``EmbeddingBackwardKernel.cu``) take their sort, segments
and partial sums through the caching allocator beside the output, block by block in CUDA's
order. No real trace we hold runs them; every figure below is derived from torch 2.13's source
and CCCL 3.0's (CUB's radix sort, ``UniqueByKey``, ``ExclusiveScan``, scans by key), as
``docs/plan.md`` states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

EMBEDDING = """
import json, sys
import torch
rows, width, count = (int(a) for a in sys.argv[1:4])
how = sys.argv[4] if len(sys.argv) > 4 else ""
if "deterministic" in how:
    torch.use_deterministic_algorithms(True)
e = torch.nn.Embedding(rows, width, padding_idx=0 if "padding" in how else None,
                       scale_grad_by_freq="counts" in how, device="cuda",
                       dtype=torch.bfloat16 if "bfloat16" in how else torch.float32)
ids = torch.randint(0, rows, (count // 256, 256), device="cuda",
                    dtype=torch.int32 if "int32" in how else torch.int64)
x = e(ids)
g = torch.ones((), device="cuda").expand_as(x) if "expanded" in how else torch.ones_like(x)
torch.cuda.memory._record_memory_history(max_entries=100000)
x.backward(g)
trace = torch.cuda.memory._snapshot()["device_traces"][0]
kept = {"alloc": "a", "free_completed": "f"}
print(json.dumps([kept[e["action"]] + str(e["size"]) for e in trace if e["action"] in kept]))
"""
"""An embedding's backward, traced: ``rows`` by ``width``, ``count`` ids in rows of 256."""

# 8,192 int64 ids into 10,000 rows of 768 float32 on 9.0, in CUDA's order:
# - the sorted ids, their positions and an ``arange`` (65,536 B each); CUB's radix sort on all
#   64 bits: eight onesweep passes over two 4,608-id tiles, 16,384 B of bins, 2,048 of
#   lookback, 65,536 each of alternate keys and values, 256 of counters, 255 to align; the
#   ``arange`` freed;
# - the output (30,720,000 B), the runs' starts (65,536) and their number (8); ``unique_by_key``'s
#   own keys (65,536) and CUB's storage: two 4,480-id tiles (640 threads of 7), 34 status words
#   of 16 B (544, 768 aligned, +255: 1,023), aliased again (1,024 + 255: 1,279);
# - min(8,192, 10,000) runs: partials per run and their offsets (65,536 each) and
#   ``exclusive_sum``'s storage (ten 896-id tiles: 42 words, 1,279 likewise); the partial
#   segments' number (8) and starts (8,192 // 10 + 8,192 = 9,011 of 8 B: 72,088);
# - ``sum_and_scatter`` would run 8,192 blocks of 768 threads, no fewer than 4 per SM (528):
#   the partial sums, 9,011 rows of 768 float32 (27,681,792 B);
# - all freed as the kernels return, the output kept.
SORTED = (
    "a65536 a65536 a65536 a150015 f150015 f65536 a30720000 a65536 a8 a65536 a1279 f1279 "
    "f65536 a65536 a65536 a1279 f1279 a8 a72088 a27681792 f27681792 f72088 f8 f65536 f65536 "
    "f8 f65536 f65536 f65536"
)

CASES = {
    "sorted-9.0": ("9.0", "10000 768 8192", SORTED),
    # ``padding_idx`` changes what the kernels write, not what they take
    "padding-9.0": ("9.0", "10000 768 8192 padding", SORTED),
    # 3,072 ids or fewer: the shared-memory kernel, the output alone
    "feature-kernel-9.0": ("9.0", "10000 768 3072", "a30720000"),
    # an expanded gradient (a sum's) is made contiguous first (2,048 x 64 x 4 B), held to the end
    "expanded-9.0": ("9.0", "1000 64 2048 expanded", "a524288 a256000 f524288"),
    # ``Policy800``: radix tiles of 3,840 (three blocks of lookback, 3,072 B: 151,039);
    # ``unique_by_key``'s tiles of 1,792 (five: 37 words, 1,279 still)
    "sorted-8.0": ("8.0", "10000 768 8192", SORTED.replace("150015", "151039")),
    # ``scale_grad_by_freq``: the counts (65,536 B) after the sort, held to the end, and two
    # scans by key (four 2,464-id tiles: 36 words of 16 B and five 8-B keys, 768 + 256 + 255)
    "counts-9.0": (
        "9.0",
        "10000 768 8192 counts",
        SORTED.replace("f65536 a30720000", "f65536 a65536 a1279 f1279 a1279 f1279 a30720000")
        + " f65536",
    ),
    # 102,400 ids into 100 rows: ``sum_and_scatter``'s 100 blocks are fewer than four per SM and
    # a quarter of the 10,340 partial segments, so each partial segment's run (82,720 B) and,
    # for bfloat16, a float32 copy of the output (100 x 768 x 4) the sums are added into
    # atomically; the radix sort's 23 tiles (1,678,847 B), ``unique_by_key``'s 23 tiles (55
    # words: 1,535) and ``exclusive_sum``'s one
    "atomic-bfloat16-9.0": (
        "9.0",
        "100 768 102400 bfloat16",
        "a819200 a819200 a819200 a1678847 f1678847 f819200 a153600 a819200 a8 a819200 a1535 "
        "f1535 f819200 a800 a800 a1279 f1279 a8 a82720 a82720 a307200 f307200 f82720 f82720 f8 "
        "f800 f800 f8 f819200 f819200 f819200",
    ),
    # int32 ids: vectors of 4 B an id (32,768 B); CUB's sort of 4-byte keys beside 4-byte
    # positions on all 32 bits, four onesweep passes over two 6,528-id tiles (384 threads of
    # 17): 8,192 B of bins, 2,048 of lookback, 32,768 each of alternate keys and values, 256 of
    # counters, 255 to align (76,287); ``unique_by_key``'s tiles of 7,168 (512 of 14: 1,279);
    # ``exclusive_sum`` of ``int`` counts in tiles of 1,920 (five: 37 words of 8 B, 1,023); the
    # partial segments' starts 9,011 x 4 B
    "int32-9.0": (
        "9.0",
        "10000 768 8192 int32",
        "a32768 a32768 a32768 a76287 f76287 f32768 a30720000 a32768 a8 a32768 a1279 f1279 "
        "f32768 a32768 a32768 a1023 f1023 a8 a36044 a27681792 f27681792 f36044 f8 f32768 "
        "f32768 f8 f32768 f32768 f32768",
    ),
    # deterministic algorithms take the two-pass path: 10,340 rows of partial sums
    "deterministic-9.0": (
        "9.0",
        "100 768 102400 deterministic",
        "a819200 a819200 a819200 a1678847 f1678847 f819200 a307200 a819200 a8 a819200 a1535 "
        "f1535 f819200 a800 a800 a1279 f1279 a8 a82720 a31764480 f31764480 f82720 f8 f800 f800 "
        "f8 f819200 f819200 f819200",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_embeddings_backward_sorts_its_ids_and_sums_their_rows_in_blocks_of_its_own(
    tmp_path: Path, case: str
) -> None:
    """The planned trace of ``nn.Embedding``'s backward holds the sort's vectors, the runs'
    segments, the partial sums and CUB's storage, block by block in CUDA's order."""
    capability, arguments, expected = CASES[case]
    script(tmp_path, EMBEDDING)
    done = plan(tmp_path, "--device-capability", capability, "train.py", *arguments.split())
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0]) == expected.split()


BAGS = """
import json, sys
import torch
mode = sys.argv[1]
e = torch.nn.EmbeddingBag(1000, 64, mode=mode, device="cuda")
ids = torch.randint(0, 1000, (2000,), device="cuda")
x = e(ids, torch.arange(0, 2000, 20, device="cuda"))
g = torch.ones_like(x)
torch.cuda.memory._record_memory_history(max_entries=100000)
x.backward(g)
trace = torch.cuda.memory._snapshot()["device_traces"][0]
kept = {"alloc": "a", "free_completed": "f"}
print(json.dumps([kept[e["action"]] + str(e["size"]) for e in trace if e["action"] in kept]))
"""


@pytest.mark.parametrize("mode", ["sum", "max"])
def test_an_embedding_bags_backward_sorts_in_sum_mode_only(tmp_path: Path, mode: str) -> None:
    """``nn.EmbeddingBag``'s backward in ``sum`` mode sorts its 2,000 ids whatever their number
    (one radix tile: 1 B of CUB storage) and sums 2,000 // 10 + 1,000 partial segments of 64
    float32 without atomics; in ``max`` mode it adds into its output alone."""
    script(tmp_path, BAGS)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py", mode)
    assert done.returncode == 0, done.stderr
    kept = json.loads(done.stdout.splitlines()[0])
    expected = (
        "a16000 a16000 a16000 a1 f1 f16000 a256000 a16000 a8 a16000 a1279 f1279 f16000 a8000 "
        "a8000 a1279 f1279 a8 a9600 a307200 f307200 f9600 f8 f8000 f8000 f8 f16000 f16000 f16000"
        if mode == "sum"
        else "a256000"
    )
    assert kept[: len(expected.split())] == expected.split()
