"""Random request sequences for the caching allocator model, as the hypothesis tests drive it:
requests of small and large sizes on two streams, frees, cross-stream uses and ``empty_cache``."""

from __future__ import annotations

from hypothesis import strategies as st

from memforensics.allocator import Block, DeviceCachingAllocator

MiB = 1 << 20
Op = tuple[str, int, int, int]
"""``(what, size, stream, pick)``: ``pick`` chooses which live block a free or a use takes."""

OPS = st.lists(
    st.tuples(st.sampled_from(["alloc", "alloc", "free", "stream", "empty"]),
              st.one_of(st.integers(1, MiB), st.integers(MiB + 1, 40 * MiB)),
              st.integers(0, 1), st.integers(0, 10_000)),
    max_size=80,
)  # fmt: skip


def apply(model: DeviceCachingAllocator, op: Op, live: list[Block]) -> Block | None:
    """``op`` done on ``model``, ``live`` kept as the blocks still allocated; the block a
    request got (None for any other op, or a request the model could not serve)."""
    what, size, stream, pick = op
    if what == "alloc":
        block = model.malloc(size, stream)
        if block is not None:
            live.append(block)
        return block
    if what == "free" and live:
        model.free(live.pop(pick % len(live)))
    elif what == "stream" and live:
        model.record_stream(live[pick % len(live)], 1 - stream)
    elif what == "empty":
        model.empty_cache()
    return None
