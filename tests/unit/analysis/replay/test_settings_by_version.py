"""Allocator settings read as the PyTorch release that wrote the dump reads them.

Expected values are PyTorch's own parser rules (c10/cuda/CUDAAllocatorConfig.cpp,
c10/core/AllocatorConfig.cpp) per release, as memforensics.allocator._conf cites them.
"""

from __future__ import annotations

from typing import Any

import pytest

from memforensics.allocator import (
    AllocatorSettings,
    SettingsError,
    from_snapshot,
    parse_conf,
    read_snapshot_settings,
    rules_for,
)
from memforensics.analysis import replay_dump, summarize
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.oom import recorded_settings
from memforensics.analysis.replay import replay_text
from memforensics.analysis.schema import to_json
from memforensics.backends.sim import SimDevice, SimOutOfMemoryError

MiB = 1 << 20
NEWEST = "2.13.0+cu128"

ACCEPTED: list[tuple[str, str | None, str, Any]] = [
    ("max_split_size_mb:20", NEWEST, "max_split_size", 20 * MiB),
    ("max_split_size_mb:20", "2.9.0", "max_split_size", 20 * MiB),
    ("max_split_size_mb:20", None, "max_split_size", 20 * MiB),
    ("max_split_size_mb:21", "2.8.0", "max_split_size", 21 * MiB),
    ("max_non_split_rounding_mb:20", NEWEST, "max_non_split_rounding_size", 20 * MiB),
    ("max_non_split_rounding_mb:21", "2.6.0", "max_non_split_rounding_size", 21 * MiB),
    ("large_segment_size_mb:11", NEWEST, "large_segment_size", 11 * MiB),
    ("large_segment_size_mb:11", "2.11.0", "max_non_split_rounding_size", 11 * MiB),
    ("large_segment_size_mb:40,max_split_size_mb:40", NEWEST, "max_split_size", 40 * MiB),
    ("per_process_memory_fraction:0.5", NEWEST, "memory_fraction", 0.5),
    ("per_process_memory_fraction:0", NEWEST, "memory_fraction", 0.0),
    ("throw_on_cudamalloc_oom:True", NEWEST, "max_split_size", AllocatorSettings().max_split_size),
    ("pinned_free_catch_all:True", NEWEST, "expandable_segments", False),
    ("expandable_segments:True,pinned_free_catch_all:False", NEWEST, "expandable_segments", True),
]

REFUSED: list[tuple[str, str | None]] = [
    ("max_split_size_mb:20", "2.8.0"),
    ("max_non_split_rounding_mb:20", "2.8.0"),
    ("max_split_size_mb:19", NEWEST),
    ("large_segment_size_mb:10", NEWEST),
    ("large_segment_size_mb:1", None),
    ("large_segment_size_mb:30", "2.10.0"),
    ("large_segment_size_mb:40,max_split_size_mb:30", NEWEST),
    ("max_non_split_rounding_mb:30,large_segment_size_mb:40", NEWEST),
    ("per_process_memory_fraction:1.5", NEWEST),
    ("nonsense:1", NEWEST),
]


@pytest.mark.parametrize(("conf", "version", "field", "expected"), ACCEPTED)
def test_each_key_is_accepted_as_that_release_accepts_it(
    conf: str, version: str | None, field: str, expected: Any
) -> None:
    """A value the release's parser takes is kept, with the value it sets."""
    settings = parse_conf(conf, rules_for(version))
    assert getattr(settings, field) == expected


@pytest.mark.parametrize(("conf", "version"), REFUSED)
def test_each_key_is_refused_as_that_release_refuses_it(conf: str, version: str | None) -> None:
    """A value the release's parser refuses raises, as PyTorch refuses to start."""
    with pytest.raises(SettingsError):
        parse_conf(conf, rules_for(version))


@pytest.mark.parametrize(
    ("version", "at_64_mib"), [("2.8.0", 2), ("2.9.1", 2), ("2.10.0", 8), (NEWEST, 8), (None, 8)]
)
def test_the_greater_than_interval_starts_where_the_release_starts_it(
    version: str | None, at_64_mib: int
) -> None:
    """``>`` overwrites the last named interval up to 2.9 and starts after it from 2.10."""
    settings = parse_conf("roundup_power2_divisions:[64:8,>:2]", rules_for(version))
    assert settings.divisions(64 * MiB) == at_64_mib
    assert settings.divisions(32 * MiB) == 8
    assert settings.divisions(128 * MiB) == 2


def test_an_unknown_key_keeps_every_known_setting_and_is_reported() -> None:
    """One key the model does not know never resets the others to their defaults."""
    raw = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,future_key:[1:2],"
           "max_split_size_mb:64,max_split_size_mb_typo:3"}  # fmt: skip
    settings = from_snapshot(raw, rules_for(NEWEST))
    assert settings is not None
    assert settings.expandable_segments
    assert settings.max_split_size == 64 * MiB
    read = read_snapshot_settings(raw)
    assert read is not None
    assert read.unknown == ("future_key", "max_split_size_mb_typo")
    assert any("future_key" in note for note in read.notes())


def _dump(conf: str, torch_version: str | None) -> Any:
    device = SimDevice(64 * MiB)
    device.record_memory_history("all", max_entries=1_000)
    device.empty(4 * MiB).free()
    snapshot = device.snapshot()
    snapshot["allocator_settings"] = {"PYTORCH_CUDA_ALLOC_CONF": conf}
    sidecar = {"schema": 2, "kind": "window", "torch_version": torch_version}
    return dump_from_snapshot(snapshot, sidecar=sidecar)


def test_the_sidecar_torch_version_decides_how_the_dump_is_read() -> None:
    """The same conf string reads by the rules of the torch the sidecar names."""
    conf = "roundup_power2_divisions:[64:8,>:2]"
    assert recorded_settings(_dump(conf, "2.9.0")).divisions(64 * MiB) == 2
    assert recorded_settings(_dump(conf, "2.13.0")).divisions(64 * MiB) == 8


def test_replay_and_summary_report_the_keys_the_model_set_aside() -> None:
    """Unknown recorded keys appear in replay's text and JSON and in the summary's warnings."""
    dump = _dump("expandable_segments:True,future_key:7", "2.13.0")
    result = replay_dump(dump)
    assert recorded_settings(dump).expandable_segments
    document = to_json(result)
    assert document["settings_rules"] == "torch 2.13"
    assert any("'future_key'" in note for note in document["settings_notes"])
    assert "future_key" in replay_text(result)
    assert any("'future_key'" in warning for warning in summarize(dump).warnings)


def test_a_conf_fraction_is_the_limit_the_replay_runs_under() -> None:
    """per_process_memory_fraction in the conf limits the replay when the OOM's limit is the
    whole device: the recorded OOM is reproduced."""
    total = 64 * MiB
    device = SimDevice(total, settings="per_process_memory_fraction:0.5")
    device.record_memory_history("all", max_entries=1_000)
    held = [device.empty(10 * MiB) for _ in range(3)]
    with pytest.raises(SimOutOfMemoryError):
        device.empty(10 * MiB)
    snapshot = device.snapshot()
    oom = next(e for e in reversed(snapshot["device_traces"][0]) if e["action"] == "oom")
    sidecar = {"schema": 2, "kind": "oom", "torch_version": NEWEST, "oom": {
        "requested_bytes": oom["size"], "allocation_bytes": None,
        "device_total_bytes": total, "device_free_bytes": oom["device_free"]}}  # fmt: skip
    result = replay_dump(dump_from_snapshot(snapshot, sidecar=sidecar))
    assert result.oom_reproduced is True, result.refusals
    assert len(held) == 3
