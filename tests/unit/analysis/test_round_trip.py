"""Each command's result read back from its JSON renders the same text as the result itself."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from memforensics.analysis import load_dump
from memforensics.analysis.dump import Dump, dump_from_snapshot
from memforensics.analysis.replay import Replay, replay_dump, replay_text
from memforensics.analysis.schema import document, from_json, to_json
from memforensics.analysis.summary import SCHEMA, Summary, summarize, summary_text
from memforensics.testing import (
    exhausted,
    fragmented,
    several_devices,
    unwound_oom,
    wrong_sidecar_device,
)
from memforensics.testing._historical import MultiDeviceDump
from shared_data import REAL_SNAPSHOTS, needs_shared_data, real_params, real_snapshots

SYNTHETIC = {
    "fragmented": fragmented,
    "exhausted": exhausted,
    "exhausted-no-sidecar": lambda: exhausted(with_sidecar=False),
    "unwound": unwound_oom,
}


def _synthetic(name: str, tmp_path: Path) -> Dump:
    return load_dump(SYNTHETIC[name]().write(tmp_path / "oom" / "rank0_pid1_step3.pickle"))


def _through_text(value: object) -> object:
    """The value's JSON as printed text, parsed again (what the cache keeps)."""
    return json.loads(json.dumps(to_json(value)))


def _summary_round_trip(dump: Dump, requested: int | None = None) -> None:
    views = dump.device_views()
    summaries = [summarize(view, requested=requested) for view in views]
    answer = replace(summaries[0], other_devices=tuple(summaries[1:]))
    back = from_json(Summary, _through_text(answer))
    assert summary_text(back) == summary_text(answer)
    assert next(iter(document(answer, SCHEMA))) == "schema"


def _replay_round_trip(dump: Dump) -> None:
    result = replay_dump(dump)
    back = from_json(Replay, _through_text(result))
    assert replay_text(back) == replay_text(result)


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_summary_of_a_synthetic_dump_round_trips(name: str, tmp_path: Path) -> None:
    """A synthetic dump's summary, read back from its JSON, prints the same text."""
    _summary_round_trip(_synthetic(name, tmp_path))


def test_summary_with_a_given_request_round_trips(tmp_path: Path) -> None:
    """A summary judged at a --requested size reads back with its warning and moment."""
    _summary_round_trip(_synthetic("exhausted-no-sidecar", tmp_path), requested=1 << 20)


@pytest.mark.parametrize("made", [several_devices(oom_device=None), wrong_sidecar_device()])
def test_summary_of_several_devices_round_trips(made: MultiDeviceDump) -> None:
    """A file with several devices: the other devices' summaries read back too."""
    _summary_round_trip(dump_from_snapshot(made.snapshot, sidecar=made.sidecar))


@pytest.mark.parametrize("path", real_params(real_snapshots()), ids=lambda path: path.stem)
def test_summary_of_a_real_snapshot_round_trips(path: Path) -> None:
    """A real PyTorch snapshot's summary, read back from its JSON, prints the same text."""
    _summary_round_trip(load_dump(path))


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_replay_of_a_synthetic_dump_round_trips(name: str, tmp_path: Path) -> None:
    """A synthetic dump's replay, read back from its JSON, prints the same text."""
    _replay_round_trip(_synthetic(name, tmp_path))


@pytest.mark.parametrize("path", real_params(real_snapshots()), ids=lambda path: path.stem)
def test_replay_of_a_real_snapshot_round_trips(path: Path) -> None:
    """A real PyTorch snapshot's replay, read back from its JSON, prints the same text."""
    _replay_round_trip(load_dump(path))


@needs_shared_data
def test_the_real_snapshots_are_there() -> None:
    """The round trips above ran on the real snapshots, not on an empty list."""
    assert real_snapshots(), f"no real snapshots under {REAL_SNAPSHOTS}"
