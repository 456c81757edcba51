"""The replay's passes over the trace: figures one pass notes for another equal that pass's own."""

from __future__ import annotations

import contextlib
import multiprocessing
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim_workloads import drive

from memforensics.allocator import parse_conf
from memforensics.analysis import replay_dump
from memforensics.analysis.dump import Dump, dump_from_snapshot
from memforensics.analysis.oom import state_before
from memforensics.analysis.replay.runner import Device, RunResult, run
from memforensics.analysis.schema import to_json
from memforensics.backends.sim import SimDevice, SimOutOfMemoryError, SimTensor

MiB = 1 << 20
CONFS = ["", "expandable_segments:True", "max_split_size_mb:24", "garbage_collection_threshold:0.6"]
SIZES = st.one_of(st.integers(1, MiB), st.integers(MiB + 1, 12 * MiB), st.just(20 * MiB))
OPS = st.lists(
    st.tuples(st.sampled_from(["alloc", "alloc", "free", "retry", "stream", "empty"]), SIZES,
              st.integers(0, 1), st.integers(0, 10_000)),
    min_size=3,
    max_size=50,
)  # fmt: skip
STOP_FIGURES = (
    "oom_index",
    "oom_request",
    "stopped_at",
    "events",
    "peak_reserved",
    "fragmentation_at_peak",
    "largest_free_at_oom",
)


def _figures(result: RunResult) -> dict[str, object]:
    return {name: getattr(result, name) for name in STOP_FIGURES}


def _dump(
    conf: str, before: list[tuple[str, int, int, int]], ops: list[tuple[str, int, int, int]]
) -> Dump:
    device = SimDevice(48 * MiB, settings=conf)
    live: list[SimTensor] = []
    drive(device, before, live)  # live (or cached) when recording starts
    device.record_memory_history("all", max_entries=100_000)
    drive(device, ops, live)
    return dump_from_snapshot(device.snapshot())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conf=st.sampled_from(CONFS), before=st.lists(st.tuples(st.just("alloc"), SIZES,
       st.integers(0, 1), st.integers(0, 10)), max_size=6), ops=OPS)  # fmt: skip
def test_the_self_check_notes_what_a_run_stopping_at_the_first_oom_reports(
    conf: str, before: list[tuple[str, int, int, int]], ops: list[tuple[str, int, int, int]]
) -> None:
    """The full self-check's note of its first OOM (or, with none, the run itself) gives the
    figures of a separate run that stops there, with OOMs, retries and live blocks at start."""
    dump = _dump(conf, before, ops)
    recorded = parse_conf(conf)
    start = state_before(dump, 0, recorded)
    device = Device(48 * MiB, None, 48 * MiB)
    full = run(dump, recorded, start, device, exact=True, stop_at_oom=False)
    stopped = run(dump, recorded, start, device, exact=True, stop_at_oom=True)
    assert _figures(full.at_first_stop or full) == _figures(stopped)
    assert (full.at_first_stop is None) is (stopped.stopped_at is None)


def test_a_dump_with_a_retried_oom_is_noted_at_its_first_failure() -> None:
    """A program that retries after an OOM: the note is taken at the first recorded failure,
    not the retry, and the full run goes on to the trace's end."""
    device = SimDevice(48 * MiB)
    device.record_memory_history("all", max_entries=100_000)
    held = [device.empty(20 * MiB), device.empty(20 * MiB)]
    oom_at = len(device.snapshot()["device_traces"][0])
    with contextlib.suppress(SimOutOfMemoryError):
        device.empty(30 * MiB)
    held.pop().free()
    with contextlib.suppress(SimOutOfMemoryError):
        device.empty(30 * MiB)  # fails again: the cached 20 MiB is released, 28 MiB is too little
    dump = dump_from_snapshot(device.snapshot())
    actions = [entry["action"] for entry in dump.trace]
    assert actions.count("oom") == 2
    recorded = parse_conf("")
    start = state_before(dump, 0, recorded)
    full = run(dump, recorded, start, Device(48 * MiB, None, 48 * MiB), exact=True,
               stop_at_oom=False)  # fmt: skip
    assert full.at_first_stop is not None
    assert full.at_first_stop.stopped_at == actions.index("oom") >= oom_at
    assert full.at_first_stop.oom_request == 30 * MiB
    assert full.events == len(dump.trace)


def test_rows_run_in_worker_processes_give_the_rows_run_here() -> None:
    """The what-if table from forked workers equals the one computed in this process, row for
    row and in order (the OOM as recorded, rows that avoid it, a GC row needing a fraction)."""
    total = 48 * MiB
    device = SimDevice(total)
    device.record_memory_history("all", max_entries=100_000)
    with contextlib.suppress(SimOutOfMemoryError):
        device.empty(30 * MiB).free()
        kept = device.empty(10 * MiB)
        device.empty(24 * MiB)  # the 30 MiB segment is split by the kept block: no room
        kept.free()
    snapshot = device.snapshot()
    oom = next(e for e in reversed(snapshot["device_traces"][0]) if e["action"] == "oom")
    sidecar = {"schema": 2, "kind": "oom", "oom": {
        "requested_bytes": oom["size"], "allocation_bytes": None,
        "device_total_bytes": total, "device_free_bytes": oom["device_free"]}}  # fmt: skip
    dump = dump_from_snapshot(snapshot, sidecar=sidecar)
    here = replay_dump(dump, jobs=1)
    forked = replay_dump(dump, jobs=3)
    assert here.trusted, here.refusals
    assert here.what_if[0].oom
    assert here.avoided_by
    assert any(row.requires for row in here.what_if)
    assert to_json(forked) == to_json(here)


BIG_SIZES = st.one_of(SIZES, st.integers(12 * MiB, 400 * MiB))
BIG_OPS = st.lists(
    st.tuples(st.sampled_from(["alloc", "alloc", "free", "retry", "empty"]), BIG_SIZES,
              st.integers(0, 1), st.integers(0, 10_000)),
    min_size=3,
    max_size=40,
)  # fmt: skip


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    conf=st.sampled_from(["", "max_split_size_mb:24", "garbage_collection_threshold:0.6"]),
    ops=BIG_OPS,
    oom=st.booleans(),
    fraction=st.booleans(),
)
def test_every_row_of_the_table_is_what_its_setting_alone_gives(
    conf: str, ops: list[tuple[str, int, int, int]], oom: bool, fraction: bool
) -> None:
    """Rows that share one run (their settings cannot decide differently on the trace) show
    what a replay of each row's settings alone shows: requests below and above the
    ``max_split_size_mb`` rows, bounded and unbounded devices, with and without a fraction."""
    total = 1024 * MiB
    device = SimDevice(total, settings=conf)
    if fraction:
        device.set_per_process_memory_fraction(0.75)
    device.record_memory_history("all", max_entries=100_000)
    drive(device, ops, [])
    snapshot = device.snapshot()
    failures = [e for e in snapshot["device_traces"][0] if e["action"] == "oom"]
    sidecar = None
    if oom and failures:  # the OOM's figures bound the device, as a dump written at an OOM does
        limit = int(0.75 * total) if fraction else total  # a fraction's limit bounds the device
        free = failures[-1]["device_free"]
        sidecar = {"schema": 2, "kind": "oom", "oom": {
            "requested_bytes": failures[-1]["size"], "allocation_bytes": None,
            "device_total_bytes": limit, "device_free_bytes": free}}  # fmt: skip
    dump = dump_from_snapshot(snapshot, sidecar=sidecar)
    table = replay_dump(dump)
    for row in table.what_if[1:]:
        alone = replay_dump(dump, sets=row.name.split(", "))
        assert alone.what_if[1] == row, row.name


def test_a_refused_table_ends_the_rows_started_in_workers() -> None:
    """Rows started in workers before the self-check refuses the table: the answer is the
    one computed in this process, and no worker outlives the replay."""
    device = SimDevice(40 * MiB)
    device.record_memory_history("all", max_entries=100_000)
    first = device.empty(5_177_344)
    neighbour = device.empty(3 * MiB // 2)
    _wall = device.empty(2 * MiB)
    first.free()
    held = device.empty(4 * MiB)  # served by the freed block, its real end unknown later
    neighbour.free()
    device.record_memory_history("all", max_entries=100_000, clear_history=True)
    _after = device.empty(2 * MiB)  # the model places it elsewhere: the table is refused
    held.free()
    with contextlib.suppress(SimOutOfMemoryError):
        device.empty(30 * MiB)
    dump = dump_from_snapshot(device.snapshot())
    here = replay_dump(dump, jobs=1)
    forked = replay_dump(dump, jobs=4)
    assert any("placed only" in reason for reason in here.refusals)
    assert to_json(forked) == to_json(here)
    assert multiprocessing.active_children() == []


def test_a_self_check_that_raises_ends_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """An error in the self-check while rows run in workers reaches the caller, and no worker
    outlives the replay."""
    import importlib

    module = importlib.import_module("memforensics.analysis.replay.replay")
    real_run = module.run

    def failing(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("exact"):
            raise RuntimeError("the self-check broke")
        return real_run(*args, **kwargs)

    monkeypatch.setattr(module, "run", failing)
    device = SimDevice(48 * MiB)
    device.record_memory_history("all", max_entries=100_000)
    kept = [device.empty(size * MiB) for size in (3, 5, 7, 12)]
    kept[1].free()
    with pytest.raises(RuntimeError, match="the self-check broke"):
        replay_dump(dump_from_snapshot(device.snapshot()), jobs=3)
    assert multiprocessing.active_children() == []


def test_rows_deciding_as_recorded_take_the_recorded_run_and_cost_no_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows that cannot decide differently from the recorded settings on this trace (max split
    sizes above every block, the largest request being 40 MiB; a GC threshold without a
    fraction) show the "as recorded" figures, and the replay makes no pass for them: one
    self-check plus one per row that can decide differently."""
    import importlib

    what_if = importlib.import_module("memforensics.analysis.replay.what_if")
    replay_module = importlib.import_module("memforensics.analysis.replay.replay")
    passes: list[str] = []
    real_run = replay_module.run

    def counted(*args: Any, **kwargs: Any) -> Any:
        passes.append(args[1].to_conf() if len(args) > 1 else "")
        return real_run(*args, **kwargs)

    monkeypatch.setattr(replay_module, "run", counted)
    monkeypatch.setattr(what_if, "run", counted)
    device = SimDevice(256 * MiB)
    device.record_memory_history("all", max_entries=100_000)
    held = [device.empty(size * MiB) for size in (3, 30, 5, 40, 7)]
    held[1].free()
    held[3].free()
    device.empty(20 * MiB)
    result = replay_dump(dump_from_snapshot(device.snapshot()), jobs=1)
    assert result.trusted, result.refusals
    recorded = result.what_if[0]
    same = [
        row
        for row in result.what_if
        if row.name.startswith(("max_split_size_mb=", "garbage_collection_threshold="))
    ]
    assert len(same) == 4
    for row in same:
        assert (row.oom, row.peak_reserved_bytes, row.fragmentation_at_peak_bytes) == (
            recorded.oom,
            recorded.peak_reserved_bytes,
            recorded.fragmentation_at_peak_bytes,
        ), row.name
    deciding = len(result.what_if) - 1 - len(same)
    assert len(passes) == 1 + deciding, passes
