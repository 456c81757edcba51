"""The replay's self-check: blocks live before recording keep their real size, and a replay
that misplaces blocks refuses its what-if table."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from memforensics.allocator import (
    BASE_ADDRESS,
    AllocatorSettings,
    DeviceCachingAllocator,
    seed_segment,
)
from memforensics.analysis import replay_dump
from memforensics.analysis.dump import Dump, dump_from_snapshot
from memforensics.analysis.oom import state_before
from memforensics.analysis.replay import replay_text
from memforensics.analysis.report import ReportBuilder
from memforensics.analysis.schema import to_json
from memforensics.backends.sim import SimDevice, SimOutOfMemoryError

MiB = 1 << 20
_DATA = re.compile(r'<script type="application/json" id="mf-data">(.*?)</script>', re.S)


def _unsplit_block(device: SimDevice, *, gap: int) -> Any:
    """A 4 MiB request served by a free block 983,040 B larger (a tail under 1 MiB is never
    split off), whose right neighbour ``gap`` bytes later is freed before recording starts."""
    first = device.empty(5_177_344)
    neighbour = device.empty(gap) if gap else None
    wall = device.empty(8 * MiB if not gap else 2 * MiB)
    first.free()
    held = device.empty(4 * MiB)
    if neighbour is not None:
        neighbour.free()
    else:
        wall.free()
    return held, wall


def _block_size(snapshot: dict[str, Any], address: int) -> int:
    sizes = {b["address"]: b["size"] for s in snapshot["segments"] for b in s["blocks"]}
    return int(sizes[address])


def test_a_block_live_before_recording_ends_where_the_next_allocation_begins() -> None:
    """The start state sizes a pre-recording block as the sim holds it, not from its free event."""
    device = SimDevice(96 * MiB)
    device.record_memory_history("all", max_entries=10_000)
    held, _wall = _unsplit_block(device, gap=0)
    real_size = _block_size(device.snapshot(), held.address)
    assert real_size == 5_177_344
    device.record_memory_history("all", max_entries=10_000, clear_history=True)
    _after = device.empty(2 * MiB)  # lands right after the held block, at its real end
    held.free()
    _later = device.empty(3 * MiB)
    dump = dump_from_snapshot(device.snapshot())
    start = state_before(dump, 0, AllocatorSettings())
    sizes = {b.address: b.size for s in start.segments for b in s.blocks}
    assert sizes[held.address] == real_size
    result = replay_dump(dump)
    assert result.placements_same == result.placements_checked == 2
    assert result.trusted, result.refusals


def _misplacing_oom(device: SimDevice) -> None:
    """A pre-recording block whose real end no event shows; the 2 MiB request lands elsewhere
    in the model, then a 30 MiB request runs out of memory."""
    held, _wall = _unsplit_block(device, gap=3 * MiB // 2)
    device.record_memory_history("all", max_entries=10_000, clear_history=True)
    _after = device.empty(2 * MiB)
    held.free()
    with pytest.raises(SimOutOfMemoryError):
        device.empty(30 * MiB)


def _oom_dump(device: SimDevice, total: int) -> Dump:
    snapshot = device.snapshot()
    oom = next(e for e in reversed(snapshot["device_traces"][0]) if e["action"] == "oom")
    sidecar = {"schema": 2, "kind": "oom", "oom": {
        "requested_bytes": oom["size"], "allocation_bytes": None,
        "device_total_bytes": total, "device_free_bytes": oom["device_free"]}}  # fmt: skip
    return dump_from_snapshot(snapshot, sidecar=sidecar)


def test_a_replay_that_misplaces_blocks_refuses_its_what_if() -> None:
    """Under 99 % of blocks at their recorded address: no what-if rows, said in text and JSON."""
    total = 40 * MiB
    device = SimDevice(total)
    device.record_memory_history("all", max_entries=10_000)
    _misplacing_oom(device)
    result = replay_dump(_oom_dump(device, total))
    assert result.placements_checked == 1
    assert result.placements_same == 0
    assert not result.trusted
    assert [row.name for row in result.what_if] == ["as recorded"]
    document = json.loads(json.dumps(to_json(result)))
    assert document["trusted"] is False
    assert document["placement_fidelity"] == 0.0
    assert any("placed only 0.0% of the blocks" in r for r in document["refusals"])
    text = replay_text(result)
    assert "no what-if:  the model placed only 0.0% of the blocks" in text
    assert "avoided by" not in text


def test_the_report_shows_the_placement_refusal() -> None:
    """The report's what-if section gives the refusal instead of a table."""
    total = 40 * MiB
    device = SimDevice(total)
    device.record_memory_history("all", max_entries=10_000)
    _misplacing_oom(device)
    builder = ReportBuilder()
    builder.add(_oom_dump(device, total))
    found = _DATA.search(builder.html())
    assert found is not None
    sections = json.loads(found[1])["dumps"][0]["devices"][0]["sections"]
    section = next(part for part in sections if part["id"] == "replay")
    assert section["data"]["rows"] == []
    assert "placed only 0.0% of the blocks" in section["empty"]


def _counting_runs(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record each replay run's ``stop_at_oom`` (the replay's model passes over the trace, the
    self-check's and the what-if rows')."""
    import importlib

    calls: list[bool] = []
    for name in ("replay", "what_if"):
        module = importlib.import_module(f"memforensics.analysis.replay.{name}")
        real_run = module.run

        def counted(*args: Any, real_run: Any = real_run, **kwargs: Any) -> Any:
            calls.append(bool(kwargs.get("stop_at_oom")))
            return real_run(*args, **kwargs)

        monkeypatch.setattr(module, "run", counted)
    return calls


def test_a_refused_replay_runs_no_alternative(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay that refuses its what-if table spends no pass on the rows it will not show."""
    total = 40 * MiB
    device = SimDevice(total)
    device.record_memory_history("all", max_entries=10_000)
    _misplacing_oom(device)
    calls = _counting_runs(monkeypatch)
    result = replay_dump(_oom_dump(device, total))
    assert result.refusals
    assert len(calls) == 2  # the self-check (which gives the baseline) and the calibration


def test_without_an_oom_the_self_check_is_the_baseline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OOM recorded or met, nothing live at the start: the self-check's pass serves as the
    "as recorded" row (matching a pass that stops at the first OOM) and no calibration runs."""
    device = SimDevice(96 * MiB)
    device.record_memory_history("all", max_entries=10_000)
    kept = [device.empty(size * MiB) for size in (3, 5, 7)]
    kept[1].free()
    _more = device.empty(2 * MiB)
    dump = dump_from_snapshot(device.snapshot())
    calls = _counting_runs(monkeypatch)
    result = replay_dump(dump)
    assert result.trusted, result.refusals
    assert result.start == "empty"
    assert calls[0] is False  # the self-check runs to the end of the trace
    assert all(calls[1:])  # every other pass is a what-if row's: no baseline, no calibration
    assert len(calls) <= len(result.what_if)  # at most one pass per row
    monkeypatch.undo()
    from memforensics.analysis.oom import recorded_settings
    from memforensics.analysis.replay.replay import device_for
    from memforensics.analysis.replay.runner import run

    settings = recorded_settings(dump)
    stopped = run(
        dump, settings, state_before(dump, 0, settings), device_for(dump, None),
        exact=True, stop_at_oom=True,
    )  # fmt: skip
    assert result.what_if[0].peak_reserved_bytes == stopped.peak_reserved
    assert stopped.oom_index is None
    assert result.what_if[0].oom is None  # no device size recorded: no OOM is ruled out


def test_a_segment_the_model_places_never_lands_on_a_seeded_one() -> None:
    """A recording whose segments sit where the model starts placing its own: a segment the
    model must place itself goes past them, never onto a live block (two blocks at one address
    break every later free)."""
    model = DeviceCachingAllocator(AllocatorSettings(), capacity=1 << 30)
    seed_segment(model, BASE_ADDRESS, 20 << 20, 0, False, [(BASE_ADDRESS, 2 << 20, 2 << 20, False)])
    block = model.malloc(65536, 0)
    assert block is not None
    assert not BASE_ADDRESS <= block.address < BASE_ADDRESS + (20 << 20)
