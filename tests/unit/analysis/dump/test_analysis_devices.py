"""Several devices in one dump: each is counted, the right one is read, none is silently dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from memforensics import SnapshotLoadError
from memforensics.analysis import load_dump, summarize
from memforensics.analysis.compare import diff_by_device
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.schema import to_json
from memforensics.testing import Block as B
from memforensics.testing import (
    GiB,
    MiB,
    SnapshotBuilder,
    several_devices,
    write_dump,
    wrong_sidecar_device,
)

_FIGURES = ("reserved_bytes", "allocated_bytes", "free_in_reserved_bytes", "segments", "blocks")


def test_every_device_is_listed_with_its_memory() -> None:
    """``devices`` lists all three devices with the reserved and allocated bytes put there."""
    multi = several_devices()
    dump = dump_from_snapshot(multi.snapshot, sidecar=multi.sidecar)
    assert [item.device for item in dump.devices] == [0, 1, 2]
    for item in dump.devices:
        truth = multi.truths[item.device]
        assert item.reserved_bytes == truth.reserved_bytes
        assert item.allocated_bytes == truth.allocated_bytes
        assert item.segments == truth.segments
        assert item.oom is (item.device == multi.oom_device)


def test_the_oom_device_is_read_even_when_the_sidecar_says_0() -> None:
    """The trace's OOM decides the device over a schema-1 sidecar's 0, and a warning says so."""
    multi = several_devices(oom_device=1, sidecar_device=0)
    dump = dump_from_snapshot(multi.snapshot, sidecar=multi.sidecar)
    summary = summarize(dump)
    assert summary.device_index == 1
    for key in _FIGURES:
        assert to_json(summary)[key] == getattr(multi.truths[1], key), key
    assert summary.verdict.name == multi.truths[1].verdict == "exhausted"
    assert any("sidecar says device 0" in warning for warning in dump.warnings)
    assert dump.device_views() == (dump,)


def test_schema_2_sidecar_disagreement_is_not_blamed_on_install() -> None:
    """A schema-2 sidecar's device is the observer's: the warning still says it disagrees,
    without the schema-1 explanation."""
    multi = several_devices(oom_device=1, sidecar_device=2)
    sidecar = dict(multi.sidecar or {}, schema=2)
    dump = dump_from_snapshot(multi.snapshot, sidecar=sidecar)
    assert dump.device == 1
    assert len(dump.warnings) == 1
    assert "sidecar says device 2" in dump.warnings[0]
    assert "install()" not in dump.warnings[0]


def test_a_sidecar_that_agrees_gives_no_warning() -> None:
    """When the sidecar names the OOM's device there is nothing to warn about."""
    multi = several_devices(oom_device=2, sidecar_device=2)
    dump = dump_from_snapshot(multi.snapshot, sidecar=multi.sidecar)
    assert dump.device == 2
    assert dump.warnings == ()


def test_wrong_sidecar_index_does_not_lose_history(tmp_path: Path) -> None:
    """A sidecar saying device 0 for a rank on device 3 still reads its 43 events."""
    case = wrong_sidecar_device(device=3, events=43)
    path = write_dump(tmp_path / "oom" / "rank3_pid9.pickle", case.snapshot, sidecar=case.sidecar)
    dump = load_dump(path)
    summary = summarize(dump)
    assert dump.device == 3
    assert [(item.device, item.oom) for item in dump.devices] == [(3, True)]
    assert summary.trace_entries == 43
    assert summary.oom is not None
    assert summary.oom.requested_bytes == MiB(512)
    assert summary.reserved_bytes == case.truths[3].reserved_bytes
    assert any("sidecar says device 0" in w and "device 3" in w for w in dump.warnings)


def test_without_an_oom_each_device_with_memory_is_a_view() -> None:
    """No OOM and no device named: one view per device with memory, each with its own truth."""
    multi = several_devices(oom_device=None, sidecar_device=None)
    views = dump_from_snapshot(multi.snapshot).device_views()
    assert [view.device for view in views] == [0, 1, 2]
    for view in views:
        data = to_json(summarize(view))
        for key in _FIGURES:
            assert data[key] == getattr(multi.truths[view.device], key), (view.device, key)


def test_on_device_reads_that_device_and_refuses_others() -> None:
    """``on_device(2)`` gives device 2's figures; a device the dump lacks is one clear error."""
    multi = several_devices()
    dump = dump_from_snapshot(multi.snapshot, sidecar=multi.sidecar)
    other = dump.on_device(2)
    assert summarize(other).allocated_bytes == multi.truths[2].allocated_bytes
    assert other.trace == multi.snapshot["device_traces"][2]
    assert other.warnings == ()
    with pytest.raises(
        SnapshotLoadError, match=r"no device 5 in this dump \(devices held: 0, 1, 2\)"
    ):
        dump.on_device(5)


def test_no_oom_and_no_sidecar_reads_the_biggest_device() -> None:
    """With nothing else to go on, the default device is the one with most reserved memory."""
    multi = several_devices(oom_device=None, sidecar_device=None)
    dump = dump_from_snapshot(multi.snapshot)
    assert dump.device == 1
    assert dump.device_reason == "the device with the most reserved memory"


def test_diff_compares_device_to_device() -> None:
    """Two 3-device dumps: each device is compared with itself, the growth lands on device 2."""
    before = several_devices(oom_device=None, sidecar_device=None)
    grown = several_devices(oom_device=None, sidecar_device=None)
    extra = SnapshotBuilder(device=2, base_address=0x7E00_0000_0000)
    extra.segment(B(MiB(256)))
    grown.snapshot["segments"] += extra.build()["segments"]
    result = diff_by_device(dump_from_snapshot(before.snapshot), dump_from_snapshot(grown.snapshot))
    pairs = (result, *result.other_devices)
    deltas = {pair.after_device_index: pair.total_delta_bytes for pair in pairs}
    assert deltas == {0: 0, 1: 0, 2: MiB(256)}
    assert all(pair.before_device_index == pair.after_device_index for pair in pairs)
    assert result.unmatched_devices == ()


def test_diff_names_devices_only_one_side_has() -> None:
    """A device present in AFTER only is named, not dropped; --device picks one pair."""
    before = SnapshotBuilder(device=0)
    before.segment(B(GiB(1)))
    multi = several_devices(oom_device=None, sidecar_device=None)
    result = diff_by_device(dump_from_snapshot(before.build()), dump_from_snapshot(multi.snapshot))
    assert (result.after_device_index, result.other_devices) == (0, ())
    assert result.unmatched_devices == ("device 1 only in AFTER", "device 2 only in AFTER")
    only = diff_by_device(
        dump_from_snapshot(multi.snapshot), dump_from_snapshot(multi.snapshot), device=1
    )
    assert (only.before_device_index, only.after_device_index, only.other_devices) == (1, 1, ())


def test_single_device_dumps_compare_across_indexes() -> None:
    """A rank on cuda:3 before and cuda:5 after: the two single-device dumps are compared."""
    left, right = SnapshotBuilder(device=3), SnapshotBuilder(device=5)
    left.segment(B(MiB(64)))
    right.segment(B(MiB(96)))
    result = diff_by_device(dump_from_snapshot(left.build()), dump_from_snapshot(right.build()))
    assert (result.before_device_index, result.after_device_index) == (3, 5)
    assert (result.total_delta_bytes, result.other_devices) == (MiB(32), ())


def test_the_latest_oom_wins_when_two_devices_failed() -> None:
    """Two devices with an OOM in their traces: the later one (by time_us) is the dump's OOM."""
    early = SnapshotBuilder(device=0, start_time_us=1_000_000)
    late = SnapshotBuilder(device=1, start_time_us=9_000_000, base_address=0x7E00_0000_0000)
    for builder, size in ((early, MiB(64)), (late, MiB(96))):
        builder.segment(B(size))
        builder.oom(requested=size, device_free=0)
    snapshot = {
        "segments": early.build()["segments"] + late.build()["segments"],
        "device_traces": [early.build()["device_traces"][0], late.build()["device_traces"][1]],
    }
    dump = dump_from_snapshot(snapshot, sidecar={"device_index": 0, "kind": "oom"})
    assert dump.device == 1
    assert summarize(dump).oom is not None
    assert summarize(dump).reserved_bytes == MiB(96)
