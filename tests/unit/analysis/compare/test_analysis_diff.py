"""diff: growth per site between two windows, and leak suspects from step metadata."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memforensics.analysis import Dump, diff_dumps, load_dump
from memforensics.analysis.compare import DiffSide, device_diffs_text, diff_side
from memforensics.analysis.compare.diff import kinds_change
from memforensics.analysis.compare.text import diff_text
from memforensics.analysis.dump import PREDICTED, dump_from_snapshot
from memforensics.analysis.schema import from_json, to_json
from memforensics.testing import (
    CACHE,
    Block,
    MiB,
    SnapshotBuilder,
    context_pair,
    growth_pair,
    make_sidecar,
    write_dump,
)
from shared_data import needs_shared_data, real_snapshots


def test_growth_and_leak_suspects(tmp_path: Path) -> None:
    """The KV cache grows by 96 x 16 MiB; its 92 blocks from steps 8..99 are the suspects; its
    rows say it is a KV cache (its file says so)."""
    before, after = growth_pair()
    result = diff_dumps(
        load_dump(before.write(tmp_path / "steps4-7" / "rank0_pid1.pickle")),
        load_dump(after.write(tmp_path / "steps100-103" / "rank0_pid1.pickle")),
    )
    data = to_json(result)
    assert data["total_delta_bytes"] == after.truth.allocated_bytes - before.truth.allocated_bytes
    assert data["growth"] == [
        {
            "site": str(CACHE),
            "before_bytes": MiB(64),
            "after_bytes": MiB(1600),
            "delta_bytes": MiB(1536),
            "caller": str(CACHE),
            "kind": "kv_cache",
        }
    ]
    assert data["after_window"] == [100, 103]
    [suspect] = result.leak_suspects
    assert suspect.site == str(CACHE)
    assert suspect.blocks == 92
    assert suspect.steps == tuple(range(8, 100))
    assert suspect.bytes == 92 * MiB(16)
    assert suspect.kind == "kv_cache"


def test_window_from_trace_without_sidecar() -> None:
    """Without a sidecar, AFTER's window starts at the oldest step its history recorded."""
    before, after = growth_pair()
    result = diff_dumps(dump_from_snapshot(before.snapshot), dump_from_snapshot(after.snapshot))
    assert result.after_window == (0, 103)  # the builder records every block, from step 0
    assert result.leak_suspects == ()


def test_shrinking_site_has_negative_delta() -> None:
    """A site that shrank is listed with a negative delta, and the total change is negative."""
    before, after = growth_pair()
    result = diff_dumps(dump_from_snapshot(after.snapshot), dump_from_snapshot(before.snapshot))
    assert [g.delta_bytes for g in result.growth] == [-MiB(1536)]
    assert result.total_delta_bytes == -MiB(1536)


def _agreeing(before: Dump, after: Dump) -> tuple[int, int, int]:
    """diff's total, the sum of its site changes and the sum of its kind changes."""
    result = diff_dumps(before, after)
    kinds = kinds_change(diff_side(before), diff_side(after))
    return (
        result.total_delta_bytes,
        sum(row.delta_bytes for row in result.growth),
        sum(row.delta_bytes for row in kinds),
    )


def test_kinds_sites_and_total_agree_when_requests_are_not_block_sizes() -> None:
    """Block bytes everywhere: the kinds' change, the sites' change and the total are one
    figure, the builder's own change of allocated bytes."""
    old, new = SnapshotBuilder(), SnapshotBuilder()
    old.segment(Block(1024, requested=1000, step=1), Block(MiB(2) - 1024, state="inactive"))
    new.segment(Block(1024, requested=1000, step=1), Block(MiB(2) - 1024, state="inactive"))
    new.segment(Block(MiB(3), requested=MiB(2) + 7, step=5), Block(MiB(1), requested=4097))
    change = new.truth().allocated_bytes - old.truth().allocated_bytes
    before, after = dump_from_snapshot(old.build()), dump_from_snapshot(new.build())
    assert _agreeing(before, after) == (change, change, change)


@needs_shared_data
def test_kinds_sites_and_total_agree_on_real_snapshots() -> None:
    """Between two real snapshots, diff's kinds, sites and total agree to the byte."""
    first, *_, last = real_snapshots()
    before, after = load_dump(first), load_dump(last)
    total, sites, kinds = _agreeing(before, after)
    assert total == sites == kinds


_BLOCKS = st.lists(
    st.builds(
        lambda size, slack, state: Block(
            size * 512, requested=max(size * 512 - slack, 1), state=state
        ),
        st.integers(1, 20_000),
        st.integers(0, 511),
        st.sampled_from(["active_allocated", "active_pending_free", "inactive"]),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_BLOCKS, min_size=1, max_size=3), st.lists(_BLOCKS, min_size=1, max_size=3))
def test_kinds_sites_and_total_agree_on_any_pair(
    old: list[list[Block]], new: list[list[Block]]
) -> None:
    """For any two dumps the builder can make, the three figures of diff are one."""
    builders = [SnapshotBuilder(), SnapshotBuilder()]
    for builder, segments in zip(builders, (old, new), strict=True):
        for blocks in segments:
            builder.segment(*blocks)
    change = builders[1].truth().allocated_bytes - builders[0].truth().allocated_bytes
    dumps = [dump_from_snapshot(builder.build()) for builder in builders]
    assert _agreeing(*dumps) == (change, change, change)


def test_context_pair_compares_the_peaks_first() -> None:
    """One model at context 100 and 200: diff leads with the peak's growth (446 MiB of
    activations, reserved with them), not the 168 KiB by which the final states differ."""
    before, after = context_pair()
    result = diff_dumps(dump_from_snapshot(before.snapshot), dump_from_snapshot(after.snapshot))
    assert result.total_delta_bytes == 168 * 1024
    peaks = result.peaks
    assert peaks is not None
    assert peaks.traced
    assert (peaks.before_live_bytes, peaks.after_live_bytes) == (
        MiB(256) + MiB(138) + 1024,
        MiB(256) + MiB(584) + 1024 + 168 * 1024,
    )
    assert peaks.reserved_delta_bytes == MiB(446)
    assert (peaks.before_segments, peaks.after_segments) == (3, 3)
    assert [(g.site, g.delta_bytes) for g in peaks.growth] == [
        ("/job/model.py:71 attention", MiB(446)),
        ("/job/model.py:30 position_ids", 168 * 1024),
    ]
    assert sum(k.delta_bytes for k in peaks.kinds) == peaks.delta_bytes
    first = device_diffs_text(result).splitlines()[0]
    assert first.startswith("What grew most: the peak, +446.16 MiB live")
    assert "attention" in first
    assert "the final states differ by +168.00 KiB" in first
    data = to_json(result)
    assert data["peaks"]["after_reserved_bytes"] == after.truth.reserved_bytes
    assert data["after_reserved_bytes"] == after.truth.reserved_bytes


def test_a_side_without_trace_compares_only_its_peak_figures() -> None:
    """A dump without history has its snapshot for a peak: the peaks' figures are compared,
    their sites are not, and the text says why."""
    before, after = context_pair()
    untraced = dump_from_snapshot(before.snapshot)
    untraced = replace(untraced, trace=[])
    result = diff_dumps(untraced, dump_from_snapshot(after.snapshot))
    assert result.peaks is not None
    assert not result.peaks.before_traced
    assert result.peaks.after_traced
    assert result.peaks.before_live_bytes == before.truth.allocated_bytes
    assert result.peaks.growth == ()
    assert "BEFORE has no allocator trace" in device_diffs_text(result)


def test_a_predicted_side_says_it_is_predicted(tmp_path: Path) -> None:
    """A dump ``memforensics plan`` wrote is named predicted on its side, in text and JSON, and
    its side keeps that through the cache's JSON."""
    before, after = growth_pair()
    predicted = {"device_total_bytes": 80 << 30, "capability": "9.0", "context_bytes": 0}
    old = write_dump(tmp_path / "b.pickle", before.snapshot, sidecar=make_sidecar("window"))
    new = write_dump(
        tmp_path / "a.pickle", after.snapshot, sidecar=make_sidecar("window", predicted=predicted)
    )
    side = diff_side(load_dump(new))
    assert from_json(DiffSide, to_json(side)).predicted is True
    result = diff_dumps(load_dump(old), load_dump(new))
    assert (result.before_predicted, result.after_predicted) == (False, True)
    named = [line for line in diff_text(result).splitlines() if str(tmp_path) in line]
    before_line, after_line = named
    assert PREDICTED not in before_line
    assert PREDICTED in after_line
