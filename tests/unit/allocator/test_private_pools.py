"""Private pools in the allocator model (a CUDA graph's capture, ``use_mem_pool``): their
segments serve only allocations made into them, and go back only once unused and emptied."""

from __future__ import annotations

from memforensics.allocator import DeviceCachingAllocator, parse_conf

MiB = 1 << 20
POOL = (1, 0)


def _model() -> DeviceCachingAllocator:
    return DeviceCachingAllocator(parse_conf(""), capacity=1 << 30)


def test_a_capture_reuses_its_own_freed_blocks_and_keeps_them_from_the_device() -> None:
    """Inside a capture a freed block serves the capture's next request; after it, the same
    request outside takes a new segment, and the pool's segment stays reserved."""
    model = _model()
    model.begin_allocate_to_pool(POOL, lambda stream: stream == 7)
    scratch = model.malloc(4 * MiB, 7)
    assert scratch is not None
    address = scratch.address
    model.free(scratch)
    output = model.malloc(4 * MiB, 7)
    assert output is not None
    assert output.address == address
    model.end_allocate_to_pool(POOL)
    model.free(output)
    outside = model.malloc(4 * MiB, 7)
    assert outside is not None
    assert outside.pool is model.large_blocks
    assert model.reserved_bytes.current == 40 * MiB  # the pool's 20 MiB segment and a new one


def test_only_the_streams_the_capture_accepts_allocate_into_its_pool() -> None:
    """An allocation on another stream during a capture goes to the device's pool."""
    model = _model()
    model.begin_allocate_to_pool(POOL, lambda stream: stream == 7)
    other = model.malloc(4 * MiB, 0)
    assert other is not None
    assert other.pool is model.large_blocks
    captured = model.malloc(4 * MiB, 7)
    assert captured is not None
    assert captured.pool.owner == POOL


def test_an_unused_pool_gives_its_segments_back_when_the_cache_is_emptied() -> None:
    """While a graph uses its pool, ``empty_cache`` keeps the pool's free segments; once released,
    ``empty_cache`` returns them and the pool is gone."""
    model = _model()
    model.begin_allocate_to_pool(POOL, lambda stream: True)
    block = model.malloc(8 * MiB, 0)
    assert block is not None
    model.end_allocate_to_pool(POOL)
    model.free(block)
    model.empty_cache()
    assert model.reserved_bytes.current == 20 * MiB
    assert model.pool_use_count(POOL) == 1
    model.release_pool(POOL)
    model.empty_cache()
    assert model.reserved_bytes.current == 0
    assert model.pool_use_count(POOL) == 0


def test_a_shared_pool_stays_until_every_graph_using_it_is_gone() -> None:
    """Two captures into one pool: releasing one leaves the pool's segments reserved."""
    model = _model()
    for _ in range(2):
        model.begin_allocate_to_pool(POOL, lambda stream: True)
        model.free(model.malloc(2 * MiB, 0) or _never())
        model.end_allocate_to_pool(POOL)
    assert model.pool_use_count(POOL) == 2
    model.release_pool(POOL)
    model.empty_cache()
    assert model.reserved_bytes.current == 20 * MiB
    model.release_pool(POOL)
    model.empty_cache()
    assert model.reserved_bytes.current == 0


def _never() -> object:
    raise AssertionError("the model could not serve a small request")
