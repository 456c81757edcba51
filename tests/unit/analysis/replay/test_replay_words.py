"""The words of ``replay``: a dump without history says one coherent thing, and what-if rows
keep their full setting names."""

from __future__ import annotations

from pathlib import Path

import pytest

from memforensics.analysis import load_dump, replay_dump
from memforensics.analysis.dump import PREDICTED, dump_from_snapshot
from memforensics.analysis.replay import replay_text
from memforensics.analysis.schema import to_json
from memforensics.backends.sim import SimDevice, SimOutOfMemoryError
from memforensics.testing import (
    TRAIN,
    Block,
    MiB,
    SnapshotBuilder,
    fragmented,
    make_sidecar,
    write_dump,
)
from shared_data import REAL_SNAPSHOTS, needs_shared_data

REAL = REAL_SNAPSHOTS / "cuda-llm-at-oom-no-history.pickle"


def _no_history() -> dict[str, object]:
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(8), site=TRAIN), Block(MiB(4), site=TRAIN))
    snapshot = builder.build()
    snapshot["device_traces"] = [[]]
    return snapshot


def test_no_history_says_no_recording_started() -> None:
    """Without history, replay never says 'recording started with N live blocks'."""
    result = replay_dump(dump_from_snapshot(_no_history()))
    text = replay_text(result)
    assert "recording started" not in text
    assert "history      stacks recorded, no trace; the snapshot alone holds 2 live blocks" in text
    assert to_json(result)["history"] is False


def test_no_history_says_the_self_check_did_not_run() -> None:
    """Without history the self-check line says it did not run, not '0/0 reproduced'."""
    text = replay_text(replay_dump(dump_from_snapshot(_no_history())))
    assert "self-check   not run: no allocator events to replay" in text
    assert "0/0" not in text


@needs_shared_data
def test_real_no_history_dump_says_one_thing() -> None:
    """The real torch 2.0 OOM dump keeps stacks per block but no trace: it says so, and no
    what-if for that reason (never 'record_memory_history was off')."""
    text = replay_text(replay_dump(load_dump(REAL)))
    assert "recording started" not in text
    assert "stacks recorded, no trace" in text
    assert "no trace of allocator events" in text
    assert "record_memory_history was off" not in text


def test_what_if_names_are_never_cut() -> None:
    """Every what-if row shows its whole setting name, the longest combination included."""
    device = SimDevice(MiB(48))
    device.record_memory_history("all", max_entries=10_000)
    device.empty(MiB(30)).free()
    kept = device.empty(MiB(10))
    with pytest.raises(SimOutOfMemoryError):
        device.empty(MiB(24))
    kept.free()
    result = replay_dump(dump_from_snapshot(device.snapshot()))
    names = [row.name for row in result.what_if]
    assert "expandable_segments=True, roundup_power2_divisions=4" in names
    lines = replay_text(result).splitlines()
    for name in names:
        assert any(line.startswith(f"  {name} ") for line in lines), name


def test_a_predicted_dump_says_it_is_predicted(tmp_path: Path) -> None:
    """A dump ``memforensics plan`` wrote says predicted in replay's header and JSON."""
    predicted = {"device_total_bytes": 80 << 30, "capability": "9.0", "context_bytes": 0}
    path = write_dump(
        tmp_path / "oom.pickle",
        fragmented().snapshot,
        sidecar=make_sidecar("oom", predicted=predicted),
    )
    result = replay_dump(load_dump(path))
    assert to_json(result)["predicted"] is True
    assert PREDICTED in replay_text(result).splitlines()[0]
    measured = write_dump(tmp_path / "m.pickle", fragmented().snapshot, sidecar=make_sidecar("oom"))
    assert PREDICTED not in replay_text(replay_dump(load_dump(measured)))
