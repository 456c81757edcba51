"""report: one offline page whose embedded document holds every section, small for big dumps."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import memforensics.analysis.report
from memforensics.analysis import Dump, summarize
from memforensics.analysis.diagnosis import cause_words
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.report import ReportBuilder
from memforensics.analysis.report.model import DumpContext, Section, table
from memforensics.analysis.report.sections import DUMP_SECTIONS
from memforensics.testing import Block, MiB, Site, SnapshotBuilder, exhausted, fragmented

_DATA = re.compile(r'<script type="application/json" id="mf-data">(.*?)</script>', re.S)


def render_report(dumps: list[Dump]) -> str:
    """The page of ``dumps``, built the way ``memforensics report`` builds it."""
    builder = ReportBuilder()
    for dump in dumps:
        builder.add(dump)
    return builder.html()


def _document(html: str) -> dict[str, Any]:
    found = _DATA.search(html)
    assert found is not None
    document: dict[str, Any] = json.loads(found[1])
    return document


def _sections(html: str, dump: int = 0, device: int = 0) -> dict[str, dict[str, Any]]:
    parts = _document(html)["dumps"][dump]["devices"][device]["sections"]
    return {part["type"] if part["type"] == "segments" else part["id"]: part for part in parts}


def test_report_is_offline_and_complete() -> None:
    """No URL, link, import, frame or external source; every section and the verdict are there."""
    synthetic = fragmented()
    html = render_report([dump_from_snapshot(synthetic.snapshot, sidecar=synthetic.sidecar)])
    assert not re.search(r"https?:|<link|@import|<iframe|src=|url\((?!#)", html)
    assert "default-src 'none'" in html  # the browser itself refuses any request
    found = _sections(html)
    assert set(found) >= {"verdict", "facts", "timeline", "segments", "kinds", "tree", "sites"}
    assert found["verdict"]["data"]["name"] == "fragmentation"
    assert found["verdict"]["data"]["cause"].startswith("memory outside PyTorch: 79.50 GiB")


def test_page_assets_are_package_files_inlined() -> None:
    """The page's JS and CSS are the package's static files, inlined verbatim."""
    static = Path(memforensics.analysis.report.__file__).parent / "assets"
    html = render_report([dump_from_snapshot(fragmented().snapshot)])
    assert (static / "report.js").read_text() in html
    assert (static / "report.css").read_text() in html


def test_snapshot_strings_cannot_become_markup() -> None:
    """A hostile file name in a frame stays JSON text: no raw tag, no closing script tag."""
    builder = SnapshotBuilder()
    site = Site("/x/</script><script>alert(1)</script>.py", 1, "<b>f")
    builder.segment(Block(MiB(1), site=site))
    html = render_report([dump_from_snapshot(builder.build())])
    assert "<script>alert" not in html
    assert html.count("</script>") == 2  # the data block and the page's own script
    names = [row[0] for row in _sections(html)["sites"]["data"]["rows"]]
    assert names == [str(site)]


def test_big_trace_is_aggregated_and_keeps_its_peak() -> None:
    """300,000 events become at most 4,096 points per level; the peak survives every level."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(1)))
    builder.churn(300_000, size=MiB(1))
    html = render_report([dump_from_snapshot(builder.build())])
    timeline = _sections(html)["timeline"]["data"]
    assert timeline["events"] == 300_002  # the segment, its block, the churn
    total = timeline["columns"].index("total")
    for level in timeline["levels"]:
        assert len(level) <= 4096
        assert max(row[total] for row in level) == MiB(2)
    assert len(html) < 2_000_000
    [band] = timeline["bands"]  # around the peak: finer buckets for a zoom there
    finest = [row for row in timeline["levels"][-1] if band["from"] <= row[0] < band["to"]]
    assert len(band["rows"]) > 10 * len(finest)
    assert max(row[total] for row in band["rows"]) == MiB(2)


def test_identical_segments_are_grouped_and_holes_come_first() -> None:
    """3,000 segments of 7 shapes become 7 rows with counts, those with the most free first."""
    builder = SnapshotBuilder()
    for index in range(3000):
        builder.segment(Block(MiB(2)), Block(MiB(index % 7 + 1), state="inactive"))
    html = render_report([dump_from_snapshot(builder.build())])
    [snapshot] = [
        layout
        for layout in _sections(html)["segments"]["data"]["layouts"]
        if layout["segments"] == 3000
    ][-1:]
    rows = snapshot["rows"]
    assert len(rows) == 7
    assert sum(row["count"] for row in rows) == 3000
    assert [row["free"] for row in rows] == [MiB(n) for n in (7, 6, 5, 4, 3, 2, 1)]


def test_oom_marker_and_device_limit_are_in_the_timeline() -> None:
    """The trace's OOM entry is a marker, and the sidecar's device limit is passed to the chart."""
    synthetic = exhausted()
    html = render_report([dump_from_snapshot(synthetic.snapshot, sidecar=synthetic.sidecar)])
    timeline = _sections(html)["timeline"]["data"]
    assert [m["label"] for m in timeline["markers"]].count("OOM") == 1
    assert timeline["limit"] == synthetic.sidecar["oom"]["device_total_bytes"]


def test_every_empty_state_says_why() -> None:
    """A dump without history or steps: each empty section explains what is missing and why,
    and no bare '(unknown)' or '1 events' appears."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(4)))
    snapshot = builder.build()
    snapshot["device_traces"] = [[]]
    html = render_report([dump_from_snapshot(snapshot)])
    found = _sections(html)
    assert "history" in found["timeline"]["empty"]
    assert "step=N" in found["steps"]["empty"]
    facts = dict((row[0], row[1][1]) for row in found["facts"]["data"]["rows"])
    assert facts["OOM request"] == "no OOM recorded in this dump"
    assert "no sidecar" in facts["history truncated"]
    assert "(unknown)" not in html
    assert "1 events" not in html


def test_several_devices_get_a_section_each() -> None:
    """A dump without an OOM whose segments and traces cover devices 0 and 1 has one part per
    device, in device order as ``summary`` lists them, each with its own bytes."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(4)))
    snapshot = builder.build()
    other = SnapshotBuilder(device=1, base_address=0x7E00_0000_0000)
    other.segment(Block(MiB(10)))
    second = other.build()
    snapshot["segments"] += second["segments"]
    snapshot["device_traces"] = [snapshot["device_traces"][0], second["device_traces"][1]]
    html = render_report([dump_from_snapshot(snapshot, sidecar={"device_index": 1})])
    devices = _document(html)["dumps"][0]["devices"]
    assert [d["label"] for d in devices] == ["device 0", "device 1"]
    reserved = []
    for index in range(2):
        rows = _sections(html, device=index)["facts"]["data"]["rows"]
        reserved.append(dict((row[0], row[1][1]) for row in rows)["reserved"])
    assert reserved == [MiB(4), MiB(10)]


def test_a_new_section_is_one_builder() -> None:
    """Appending a builder that returns a table adds it to every device's part of the page."""

    def replay(ctx: DumpContext) -> Section:
        return table("replay", "What if", [("setting", "text")], [["expandable_segments"]])

    DUMP_SECTIONS.append(replay)
    try:
        builder = ReportBuilder()
        builder.add(dump_from_snapshot(fragmented().snapshot))
    finally:
        DUMP_SECTIONS.remove(replay)
    parts = builder.document()["dumps"][0]["devices"][0]["sections"]
    assert parts[-1]["id"] == "replay"
    assert parts[-1]["data"]["rows"] == [["expandable_segments"]]


def test_a_worst_case_layout_stays_bounded() -> None:
    """300 distinct segments of 100 blocks each, live and free in turn: at most 120 rows of at
    most 32 runs per moment, and the page stays small."""
    builder = SnapshotBuilder()
    for index in range(300):
        blocks = [
            Block(4096 * (1 + (index + n) % 5), state="inactive" if n % 2 else "active_allocated")
            for n in range(100)
        ]
        builder.segment(*blocks)
    html = render_report([dump_from_snapshot(builder.build())])
    for layout in _sections(html)["segments"]["data"]["layouts"]:
        assert len(layout["rows"]) <= 120
        assert all(len(row["runs"]) <= 32 for row in layout["rows"])
        assert layout["hidden_segments"] == layout["segments"] - sum(
            row["count"] for row in layout["rows"]
        )
    assert len(html) < 3_000_000


def _fragmenting_oom_dump() -> Any:
    """A sim run that fails by fragmentation under default settings, as an OOM dump."""
    from memforensics.backends.sim import SimDevice, SimOutOfMemoryError

    mib = 1 << 20
    total = 48 * mib
    device = SimDevice(total)
    device.record_memory_history("all", max_entries=10_000)
    device.empty(30 * mib).free()
    kept = device.empty(10 * mib)
    with pytest.raises(SimOutOfMemoryError):
        device.empty(24 * mib)
    del kept
    snapshot = device.snapshot()
    oom = next(e for e in reversed(snapshot["device_traces"][0]) if e["action"] == "oom")
    sidecar = {"schema": 2, "kind": "oom", "oom": {
        "requested_bytes": oom["size"], "allocation_bytes": None,
        "device_total_bytes": total, "device_free_bytes": oom["device_free"]}}  # fmt: skip
    return dump_from_snapshot(snapshot, sidecar=sidecar)


def test_an_oom_dump_shows_the_replay_table_and_the_state_at_the_oom() -> None:
    """An OOM dump's page answers 'would expandable segments have fit?' from the replay."""
    parts = _sections(render_report([_fragmenting_oom_dump()]))
    rows = {row[0]: row[1] for row in parts["replay"]["data"]["rows"]}
    assert rows["(as recorded)"] == "OOM"
    assert rows["expandable_segments:True"] == "fits"
    facts = {row[0]: row[1] for row in parts["oom_moment"]["data"]["rows"]}
    assert facts["request (the user's, rounded to 512 B)"] == ["bytes", 24 << 20]


def test_a_dump_without_oom_has_no_replay_section() -> None:
    """No OOM, nothing to replay: the page leaves the what-if table out."""
    from memforensics.backends.sim import SimDevice

    device = SimDevice(64 << 20)
    device.record_memory_history("all", max_entries=1_000)
    device.empty(8 << 20).free()
    parts = _sections(render_report([dump_from_snapshot(device.snapshot())]))
    assert parts["verdict"]["data"]["name"] == "no-oom"
    assert "replay" not in parts
    assert "oom_moment" not in parts


def test_report_headline_is_the_diagnosis_with_the_verdict_beneath() -> None:
    """The report's headline box leads with summary's own diagnosis headline (one diagnosis
    everywhere), and keeps the allocator's verdict as its category."""
    synthetic = fragmented()
    dump = dump_from_snapshot(synthetic.snapshot, sidecar=synthetic.sidecar)
    verdict = _sections(render_report([dump]))["verdict"]["data"]
    diagnosis = summarize(dump).diagnosis
    assert diagnosis is not None
    assert verdict["cause"] == diagnosis.headline
    assert verdict["causes"] == [cause_words(c.name, c.evidence) for c in diagnosis.causes[1:]]
    assert verdict["name"] == "fragmentation"
