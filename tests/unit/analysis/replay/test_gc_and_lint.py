"""Lint and the garbage-collection what-if say what PyTorch needs and does."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from memforensics.analysis import replay_dump
from memforensics.analysis.dump import Dump, dump_from_snapshot
from memforensics.analysis.replay import replay_text
from memforensics.analysis.report import ReportBuilder
from memforensics.analysis.schema import to_json
from memforensics.backends.sim import SimDevice, SimOutOfMemoryError

MiB = 1 << 20
_DATA = re.compile(r'<script type="application/json" id="mf-data">(.*?)</script>', re.S)


def _fragmenting_oom(conf: str = "", fraction: float | None = None) -> Dump:
    """A long-lived tensor splits a cached segment; the larger request after it cannot fit."""
    total = 48 * MiB
    device = SimDevice(total, settings=conf)
    if fraction is not None:
        device.set_per_process_memory_fraction(fraction)
    device.record_memory_history("all", max_entries=10_000)
    device.empty(30 * MiB).free()
    kept = device.empty(10 * MiB)
    with pytest.raises(SimOutOfMemoryError):
        device.empty(24 * MiB)
    snapshot = device.snapshot()
    del kept
    oom = next(e for e in reversed(snapshot["device_traces"][0]) if e["action"] == "oom")
    limit = total if fraction is None else int(fraction * total)
    sidecar = {"schema": 2, "kind": "oom", "oom": {
        "requested_bytes": oom["size"], "allocation_bytes": None,
        "device_total_bytes": limit, "device_free_bytes": oom["device_free"]}}  # fmt: skip
    return dump_from_snapshot(snapshot, sidecar=sidecar)


def _gc_row(result: Any) -> Any:
    return next(row for row in result.what_if if "garbage_collection_threshold" in row.name)


def test_the_gc_row_says_it_also_needs_a_memory_fraction() -> None:
    """Without a recorded fraction the GC row names the fraction it assumes: text, JSON, report."""
    dump = _fragmenting_oom()
    result = replay_dump(dump)
    assert result.trusted, result.refusals
    row = _gc_row(result)
    assert row.requires is not None
    assert "per_process_memory_fraction" in row.requires
    assert "set_per_process_memory_fraction" in row.requires
    document = json.loads(json.dumps(to_json(result)))
    rows = {r["name"]: r for r in document["what_if"]}
    assert rows[row.name]["requires"] == row.requires
    assert rows["expandable_segments=True"]["requires"] is None
    assert f"({row.name} also needs a memory fraction" in replay_text(result)
    builder = ReportBuilder()
    builder.add(dump)
    found = _DATA.search(builder.html())
    assert found is not None
    sections = json.loads(found[1])["dumps"][0]["devices"][0]["sections"]
    table = next(part for part in sections if part["id"] == "replay")
    cells = [r[0] for r in table["data"]["rows"] if "garbage_collection_threshold" in r[0]]
    assert cells
    assert all("also needs a memory fraction" in cell for cell in cells)


def test_the_gc_row_needs_nothing_more_when_a_fraction_was_recorded() -> None:
    """With a recorded fraction the GC row adds no limit and asks for nothing."""
    result = replay_dump(_fragmenting_oom(fraction=0.9))
    assert _gc_row(result).requires is None


def test_rows_keeping_the_recorded_threshold_assume_no_fraction() -> None:
    """A recorded threshold without a fraction did nothing: only the row that changes it
    assumes a fraction (and says so); the others run as the recorded device ran."""
    result = replay_dump(_fragmenting_oom("garbage_collection_threshold:0.5"))
    assert result.trusted, result.refusals
    needing = [row.name for row in result.what_if if row.requires]
    assert needing == ["garbage_collection_threshold=0.8"]


def test_lint_says_expandable_segments_split_oversize_blocks_for_large_requests() -> None:
    """The sim hands a free oversize block to a large request and splits off the rest; the
    lint finding says so instead of 'never split'."""
    device = SimDevice(256 * MiB, settings="expandable_segments:True,max_split_size_mb:24")
    device.record_memory_history("all", max_entries=10_000)
    big = device.empty(40 * MiB)
    address = big.address
    big.free()
    taken = device.empty(30 * MiB)
    assert taken.address == address
    snapshot = device.snapshot()
    blocks = {b["address"]: b for s in snapshot["segments"] for b in s["blocks"]}
    assert blocks[address + 30 * MiB]["state"] == "inactive"  # the rest was split off
    findings = replay_dump(dump_from_snapshot(snapshot)).lint
    split = [finding for finding in findings if "max_split_size_mb with expandable" in finding]
    assert split
    assert "never split" not in split[0]
    assert "split off" in split[0]
    assert "123548" in split[0]


def test_lint_names_every_way_to_set_the_fraction_gc_needs() -> None:
    """The GC finding names the call and the conf key; a conf fraction below 1.0 silences it."""
    findings = replay_dump(_fragmenting_oom("garbage_collection_threshold:0.5")).lint
    gc = [finding for finding in findings if "garbage_collection_threshold" in finding]
    assert gc
    assert "per_process_memory_fraction in the conf string" in gc[0]
    assert "below 1.0" in gc[0]
    conf = "garbage_collection_threshold:0.5,per_process_memory_fraction:0.9"
    device = SimDevice(48 * MiB, settings=conf)
    device.record_memory_history("all", max_entries=1_000)
    device.empty(4 * MiB).free()
    quiet = replay_dump(dump_from_snapshot(device.snapshot())).lint
    assert not [finding for finding in quiet if "garbage_collection_threshold" in finding]
