"""The what-if table shows its baseline, measures each setting against it, says which settings
cannot act on the dump, reads free memory at the allocated peak, and refuses to stand on a
self-check that checked nothing."""

from __future__ import annotations

import random
from typing import Any

import pytest

from memforensics.analysis import replay_dump
from memforensics.analysis.dump import Dump, dump_from_snapshot
from memforensics.analysis.replay import replay_text
from memforensics.analysis.schema import to_json
from memforensics.backends.sim import SimDevice, SimOutOfMemoryError

MiB = 1 << 20
BASELINE = "recorded settings, live blocks placed afresh"


def _segment_churn() -> Dump:
    """Recording starts with 195 blocks live; then large requests come and go, and the cache
    is emptied after each round: segments are made and released over and over."""
    rng = random.Random(3)
    device = SimDevice(4096 * MiB)
    live = [device.empty(rng.choice([MiB // 2, 3 * MiB, 7 * MiB, 12 * MiB])) for _ in range(260)]
    for tensor in live[::4]:  # holes between the 195 kept
        tensor.free()
    device.record_memory_history("all", max_entries=100_000)
    for _ in range(6):
        big = [device.empty(rng.choice([40 * MiB, 90 * MiB])) for _ in range(8)]
        for tensor in big:
            tensor.free()
        device.empty_cache()
    return dump_from_snapshot(device.snapshot())


def test_a_trace_starting_with_live_blocks_shows_its_baseline_row() -> None:
    """The second row is the recorded settings with the live blocks placed afresh, and every
    setting's change is its peak reserved minus that row's, not the recorded run's."""
    result = replay_dump(_segment_churn())
    assert not result.refusals, result.refusals
    assert result.baseline_check is not None
    assert not result.trusted  # placed afresh, the live blocks miss the recorded peak
    assert result.live_at_start_blocks == 195
    names = [row.name for row in result.what_if]
    assert names[:2] == ["as recorded", BASELINE]
    assert result.baseline == BASELINE
    baseline = result.what_if[1]
    assert baseline.change_bytes is None
    for row in result.what_if[2:]:
        assert row.change_bytes == row.peak_reserved_bytes - baseline.peak_reserved_bytes
    text = replay_text(result)
    assert f"  {BASELINE}" in text
    assert "(the baseline)" in text
    assert to_json(result)["baseline"] == BASELINE


def test_a_setting_that_cannot_act_says_no_effect_and_why() -> None:
    """Without a memory fraction the GC threshold, and above every block a split limit, read
    'no effect on this dump (why)' instead of a figure."""
    result = replay_dump(_segment_churn())
    rows = {row.name: row for row in result.what_if}
    gc = rows["garbage_collection_threshold=0.8"]
    assert gc.no_effect is not None
    assert "memory fraction" in gc.no_effect
    big = rows["max_split_size_mb=1024"]
    assert big.no_effect is not None
    assert "max_split_size" in big.no_effect
    assert rows["expandable_segments=True"].no_effect is None
    lines = replay_text(result).splitlines()
    gc_line = next(line for line in lines if line.startswith("  garbage_collection_threshold"))
    assert "no effect on this dump (garbage collection acts only under a memory fraction" in gc_line
    assert "GiB" not in gc_line
    assert "MiB" not in gc_line


def test_free_at_peak_is_read_at_the_allocated_peak() -> None:
    """Reserved stays flat from the start; the free figure is the one when allocated bytes
    peaked (10 MiB), not the start's (100 MiB), and the table says it in words."""
    device = SimDevice(256 * MiB)
    device.empty(100 * MiB).free()  # a cached 100 MiB segment before recording
    device.record_memory_history("all", max_entries=10_000)
    small = device.empty(20 * MiB)
    small.free()
    device.empty(90 * MiB).free()
    result = replay_dump(dump_from_snapshot(device.snapshot()))
    recorded = result.what_if[0]
    assert recorded.peak_reserved_bytes == 100 * MiB
    assert recorded.fragmentation_at_peak_bytes == 10 * MiB
    text = replay_text(result)
    assert "frag@peak" not in text
    assert "free at peak: free inside reserved when allocated bytes peaked" in text


def _only_an_oom() -> dict[str, Any]:
    """The first request of the recording fails: the trace holds one ``oom`` entry."""
    device = SimDevice(24 * MiB)
    device.record_memory_history("all", max_entries=10_000)
    taken: list[dict[str, Any]] = []
    device.attach_out_of_memory_observer(lambda *args: taken.append(device.snapshot()))
    with pytest.raises(SimOutOfMemoryError):
        device.empty(64 * MiB)
    return taken[0]


def test_a_self_check_that_checked_nothing_refuses_the_table() -> None:
    """No placement and no segment event to compare: refused as a failed self-check, never
    trusted with a full table."""
    snapshot = _only_an_oom()
    oom = next(e for e in snapshot["device_traces"][0] if e["action"] == "oom")
    sidecar = {"schema": 2, "kind": "oom", "oom": {
        "requested_bytes": oom["size"], "allocation_bytes": None,
        "device_total_bytes": 24 * MiB, "device_free_bytes": oom["device_free"]}}  # fmt: skip
    result = replay_dump(dump_from_snapshot(snapshot, sidecar=sidecar))
    assert not result.trusted
    assert any("verified nothing" in refusal for refusal in result.refusals)
    assert len(result.what_if) == 1
    text = replay_text(result)
    assert "n/a" not in text
    assert "(0/0)" not in text
    assert "no segment allocated or released to compare; no block placement to compare" in text


def test_one_pinner_reads_as_one_tensor() -> None:
    """One tensor pinning the hole reads 'freeing this tensor', never 'these 1 tensor(s)'."""
    device = SimDevice(48 * MiB)
    device.record_memory_history("all", max_entries=10_000)
    device.empty(30 * MiB).free()
    kept = device.empty(10 * MiB)
    with pytest.raises(SimOutOfMemoryError):
        device.empty(24 * MiB)
    snapshot = device.snapshot()
    del kept
    oom = next(e for e in reversed(snapshot["device_traces"][0]) if e["action"] == "oom")
    sidecar = {"schema": 2, "kind": "oom", "oom": {
        "requested_bytes": oom["size"], "allocation_bytes": None,
        "device_total_bytes": 48 * MiB, "device_free_bytes": oom["device_free"]}}  # fmt: skip
    result = replay_dump(dump_from_snapshot(snapshot, sidecar=sidecar))
    assert len(result.pinners) == 1
    text = replay_text(result)
    assert "freeing this tensor (10.00 MiB) lets the request fit:" in text
    assert "tensor(s)" not in text


def test_a_one_event_trace_is_not_replayed() -> None:
    """The legacy one-entry trace: replay refuses it, and shows no what-if beyond the first row."""
    device = SimDevice(64 * MiB)
    device.record_memory_history("all", max_entries=10_000)
    device.empty(8 * MiB)
    snapshot = device.snapshot()
    trace = snapshot["device_traces"][0]
    snapshot["device_traces"][0] = [e for e in trace if e["action"] == "alloc"][-1:]
    result = replay_dump(dump_from_snapshot(snapshot))
    assert not result.trusted
    assert any("holds one event" in refusal for refusal in result.refusals)
    assert len(result.what_if) <= 1
    assert "history      1 event, " in replay_text(result)
