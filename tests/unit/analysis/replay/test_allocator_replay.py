"""The allocator model and its replay: the sim's dumps replay exactly; what-ifs match the sim."""

from __future__ import annotations

import json
import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from sim_workloads import drive

from memforensics.allocator import (
    AllocatorSettings,
    SettingsError,
    parse_conf,
    roundup_power2_next_division,
    segment_blocks,
)
from memforensics.analysis import list_dumps, replay_dump, summarize
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.oom import state_before
from memforensics.analysis.replay import replay_text
from memforensics.analysis.replay.runner import Device, run
from memforensics.analysis.schema import to_json
from memforensics.backends.sim import SimDevice, SimOutOfMemoryError, SimTensor

MiB = 1 << 20
CONFS = [
    "",
    "expandable_segments:True",
    "max_split_size_mb:24",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:[1:2,8:4,>:8]",
    "garbage_collection_threshold:0.6",
    "max_split_size_mb:32,max_non_split_rounding_mb:40",
]
SIZES = st.one_of(
    st.integers(1, 4096),
    st.integers(4097, MiB),
    st.integers(MiB + 1, 12 * MiB),
    st.sampled_from([2 * MiB, 10 * MiB, 20 * MiB, 24 * MiB + 7]),
)
OPS = st.lists(
    st.tuples(st.sampled_from(["alloc", "alloc", "alloc", "free", "empty", "stream"]), SIZES,
              st.integers(0, 1), st.integers(0, 10_000)),
    min_size=5,
    max_size=60,
)  # fmt: skip


Layout = list[tuple[int, int, list[tuple[int, int, bool]]]]


def _layout(heads: list[Any]) -> Layout:
    return [
        (head.address, sum(b.size for b in segment_blocks(head)),
         [(b.address, b.size, b.allocated) for b in segment_blocks(head)])
        for head in heads
    ]  # fmt: skip


def _snapshot_layout(snapshot: dict[str, Any]) -> Layout:
    return [
        (s["address"], s["total_size"],
         [(b["address"], b["size"], b["state"] == "active_allocated") for b in s["blocks"]])
        for s in snapshot["segments"]
    ]  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conf=st.sampled_from(CONFS), ops=OPS, fraction=st.booleans())
def test_replay_of_sim_dumps_reproduces_every_segment_event(
    conf: str, ops: list[tuple[str, int, int, int]], fraction: bool
) -> None:
    """Random workloads, random settings: the replay makes exactly the sim's segment events."""
    device = SimDevice(96 * MiB, settings=conf)
    if fraction:
        device.set_per_process_memory_fraction(0.75)
    device.record_memory_history("all", max_entries=100_000)
    drive(device, ops)
    snapshot = device.snapshot()
    dump = dump_from_snapshot(snapshot)
    recorded = parse_conf(conf)
    start = state_before(dump, 0, recorded)
    assert start.problem_count == 0
    assert not start.segments
    allowed = int(0.75 * 96 * MiB) if fraction else None

    result = run(dump, recorded, start, Device(96 * MiB, allowed, 96 * MiB), exact=True,
                 stop_at_oom=False)  # fmt: skip
    assert result.fidelity in (None, 1.0), result.mismatches
    assert result.allocs_placed_same == result.allocs_checked
    assert result.model is not None
    assert _layout(result.model.segment_heads()) == _snapshot_layout(snapshot)


def _fragmenting(device: SimDevice) -> None:
    """A long-lived tensor splits a big cached segment; the larger request after it cannot fit."""
    device.empty(30 * MiB).free()
    kept = device.empty(10 * MiB)
    device.empty(24 * MiB)
    kept.free()


def _run_sim(conf: str, workload: Any, total: int) -> tuple[SimDevice, bool]:
    device = SimDevice(total, settings=conf)
    device.record_memory_history("all", max_entries=10_000)
    try:
        workload(device)
    except SimOutOfMemoryError:
        return device, True
    return device, False


def _oom_dump(device: SimDevice, total: int) -> Any:
    snapshot = device.snapshot()
    trace = snapshot["device_traces"][0]
    oom = next(e for e in reversed(trace) if e["action"] == "oom")
    sidecar = {"schema": 2, "kind": "oom", "oom": {
        "requested_bytes": oom["size"], "allocation_bytes": None,
        "device_total_bytes": total, "device_free_bytes": oom["device_free"]}}  # fmt: skip
    return dump_from_snapshot(snapshot, sidecar=sidecar)


def test_what_if_predicts_the_sim_under_the_other_setting() -> None:
    """Fragmentation OOM under defaults: each what-if row predicts what the sim does under it."""
    total = 48 * MiB
    device, failed = _run_sim("", _fragmenting, total)
    assert failed
    result = replay_dump(_oom_dump(device, total))
    assert result.trusted, result.refusals
    assert result.oom_reproduced is True
    rows = {row.name: row.oom for row in result.what_if}
    for name, predicted in rows.items():
        conf = "" if name == "as recorded" else name.replace("=", ":").replace(", ", ",")
        _device, actual = _run_sim(conf, _fragmenting, total)
        assert predicted == actual, name
    assert "expandable_segments=True" in result.avoided_by
    assert summarize(_oom_dump(device, total)).verdict.name == "fragmentation"


def _exhausting(device: SimDevice) -> None:
    """Every block stays alive: no placement can help."""
    held = [device.empty(10 * MiB) for _ in range(5)]
    held.append(device.empty(30 * MiB))


def test_exhaustion_is_proven_and_no_setting_avoids_it() -> None:
    """Live bytes beyond the limit: proven exhausted, and every what-if row OOMs."""
    total = 64 * MiB
    device, failed = _run_sim("", _exhausting, total)
    assert failed
    dump = _oom_dump(device, total)
    result = replay_dump(dump)
    assert result.lower_bound is not None
    assert result.lower_bound.proven
    assert result.lower_bound.margin_bytes == 50 * MiB + 30 * MiB - total
    assert all(row.oom for row in result.what_if)
    assert result.avoided_by == ()
    verdict = summarize(dump).verdict
    assert (verdict.name, verdict.reason) == ("exhausted", "proven")


def test_window_dump_is_judged_at_the_oom_not_at_its_end() -> None:
    """Frees after the OOM leave the verdict alone: the state at the oom entry is rebuilt."""
    total = 48 * MiB
    device = SimDevice(total)
    device.record_memory_history("all", max_entries=10_000)
    taken: list[dict[str, Any]] = []
    device.attach_out_of_memory_observer(lambda *args: taken.append(device.snapshot()))
    device.empty(30 * MiB).free()
    kept = device.empty(10 * MiB)
    with pytest.raises(SimOutOfMemoryError):
        device.empty(24 * MiB)
    kept.free()
    device.empty_cache()  # after the OOM everything is freed: the final state has no holes
    at_oom = summarize(dump_from_snapshot(taken[0], sidecar={"schema": 2, "kind": "oom"}))
    window = dump_from_snapshot(device.snapshot(), sidecar={"schema": 2, "kind": "window"})
    later = summarize(window)
    assert later.reserved_bytes == 0
    assert later.oom is not None
    assert later.oom.state == "trace"
    assert at_oom.oom is not None
    assert at_oom.oom.state == "final"
    for name in ("reserved_bytes", "allocated_bytes", "largest_free_block_bytes"):
        assert getattr(later.oom, name) == getattr(at_oom.oom, name), name
    assert later.verdict.name == at_oom.verdict.name == "fragmentation"


def test_external_memory_gets_its_own_verdict() -> None:
    """Memory outside PyTorch (limit - free - reserved) that leaves no room is called external."""
    total = 64 * MiB
    device, _failed = _run_sim("", _exhausting, total)
    snapshot = device.snapshot()
    oom = next(e for e in reversed(snapshot["device_traces"][0]) if e["action"] == "oom")
    sidecar = {"schema": 2, "kind": "oom", "oom": {
        "requested_bytes": oom["size"], "allocation_bytes": oom["size"],
        "device_total_bytes": 4 * total, "device_free_bytes": oom["device_free"]}}  # fmt: skip
    summary = summarize(dump_from_snapshot(snapshot, sidecar=sidecar))
    assert summary.verdict.name == "external"
    assert summary.oom is not None
    assert summary.oom.external_bytes == 4 * total - total


def test_settings_parse_as_pytorch_parses_them() -> None:
    """The conf string's limits are PyTorch's; the settings round-trip through to_conf."""
    conf = "max_split_size_mb:40,roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]"
    settings_ = parse_conf(conf)
    assert settings_.max_split_size == 40 * MiB
    # the expectations of PyTorch's own AllocatorConfig test for this string
    expected = {32: 8, 64: 8, 128: 2, 256: 4, 512: 2, 1024: 4, 2048: 1, 4096: 1, 8192: 1}
    assert {mb: settings_.divisions(mb * MiB) for mb in expected} == expected
    assert parse_conf(settings_.to_conf()) == settings_
    assert parse_conf("") == AllocatorSettings()
    for bad in ("max_split_size_mb:19", "expandable_segments:yes", "nonsense:1",
                "garbage_collection_threshold:1.5", "roundup_power2_divisions:3"):  # fmt: skip
        with pytest.raises(SettingsError):
            parse_conf(bad)
    assert roundup_power2_next_division(1200, 4) == 1280


def test_sim_segment_sizes_follow_get_allocation_size() -> None:
    """Segments: 2 MiB for small requests, 20 MiB for 1-10 MiB ones, else rounded to 2 MiB."""
    device = SimDevice(256 * MiB)
    _held = [device.empty(100), device.empty(3 * MiB), device.empty(21 * MiB + 1)]
    sizes = sorted(s["total_size"] for s in device.snapshot()["segments"])
    assert sizes == [2 * MiB, 20 * MiB, 22 * MiB]


@settings(max_examples=50, deadline=None)
@given(
    split=st.one_of(st.none(), st.integers(21, 4096)),
    rounding=st.one_of(st.none(), st.integers(21, 4096)),
    threshold=st.one_of(st.none(), st.sampled_from([0.25, 0.5, 0.8])),
    divisions=st.lists(st.sampled_from([0, 1, 2, 4, 8, 16]), min_size=16, max_size=16),
    expandable=st.booleans(),
)
def test_settings_round_trip_through_their_conf_string(
    split: int | None,
    rounding: int | None,
    threshold: float | None,
    divisions: list[int],
    expandable: bool,
) -> None:
    """Any settings value parses back from its own to_conf() string unchanged."""
    value = AllocatorSettings(
        max_split_size=(split or 0) * MiB or AllocatorSettings().max_split_size,
        max_non_split_rounding_size=(rounding or 20) * MiB,
        garbage_collection_threshold=threshold or 0.0,
        roundup_power2_divisions=tuple(divisions),
        expandable_segments=expandable,
    )
    assert parse_conf(value.to_conf()) == value


def test_ls_shows_memory_outside_pytorch_for_oom_dumps(tmp_path: Path) -> None:
    """ls reports limit - device free - reserved from an OOM sidecar; windows have none."""
    device = SimDevice(64 * MiB)
    snapshot = device.snapshot()
    oom_dir, window_dir = tmp_path / "oom", tmp_path / "steps0-1"
    for folder in (oom_dir, window_dir):
        folder.mkdir()
        (folder / "rank0_pid1.pickle").write_bytes(pickle.dumps(snapshot, protocol=4))
    stats = {"reserved_bytes.all.current": 40 * MiB}
    oom = {"device_total_bytes": 80 * MiB, "device_free_bytes": 10 * MiB, "allocator": stats}
    (oom_dir / "rank0_pid1.json").write_text(json.dumps({"schema": 2, "kind": "oom", "oom": oom}))
    (window_dir / "rank0_pid1.json").write_text(json.dumps({"schema": 2, "kind": "window"}))
    listing = to_json(list_dumps(tmp_path))
    external = {Path(d["path"]).parent.name: d["external_bytes"] for d in listing["dumps"]}
    assert external == {"oom": 30 * MiB, "steps0-1": None}


def test_pinners_are_the_tensors_whose_free_lets_the_request_fit() -> None:
    """Freeing the blamed tensors on the sim makes the failed request succeed; others do not;
    the text counts them in words ('this tensor', 'these 2 tensors')."""
    total = 48 * MiB

    def workload(device: SimDevice) -> tuple[list[SimTensor], list[SimTensor]]:
        big = device.empty(40 * MiB)
        big.free()
        small = [device.empty(4 * MiB) for _ in range(9)]  # carve the cached 40 MiB segment
        for tensor in small[::2]:
            tensor.free()
        return small[1::2], []

    device = SimDevice(total)
    device.record_memory_history("all", max_entries=10_000)
    kept, _ = workload(device)
    with pytest.raises(SimOutOfMemoryError):
        device.empty(12 * MiB)
    snapshot = device.snapshot()
    oom = next(e for e in reversed(snapshot["device_traces"][0]) if e["action"] == "oom")
    sidecar = {"schema": 2, "kind": "oom", "oom": {
        "requested_bytes": oom["size"], "allocation_bytes": 12 * MiB,
        "device_total_bytes": total, "device_free_bytes": oom["device_free"]}}  # fmt: skip
    result = replay_dump(dump_from_snapshot(snapshot, sidecar=sidecar))
    blamed = {pinner.address for pinner in result.pinners}
    assert 0 < len(blamed) < len(kept)
    assert all("test_allocator_replay.py" in pinner.site for pinner in result.pinners)
    for tensor in kept:
        if tensor.address in blamed:
            tensor.free()
    device.empty(12 * MiB)  # fits now, without freeing the tensors not blamed
    one = replay_text(replace(result, pinners=result.pinners[:1]))
    two = replay_text(replace(result, pinners=result.pinners[:1] * 2))
    assert "freeing this tensor (" in one
    assert "freeing these 2 tensors (" in two
    assert "tensor(s)" not in one + two


def test_lint_flags_settings_that_cannot_work() -> None:
    """Flagged: a GC threshold without a fraction, max_split_size_mb with expandable segments."""
    total = 48 * MiB
    device, failed = _run_sim("garbage_collection_threshold:0.5", _exhausting, 64 * MiB)
    assert failed
    findings = replay_dump(_oom_dump(device, 64 * MiB)).lint
    assert any("no memory fraction" in finding for finding in findings)
    device, _failed = _run_sim("expandable_segments:True,max_split_size_mb:64", _fragmenting, total)
    findings = replay_dump(dump_from_snapshot(device.snapshot())).lint
    assert any("123548" in finding for finding in findings)
    device, _failed = _run_sim("", _fragmenting, total)
    assert replay_dump(_oom_dump(device, total)).lint == ()


def test_contradicting_history_makes_the_state_at_the_oom_unknown() -> None:
    """A trace that does not fit its snapshot is not judged: unknown, and no what-if."""
    total = 48 * MiB
    device, failed = _run_sim("", _fragmenting, total)
    assert failed
    device.empty_cache()
    snapshot = device.snapshot()
    trace = snapshot["device_traces"][0]
    trace.append(dict(trace[-1], action="alloc", addr=12345 * 512, size=512))  # never live
    dump = dump_from_snapshot(snapshot, sidecar={"schema": 2, "kind": "window"})
    verdict = summarize(dump).verdict
    assert (verdict.name, verdict.reason) == ("unknown", "state at the OOM unknown")
    result = replay_dump(dump)
    assert not result.trusted
    assert len(result.what_if) <= 1


def _until_first_oom(device: SimDevice, ops: list[tuple[str, int, int, int]]) -> int | None:
    """Run ``ops`` on one stream; the index of the first op that ran out of memory, else None."""
    live: list[SimTensor] = []
    for index, (op, size, _stream, pick) in enumerate(ops):
        if op == "alloc":
            try:
                live.append(device.empty(size))
            except SimOutOfMemoryError:
                return index
        elif op == "free" and live:
            live.pop(pick % len(live)).free()
        elif op == "empty":
            device.empty_cache()
    return None


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conf=st.sampled_from(CONFS), ops=OPS)
def test_every_what_if_row_is_what_the_sim_does_under_it(
    conf: str, ops: list[tuple[str, int, int, int]]
) -> None:
    """Random workloads that OOM: each row's outcome is the sim's under that row's settings."""
    total = 24 * MiB
    device = SimDevice(total, settings=conf)
    device.record_memory_history("all", max_entries=100_000)
    taken: list[dict[str, Any]] = []
    device.attach_out_of_memory_observer(lambda *args: taken.append(device.snapshot()))
    failed_at = _until_first_oom(device, ops)
    assume(failed_at is not None)
    assert failed_at is not None
    assume(any(op == "alloc" for op, *_rest in ops[:failed_at]))  # a placement to self-check
    oom = next(e for e in reversed(taken[0]["device_traces"][0]) if e["action"] == "oom")
    sidecar = {"schema": 2, "kind": "oom", "oom": {
        "requested_bytes": oom["size"], "allocation_bytes": None,
        "device_total_bytes": total, "device_free_bytes": oom["device_free"]}}  # fmt: skip
    result = replay_dump(dump_from_snapshot(taken[0], sidecar=sidecar))
    assert result.trusted, result.refusals
    for row in result.what_if:
        sim = SimDevice(total, settings=row.conf)
        if row.requires:
            sim.set_per_process_memory_fraction(1.0)  # the row assumes a fraction at the limit
        outcome = _until_first_oom(sim, ops[: failed_at + 1])
        assert row.oom == (outcome is not None), row.name


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conf=st.sampled_from(CONFS), ops=OPS, cut=st.floats(0.1, 0.9))
def test_window_dumps_replay_exactly_from_their_reconstructed_start(
    conf: str, ops: list[tuple[str, int, int, int]], cut: float
) -> None:
    """History cleared mid-run (a step window): replay from the rebuilt start matches the sim."""
    device = SimDevice(96 * MiB, settings=conf)
    device.record_memory_history("all", max_entries=100_000)
    split = int(len(ops) * cut)
    held: list[SimTensor] = []  # tensors live across the cut: live blocks at the window start
    drive(device, ops[:split], held)
    device.record_memory_history("all", max_entries=100_000, clear_history=True)
    drive(device, ops[split:], held)
    snapshot = device.snapshot()
    dump = dump_from_snapshot(snapshot)
    recorded = parse_conf(conf)
    start = state_before(dump, 0, recorded)
    assert start.problem_count == 0
    result = run(dump, recorded, start, Device(96 * MiB, None, 96 * MiB), exact=True,
                 stop_at_oom=False)  # fmt: skip
    assert result.fidelity in (None, 1.0), result.mismatches
    assert result.allocs_placed_same == result.allocs_checked
    assert result.model is not None
    assert _layout(result.model.segment_heads()) == _snapshot_layout(snapshot)
