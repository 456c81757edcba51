"""The replay's baseline is the recorded run: a release of the whole cache is replayed in every
run, the baseline is checked against the recorded reserved peak (or says where and why it
diverges), a row claims no OOM only against a known device size, and only a reproduced
baseline is trusted."""

from __future__ import annotations

import random
from typing import Any

import pytest

from memforensics._units import format_bytes
from memforensics.analysis.dump import Dump, dump_from_snapshot, load_dump
from memforensics.analysis.oom import AllocatorState, LiveBlock, SegmentState
from memforensics.analysis.replay import replay_dump, replay_text
from memforensics.analysis.replay.recorded import cache_releases, decode
from memforensics.analysis.schema import to_json
from memforensics.backends.sim import SimDevice, SimOutOfMemoryError
from shared_data import REAL_SNAPSHOTS, REAL_WORKLOADS, needs_shared_data

MiB = 1 << 20
GROWS = ("segment_alloc", "segment_map")
REAL = REAL_SNAPSHOTS
ELSEWHERE = 0x1000_0000_0000  # real GPUs put segments far from where the model starts


def _at(snapshot: dict[str, Any], offset: int) -> dict[str, Any]:
    """The same snapshot recorded at other device addresses (as a real GPU would place it)."""
    for segment in snapshot["segments"]:
        segment["address"] += offset
        for block in segment["blocks"]:
            block["address"] += offset
    for trace in snapshot["device_traces"]:
        for entry in trace:
            if entry.get("action") != "oom" and isinstance(entry.get("addr"), int):
                entry["addr"] += offset
    return snapshot


def _churn_near_full(*, empty_cache: bool = False) -> Dump:
    """Four blocks live in their own segments when recording starts; then rounds of 50-138 MiB
    requests on a 1.25 GiB device: cudaMalloc fails and the allocator releases its whole cache
    and retries (or the program empties it after each round); no OOM."""
    rng = random.Random(7)
    device = SimDevice(1280 * MiB)
    _kept = [device.empty(12 * MiB) for _ in range(4)]
    device.record_memory_history("all", max_entries=100_000)
    held: list[Any] = []
    for _ in range(40):
        size = rng.choice([50, 70, 90, 110, 130]) * MiB
        held += [device.empty(size + rng.randrange(0, 8) * MiB) for _ in range(4)]
        rng.shuffle(held)
        while len(held) > 2:
            held.pop().free()
        if empty_cache:
            device.empty_cache()
    return dump_from_snapshot(_at(device.snapshot(), ELSEWHERE))


def _recorded_peak(dump: Dump, stop: int | None = None) -> int:
    """The recorded reserved peak, read from the raw trace: the final segments with every
    segment event undone, then redone in order."""
    events = [
        entry
        for position, entry in enumerate(dump.trace)
        if type(entry) is dict
        and entry.get("action") in ("segment_alloc", "segment_free", "segment_map", "segment_unmap")
        and (stop is None or position <= stop)
    ]
    every = [e for e in dump.trace if type(e) is dict and str(e.get("action")).startswith("seg")]
    final = sum(segment.total_size for segment in dump.segments)
    net = sum(e["size"] if e["action"] in GROWS else -e["size"] for e in every)
    reserved = peak = final - net
    for entry in events:
        reserved += entry["size"] if entry["action"] in GROWS else -entry["size"]
        peak = max(peak, reserved)
    return peak


@pytest.mark.parametrize("empty_cache", [False, True], ids=["retry", "empty_cache"])
def test_a_release_of_the_whole_cache_is_replayed_in_every_run(empty_cache: bool) -> None:
    """Where the recording released every cached segment (a retry after a failed cudaMalloc,
    or empty_cache()), the baseline does too: it reaches the recorded peak, and a setting's
    change is its peak less the recorded one."""
    dump = _churn_near_full(empty_cache=empty_cache)
    result = replay_dump(dump)
    check = result.baseline_check
    assert check is not None
    assert check.cache_releases >= 1
    assert check.recorded_peak_reserved_bytes == _recorded_peak(dump)
    assert check.baseline_peak_reserved_bytes == check.recorded_peak_reserved_bytes
    assert check.reproduced
    assert check.why is None
    assert result.trusted, result.refusals
    recorded = check.recorded_peak_reserved_bytes
    for row in result.what_if[2:]:
        if row.change_bytes is not None:
            assert row.change_bytes == row.peak_reserved_bytes - recorded
    assert "baseline     reproduces the recorded run" in replay_text(result)


def _state(*segments: tuple[int, int, int]) -> AllocatorState:
    """Segments ``(address, size, 1 if a block is live at its start)``, none expandable."""
    made = [
        SegmentState(address, size, 0, False, False, [LiveBlock(address, MiB, MiB, False, 0)])
        if live
        else SegmentState(address, size, 0, False, False)
        for address, size, live in segments
    ]
    return AllocatorState(tuple(made), (), 0)


def test_only_a_release_of_every_cached_segment_counts_as_the_whole_cache() -> None:
    """Releasing one of two cached segments (garbage collection, a split limit) is the
    allocator's own choice, not release_cached_blocks; releasing both, with a block freed
    before, is; a segment holding a block is never among those it must release."""
    start = _state(
        (0x1000_0000, 20 * MiB, 0), (0x2000_0000, 20 * MiB, 0), (0x3000_0000, 2 * MiB, 1)
    )
    partial = [
        {"action": "segment_free", "addr": 0x1000_0000, "size": 20 * MiB},
        {"action": "segment_alloc", "addr": 0x4000_0000, "size": 60 * MiB},
        {"action": "alloc", "addr": 0x4000_0000, "size": 60 * MiB},
    ]
    assert cache_releases(decode(partial), start) == frozenset()
    whole = [
        {"action": "free_requested", "addr": 0x3000_0000, "size": MiB},
        {"action": "free_completed", "addr": 0x3000_0000, "size": MiB},
        {"action": "segment_free", "addr": 0x1000_0000, "size": 20 * MiB},
        {"action": "segment_free", "addr": 0x2000_0000, "size": 20 * MiB},
        {"action": "segment_free", "addr": 0x3000_0000, "size": 2 * MiB},
        {"action": "segment_alloc", "addr": 0x4000_0000, "size": 60 * MiB},
        {"action": "alloc", "addr": 0x4000_0000, "size": 60 * MiB},
    ]
    assert cache_releases(decode(whole), start) == frozenset({6})
    held = [  # the 2 MiB segment still holds its block: releasing the other two is all of it
        {"action": "segment_free", "addr": 0x1000_0000, "size": 20 * MiB},
        {"action": "segment_free", "addr": 0x2000_0000, "size": 20 * MiB},
        {"action": "alloc", "addr": 0x4000_0000, "size": 60 * MiB},
    ]
    assert cache_releases(decode(held), start) == frozenset({2})


def _holes_at_start() -> Dump:
    """Recording starts with 195 blocks live around holes and 13 segments cached; then large
    requests come and go: blocks placed afresh close the holes, so no baseline can place
    them as the lost history did."""
    rng = random.Random(3)
    device = SimDevice(4096 * MiB)
    live = [device.empty(rng.choice([MiB // 2, 3 * MiB, 7 * MiB, 12 * MiB])) for _ in range(260)]
    for tensor in live[::4]:
        tensor.free()
    device.record_memory_history("all", max_entries=100_000)
    for _ in range(6):
        big = [device.empty(rng.choice([40 * MiB, 90 * MiB])) for _ in range(8)]
        for tensor in big:
            tensor.free()
        device.empty_cache()
    return dump_from_snapshot(device.snapshot())


def test_a_baseline_that_diverges_says_where_and_why_and_is_not_trusted() -> None:
    """A baseline below the recorded peak names both peaks, where the runs first part and
    why (the live blocks placed afresh, the cached segments dropped); the rows still show,
    but the result is not trusted and avoids nothing."""
    result = replay_dump(_holes_at_start())
    check = result.baseline_check
    assert check is not None
    assert not check.reproduced
    assert check.baseline_peak_reserved_bytes < check.recorded_peak_reserved_bytes
    assert check.diverged_at is not None
    assert check.why is not None
    assert "195 blocks live when recording began are placed afresh" in check.why
    assert "cached in 13 unused segments" in check.why
    assert not result.refusals
    assert len(result.what_if) > 2
    assert not result.trusted
    text = replay_text(result)
    assert "baseline     DIVERGES from the recorded run" in text
    assert "none is trusted" in text
    assert "avoided by" not in text


def test_without_a_device_size_no_row_says_no_oom() -> None:
    """Nothing records the device's size: no row says the OOM is avoided; the column reads
    '?', the JSON null, and each row keeps the peak it reached."""
    result = replay_dump(_churn_near_full())
    assert not result.device_known
    assert all(row.oom is None for row in result.what_if if not row.no_effect)
    assert all(row.peak_reserved_bytes > 0 for row in result.what_if if not row.no_effect)
    assert next(row["oom"] for row in to_json(result)["what_if"]) is None
    text = replay_text(result)
    assert "nothing records the device's size" in text
    assert " no  " not in text


def test_against_a_known_device_a_row_says_whether_the_oom_happens() -> None:
    """At a recorded OOM the device's size is known: the baseline row says yes, and a row
    that fits says no."""
    device = SimDevice(256 * MiB)
    device.record_memory_history("all", max_entries=10_000)
    kept = []
    for index in range(200):
        try:
            tensor = device.empty((3 + index % 5) * MiB)
        except SimOutOfMemoryError:
            break
        if index % 3:
            tensor.free()
        else:
            kept.append(tensor)
    else:
        pytest.fail("the device never ran out")
    result = replay_dump(dump_from_snapshot(device.snapshot()))
    assert result.device_known
    assert result.what_if[0].oom is True
    assert all(row.oom in (True, False) for row in result.what_if if not row.no_effect)


REAL_TRUTH = {
    # file: (the baseline reaches the recorded reserved peak to the byte, with as many segment
    # events as the recording)
    "cuda-transformer-forward.pickle": (True, True),
    "cuda-mha-lm-inference-from-empty.pickle": (True, True),
    "cuda-train-step-after-kept-warmup-graph.pickle": (True, False),  # 679 against 678
    "cuda-expandable-segments-forward.pickle": (True, False),  # pages mapped afresh
    "cuda-cnn-stacks-all.pickle": (True, False),  # 8 against 7
    "cuda-ring-buffer-10000.pickle": (True, False),  # 4 against 0
    "cuda-compiled-attention-sweep.pickle": (False, False),  # 21.04 GiB cached from earlier
}


def _recorded_segment_events(dump: Dump, stop: int | None = None) -> int:
    """The recorded segment events up to ``stop``, counted in the raw trace."""
    return sum(
        1
        for position, entry in enumerate(dump.trace)
        if type(entry) is dict
        and entry.get("action") in ("segment_alloc", "segment_free", "segment_map", "segment_unmap")
        and (stop is None or position <= stop)
    )


@needs_shared_data
@pytest.mark.parametrize("name", sorted(REAL_TRUTH))
def test_on_real_snapshots_the_baseline_matches_the_recording_or_names_why(name: str) -> None:
    """On real GPU runs the recorded peak and segment events are the raw trace's; the baseline
    reproduces both, or reaches the peak to the byte (trusted) and names why its segment
    events differ, or (a process that kept 21 GiB cached from earlier runs) names the cache it
    drops and is not trusted."""
    dump = load_dump(REAL / name)
    result = replay_dump(dump)
    check = result.baseline_check
    assert check is not None
    stop = result.what_if[1].first_failure_index if len(result.what_if) > 1 else None
    assert check.recorded_peak_reserved_bytes == _recorded_peak(dump, stop)
    assert check.recorded_segment_events == _recorded_segment_events(dump, stop)
    peak, events = REAL_TRUTH[name]
    assert check.peak_reproduced is peak
    assert check.reproduced is (peak and events)
    assert result.trusted is peak
    text = replay_text(result)
    if check.reproduced:
        assert check.why is None
        assert "baseline     reproduces the recorded run" in text
        return
    assert check.why is not None
    assert "reproduces" not in text
    if peak:
        assert "placed afresh" in check.why
        assert "reaches the recorded peak reserved to the byte" in text
    else:
        assert "21.04 GiB cached in 10 unused segments" in check.why


@needs_shared_data
def test_a_baseline_near_the_recorded_peak_states_its_gap_and_is_not_trusted() -> None:
    """The real small LM's forward and backward: the baseline peaks 88 MiB (0.65%) below the
    recorded 13.21 GiB, within 1%, with 185 segment events where the recording made none. That
    is no reproduction: the line states the gap in bytes and share, why (the 10.96 GiB cached
    when recording began, dropped), and the result is not trusted."""
    dump = load_dump(REAL_WORKLOADS / "small-lm-forward-backward" / "snapshot.pickle")
    result = replay_dump(dump)
    check = result.baseline_check
    assert check is not None
    recorded = _recorded_peak(dump)
    assert check.recorded_peak_reserved_bytes == recorded
    assert 0 < recorded - check.baseline_peak_reserved_bytes <= recorded // 100
    assert (check.recorded_segment_events, check.baseline_segment_events) == (0, 185)
    assert not check.reproduced
    assert not check.peak_reproduced
    assert not result.trusted
    assert check.why is not None
    assert "cached in 170 unused segments" in check.why
    text = replay_text(result)
    assert "reproduces" not in text
    gap = recorded - check.baseline_peak_reserved_bytes
    assert f"({format_bytes(gap)} less, {gap / recorded:.2%})" in text
