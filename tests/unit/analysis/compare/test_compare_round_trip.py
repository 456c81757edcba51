"""diff's and leaks' answers read back from their JSON render the same text as the answers."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest

from memforensics.analysis import load_dump
from memforensics.analysis.compare import (
    DIFF_SCHEMA,
    LEAKS_SCHEMA,
    Diff,
    Leaks,
    LeakTracker,
    device_diffs_text,
    diff_by_device,
    find_leaks,
    leaks_text,
)
from memforensics.analysis.dump import Dump, dump_from_snapshot
from memforensics.analysis.schema import document, from_json, to_json
from memforensics.testing import (
    CACHE,
    TRAIN,
    Block,
    MiB,
    SnapshotBuilder,
    context_pair,
    growth_pair,
    make_sidecar,
    several_devices,
    write_dump,
)
from shared_data import REAL_SNAPSHOTS, needs_shared_data, real_params, real_snapshots


def _through_text(value: object) -> object:
    """The value's JSON as printed text, parsed again (what the cache keeps)."""
    return json.loads(json.dumps(to_json(value)))


def _diff_round_trip(result: Diff) -> None:
    back = from_json(Diff, _through_text(result))
    for top in (15, 1, None):
        assert device_diffs_text(back, top) == device_diffs_text(result, top)
    assert next(iter(document(result, DIFF_SCHEMA))) == "schema"


def _leaks_round_trip(result: Leaks) -> None:
    back = from_json(Leaks, _through_text(result))
    for top in (10, 1, None):
        assert leaks_text(back, top) == leaks_text(result, top)
    assert next(iter(document(result, LEAKS_SCHEMA))) == "schema"


def test_diff_of_a_growth_pair_round_trips(tmp_path: Path) -> None:
    """Two windows with growth and leak suspects: the diff reads back from its JSON, both ways."""
    before, after = growth_pair()
    old = load_dump(before.write(tmp_path / "steps4-7" / "rank0_pid1.pickle"))
    new = load_dump(after.write(tmp_path / "steps100-103" / "rank0_pid1.pickle"))
    for pair in ((old, new), (new, old)):
        result = diff_by_device(*pair)
        assert result.growth
        assert result.kinds
        _diff_round_trip(result)
    assert diff_by_device(old, new).leak_suspects


def test_diff_of_peaks_round_trips() -> None:
    """Two dumps whose peaks differ, one without a trace too: the peaks read back from JSON."""
    before, after = context_pair()
    old, new = dump_from_snapshot(before.snapshot), dump_from_snapshot(after.snapshot)
    result = diff_by_device(old, new)
    assert result.peaks is not None
    assert result.peaks.growth
    _diff_round_trip(result)
    untraced = diff_by_device(replace(old, trace=[]), new)
    assert untraced.peaks is not None
    assert not untraced.peaks.traced
    _diff_round_trip(untraced)


def test_diff_of_several_devices_round_trips() -> None:
    """Device pairs and devices one side lacks read back, in order, with their own figures."""
    multi = several_devices(oom_device=None, sidecar_device=None)
    grown = several_devices(oom_device=None, sidecar_device=None)
    extra = SnapshotBuilder(device=2, base_address=0x7E00_0000_0000)
    extra.segment(Block(MiB(256)))
    grown.snapshot["segments"] += extra.build()["segments"]
    single = SnapshotBuilder(device=0)
    single.segment(Block(MiB(64)))
    pairs = diff_by_device(dump_from_snapshot(multi.snapshot), dump_from_snapshot(grown.snapshot))
    assert len(pairs.other_devices) == 2
    _diff_round_trip(pairs)
    lone = diff_by_device(dump_from_snapshot(single.build()), dump_from_snapshot(multi.snapshot))
    assert lone.unmatched_devices
    _diff_round_trip(lone)


@pytest.mark.parametrize(
    ("before", "after"),
    real_params(itertools.product(real_snapshots(), repeat=2), width=2),
    ids=lambda path: path.stem,
)
def test_diff_of_real_snapshots_round_trips(before: Path, after: Path) -> None:
    """Any two real PyTorch snapshots (a file with itself too): the diff reads back the same."""
    _diff_round_trip(diff_by_device(load_dump(before), load_dump(after)))


def _window_run(root: Path) -> Path:
    """Three windows of rank 0 where the cache keeps one block a step, and a broken window."""
    for first in (0, 4, 8):
        builder = SnapshotBuilder()
        builder.segment(Block(MiB(64), site=TRAIN, step=0))
        builder.segment(*(Block(MiB(2), site=CACHE, step=s) for s in range(first + 4)))
        steps = [first, first + 3]
        folder = root / f"steps{first}-{first + 3}"
        write_dump(folder / "rank0_pid1.pickle", builder.build(), sidecar=make_sidecar(steps=steps))
    broken = root / "steps12-15" / "rank0_pid1.pickle"
    write_dump(broken, {}, sidecar=make_sidecar(steps=[12, 15]))
    broken.write_bytes(b"not a pickle")
    return root


def test_leaks_of_a_window_run_round_trips(tmp_path: Path) -> None:
    """A run with a suspect and an unreadable window: leaks reads back from its JSON."""
    result = find_leaks(_window_run(tmp_path / "run"))
    assert result.suspects
    assert result.unreadable
    _leaks_round_trip(result)


def test_leaks_without_windows_round_trips(tmp_path: Path) -> None:
    """A folder without window dumps: the empty answer reads back and says so the same way."""
    _leaks_round_trip(Leaks(root=str(tmp_path), windows=(), trends=()))


def _as_window(dump: Dump, step: int, rank: int | None) -> Dump:
    return replace(dump, meta=replace(dump.meta, kind="window", steps=(step, step), rank=rank))


@needs_shared_data
def test_leaks_of_real_snapshots_round_trips() -> None:
    """The real snapshots taken as windows of two ranks: every site's trend reads back."""
    tracker = LeakTracker()
    for step, path in enumerate(real_snapshots()):
        dump = load_dump(path)
        for rank in (0, None):
            assert tracker.add(_as_window(dump, step, rank))
    result = tracker.result(str(REAL_SNAPSHOTS))
    assert len(result.windows) == 2
    _leaks_round_trip(result)
