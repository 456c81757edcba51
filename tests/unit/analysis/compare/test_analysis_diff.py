"""diff: growth per site between two windows, and leak suspects from step metadata."""

from __future__ import annotations

from pathlib import Path

from memforensics.analysis import diff_dumps, dump_from_snapshot, load_dump
from memforensics.testing import CACHE, MiB, growth_pair


def test_growth_and_leak_suspects(tmp_path: Path) -> None:
    """The KV cache grows by 96 x 16 MiB; its 92 blocks from steps 8..99 are the suspects."""
    before, after = growth_pair()
    result = diff_dumps(
        load_dump(before.write(tmp_path / "steps4-7" / "rank0_pid1.pickle")),
        load_dump(after.write(tmp_path / "steps100-103" / "rank0_pid1.pickle")),
    )
    data = result.to_dict()
    assert data["total_delta_bytes"] == after.truth.allocated_bytes - before.truth.allocated_bytes
    assert data["growth"] == [
        {
            "site": str(CACHE),
            "caller": str(CACHE),
            "before_bytes": MiB(64),
            "after_bytes": MiB(1600),
            "delta_bytes": MiB(1536),
        }
    ]
    assert data["after_window"] == [100, 103]
    [suspect] = result.leak_suspects
    assert suspect.site == str(CACHE)
    assert suspect.blocks == 92
    assert suspect.steps == tuple(range(8, 100))
    assert suspect.bytes == 92 * MiB(16)


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
