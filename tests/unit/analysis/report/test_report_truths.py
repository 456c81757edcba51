"""report: its segment view, headings and facts say what the dump holds, never more."""

from __future__ import annotations

import json
import re
from typing import Any

from memforensics.analysis.dump import PREDICTED, dump_from_snapshot
from memforensics.analysis.filled import what_filled
from memforensics.analysis.report import ReportBuilder
from memforensics.analysis.summary import summarize
from memforensics.testing import (
    TRAIN,
    Block,
    GiB,
    MiB,
    SnapshotBuilder,
    make_sidecar,
    several_devices,
)

_DATA = re.compile(r'<script type="application/json" id="mf-data">(.*?)</script>', re.S)


def _document(html: str) -> dict[str, Any]:
    found = _DATA.search(html)
    assert found is not None
    document: dict[str, Any] = json.loads(found[1])
    return document


def _sections(html: str) -> dict[str, dict[str, Any]]:
    parts = _document(html)["dumps"][0]["devices"][0]["sections"]
    return {part["type"] if part["type"] == "segments" else part["id"]: part for part in parts}


def _expandable_oom() -> dict[str, Any]:
    """One expandable segment grown 1 GiB at a time from an empty allocator (each block mapped
    just before it is allocated), then an OOM: 6 GiB reserved at the end, on an 8 GiB device."""
    builder = SnapshotBuilder()
    builder.segment(*(Block(GiB(1), site=TRAIN) for _ in range(6)), expandable=True)
    builder.oom(requested=GiB(4), device_free=GiB(2))
    snapshot = builder.build()
    trace = snapshot["device_traces"][0]
    grown: list[dict[str, Any]] = []
    for entry in trace:
        if entry["action"] == "segment_alloc":
            continue
        if entry["action"] == "alloc":
            grown.append({**entry, "action": "segment_map", "frames": []})
        grown.append(entry)
    snapshot["device_traces"][0] = grown
    return snapshot


def test_segments_at_a_moment_follow_an_expandable_segment_as_it_grows() -> None:
    """On an expandable segment mapped piece by piece from an empty start, the segment view's
    reserved bytes at every moment are the timeline's, and never above the device."""
    snapshot = _expandable_oom()
    sidecar = make_sidecar("oom", oom={"device_total_bytes": GiB(8), "allocation_bytes": GiB(4)})
    dump = dump_from_snapshot(snapshot, sidecar=sidecar)
    builder = ReportBuilder()
    builder.add(dump)
    layouts = _sections(builder.html())["segments"]["data"]["layouts"]
    lt = what_filled(dump).lifetimes
    assert len(layouts) > 5
    for layout in layouts:
        assert layout["reserved"] == lt.reserved_at(layout["position"], GiB(6))
        assert layout["reserved"] <= GiB(8)
    first = layouts[0]
    assert (first["position"], first["reserved"], first["segments"]) == (0, GiB(1), 1)


def test_a_dump_without_trace_heads_its_tree_once() -> None:
    """Without a trace the tree is the snapshot's, said once: no 'snapshot at the snapshot'."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(64), site=TRAIN))
    snapshot = builder.build()
    snapshot["device_traces"] = [[]]
    report = ReportBuilder()
    report.add(dump_from_snapshot(snapshot))
    moment = _sections(report.html())["tree"]["data"]["moment"]
    assert "snapshot at the snapshot" not in moment
    assert moment.startswith("At the snapshot")


def test_device_known_from_the_snapshot_is_named() -> None:
    """A 3-GPU dump whose sidecar names no device type: the facts name device 1, not unknown."""
    multi = several_devices(oom_device=1, sidecar_device=1)
    sidecar = {**(multi.sidecar or {}), "device": None}
    report = ReportBuilder()
    report.add(dump_from_snapshot(multi.snapshot, sidecar=sidecar))
    rows = dict((row[0], row[1][1]) for row in _sections(report.html())["facts"]["data"]["rows"])
    assert rows["device"].startswith("device 1 (")
    assert "unknown" not in rows["device"]


def test_an_oom_figure_left_empty_by_the_sidecar_says_so() -> None:
    """A sidecar whose oom leaves the allocation empty, and a trace with an oom entry: the row
    gives the size PyTorch's rules give for the request, as summary does, never that there is
    no sidecar field and no oom entry."""
    snapshot = _expandable_oom()
    sidecar = make_sidecar("oom", oom={"device_total_bytes": GiB(8), "allocation_bytes": None})
    dump = dump_from_snapshot(snapshot, sidecar=sidecar)
    report = ReportBuilder()
    report.add(dump)
    html = report.html()
    rows = dict((row[0], row[1][1]) for row in _sections(html)["facts"]["data"]["rows"])
    oom = summarize(dump).oom
    assert oom is not None
    assert oom.allocation_bytes is not None
    assert rows["OOM allocation (error text)"] == oom.allocation_bytes
    assert "no sidecar field" not in str(_document(html))


def test_a_predicted_dump_says_so_in_its_facts() -> None:
    """A dump ``memforensics plan`` wrote has a facts row saying predicted; a measured one none."""
    predicted = {"device_total_bytes": GiB(8), "capability": "9.0", "context_bytes": 0}
    rows: dict[str, dict[str, Any]] = {}
    for name, sidecar in (
        ("predicted", make_sidecar("oom", predicted=predicted)),
        ("measured", make_sidecar("oom")),
    ):
        report = ReportBuilder()
        report.add(dump_from_snapshot(_expandable_oom(), sidecar=sidecar))
        facts = _sections(report.html())["facts"]["data"]["rows"]
        rows[name] = dict((row[0], row[1][1]) for row in facts)
    assert rows["predicted"]["origin"] == PREDICTED
    assert "origin" not in rows["measured"]
