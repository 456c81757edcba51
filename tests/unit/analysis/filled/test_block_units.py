"""One unit for live bytes: kinds, the peak and the tree count blocks, as ``allocated`` does."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memforensics.analysis import load_dump, summarize
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.filled import what_filled
from memforensics.analysis.filled.lifetime import lifetimes
from memforensics.analysis.report import ReportBuilder
from memforensics.analysis.schema import to_json
from memforensics.analysis.summary import summary_text
from memforensics.testing import Block, MiB, SnapshotBuilder
from shared_data import real_params, real_snapshots

PENDING, FREE = "active_pending_free", "inactive"


def _rounded_dump() -> SnapshotBuilder:
    """Requests that are not block sizes: odd bytes, a remainder left unsplit, a pending free."""
    builder = SnapshotBuilder()
    builder.segment(
        Block(1024, requested=1000, step=1),
        Block(MiB(3), requested=MiB(2) + 7, step=1),  # handed a 3 MiB block, not split
        Block(MiB(4), requested=MiB(4) - 1, state=PENDING, step=1),
        Block(1536, requested=1100, state=FREE, step=1),
        Block(MiB(9), state=FREE),
    )
    builder.segment(Block(MiB(20), requested=MiB(20) - 300, step=2))
    return builder


def test_kinds_sum_to_allocated_block_bytes() -> None:
    """Kinds add up to the snapshot's allocated bytes (block sizes, pending frees excluded),
    not to the callers' requests."""
    builder = _rounded_dump()
    truth = builder.truth()
    summary = summarize(dump_from_snapshot(builder.build()))
    assert summary.filled is not None
    assert sum(kind.bytes for kind in summary.filled.kinds) == truth.allocated_bytes
    assert summary.allocated_bytes == truth.allocated_bytes
    assert truth.allocated_requested_bytes < truth.allocated_bytes < truth.active_bytes


def test_kinds_report_requested_bytes_beside_block_bytes() -> None:
    """``--json``'s kinds give what the callers asked for beside the block bytes."""
    builder = _rounded_dump()
    data = to_json(summarize(dump_from_snapshot(builder.build())))
    assert sum(k["requested_bytes"] for k in data["kinds"]) == (
        builder.truth().allocated_requested_bytes
    )
    assert data["kinds_total"] == "allocated_bytes"
    text = summary_text(summarize(dump_from_snapshot(builder.build())), verbose=True)
    assert "live memory by kind, adding up to allocated" in text


def test_peak_is_never_below_the_snapshots_allocated_bytes() -> None:
    """The trace ends on the snapshot, so the peak is at least what is allocated there, even
    when every request is smaller than its block."""
    builder = SnapshotBuilder()
    builder.segment(
        Block(MiB(3), requested=MiB(2) + 7),
        Block(1024, requested=1000),
        Block(MiB(20), requested=MiB(20) - 300),
    )
    truth = builder.truth()
    filled = what_filled(dump_from_snapshot(builder.build()))
    assert filled.peak.live_bytes == truth.allocated_bytes
    assert filled.peak.live_requested_bytes == truth.allocated_requested_bytes
    assert filled.peak.live_bytes == sum(kind.bytes for kind in filled.peak.kinds)


def test_live_by_step_pairs_blocks_with_their_requests() -> None:
    """A live block's step comes from the ``alloc`` that asked for its requested size, so
    live bytes per step find every step although no request is a block size."""
    builder = _rounded_dump()
    summary = summarize(dump_from_snapshot(builder.build()))
    steps = {row.step: row.bytes for row in summary.live_by_step}
    assert steps == {step: size for step, size in builder.truth().step_bytes.items()}


def test_a_freed_request_counts_at_its_rounded_block() -> None:
    """A request of 1,100 B freed during the trace counted 1,536 B while it lived (the block
    the builder gave it); a pending free counted its snapshot block until its free was
    requested, and not after."""
    builder = SnapshotBuilder()
    builder.segment(Block(1536, requested=1100, state=FREE), Block(MiB(2) - 1536, state=FREE))
    found = lifetimes(dump_from_snapshot(builder.build()))
    [freed] = [a for a in found.allocations if a.requested == 1100]
    assert freed.size == 1536
    pending = SnapshotBuilder()
    pending.segment(Block(MiB(3), requested=MiB(2) + 7, state=PENDING))
    data = to_json(summarize(dump_from_snapshot(pending.build())))
    assert data["kinds"] == []
    assert data["peak"]["live_bytes"] == MiB(3)  # its block, from the snapshot


_BLOCK = st.builds(
    lambda size, slack, state, step: Block(
        size * 512, requested=max(size * 512 - slack, 1), state=state, step=step
    ),
    st.integers(1, 40_000),
    st.integers(0, 511),
    st.sampled_from(["active_allocated", PENDING, FREE]),
    st.one_of(st.none(), st.integers(0, 5)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(_BLOCK, min_size=1, max_size=6), min_size=1, max_size=5))
def test_block_units_hold_on_any_synthetic_dump(segments: list[list[Block]]) -> None:
    """On any dump the builder can make: kinds sum to allocated, the peak covers it."""
    builder = SnapshotBuilder()
    for blocks in segments:
        builder.segment(*blocks)
    truth = builder.truth()
    summary = summarize(dump_from_snapshot(builder.build()))
    assert summary.filled is not None
    assert sum(kind.bytes for kind in summary.filled.kinds) == truth.allocated_bytes
    assert summary.filled.peak.live_bytes >= truth.allocated_bytes


@pytest.mark.parametrize("path", real_params(real_snapshots()), ids=lambda path: path.stem)
def test_block_units_hold_on_real_snapshots(path: Path) -> None:
    """On each real snapshot: kinds sum to allocated; the peak is at least allocated."""
    summary = summarize(load_dump(path))
    assert summary.filled is not None
    assert sum(kind.bytes for kind in summary.filled.kinds) == summary.allocated_bytes
    assert summary.filled.peak.live_bytes >= summary.allocated_bytes
    assert summary.filled.peak.tree.bytes == summary.filled.peak.live_bytes


def test_sites_report_requested_bytes_beside_block_bytes() -> None:
    """``--json``'s top sites give block bytes and, beside them, what the site asked for."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(3), requested=MiB(2) + 7), Block(1024, requested=1000))
    [site] = to_json(summarize(dump_from_snapshot(builder.build())))["top_sites"]
    assert (site["bytes"], site["requested_bytes"]) == (MiB(3) + 1024, MiB(2) + 1007)


def test_an_alloc_whose_free_went_unrecorded_is_not_live_at_the_snapshot() -> None:
    """History switched off between an ``alloc`` and its free: the block is gone from the
    snapshot, so it is not in the kinds, which still add up to allocated."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(4)), Block(MiB(60), state=FREE))
    snapshot = builder.build()
    trace = snapshot["device_traces"][0]
    ghost = dict(trace[-1], action="alloc", addr=trace[-1]["addr"] + MiB(8), size=MiB(8))
    trace.insert(1, ghost)  # allocated, then freed while nothing was recorded
    summary = summarize(dump_from_snapshot(snapshot))
    assert summary.filled is not None
    assert sum(kind.bytes for kind in summary.filled.kinds) == builder.truth().allocated_bytes
    assert summary.filled.peak.live_bytes >= summary.allocated_bytes


def test_report_says_what_the_kinds_add_up_to() -> None:
    """The report's kinds table says it counts block bytes that add up to allocated."""
    builder = _rounded_dump()
    report = ReportBuilder()
    report.add(dump_from_snapshot(builder.build()))
    assert "block bytes, adding up to allocated at the snapshot" in report.html()
