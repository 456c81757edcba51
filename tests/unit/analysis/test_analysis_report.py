"""report: self-contained HTML that stays small for huge snapshots and escapes what it shows."""

from __future__ import annotations

import re

from memforensics.analysis import dump_from_snapshot, memory_timeline, render_report, summarize
from memforensics.testing import Block, MiB, Site, SnapshotBuilder, exhausted, fragmented


def test_report_is_offline_and_complete() -> None:
    """No URL, script, link or import; every section and the verdict are there."""
    synthetic = fragmented()
    html = render_report([dump_from_snapshot(synthetic.snapshot, sidecar=synthetic.sidecar)])
    assert not re.search(r"https?:|<script|<link|@import|<iframe|src=", html)
    for heading in ("Summary and OOM", "Memory over time", "Biggest sites", "Segment layout"):
        assert heading in html
    assert "fragmentation" in html
    assert "expandable_segments:True" in html
    assert html.count("<svg") == 2


def test_snapshot_strings_are_escaped() -> None:
    """A hostile file name in a frame is shown as text, never as markup."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(1), site=Site("/x/<script>alert(1)</script>.py", 1, "<b>f")))
    html = render_report([dump_from_snapshot(builder.build())])
    assert "<script>" not in html
    assert "&lt;script&gt;" in html


def test_big_trace_is_downsampled() -> None:
    """300,000 events become at most 1,000 points per series, and the peak survives."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(1)))
    builder.churn(300_000, size=MiB(1))
    snapshot = builder.build()
    summary = summarize(dump_from_snapshot(snapshot))
    line = memory_timeline(
        snapshot["device_traces"][0],
        active_bytes=summary.active_bytes,
        reserved_bytes=summary.reserved_bytes,
    )
    assert len(line.x) <= 1000
    assert line.events == 300_002
    assert max(line.allocated) == MiB(2)
    assert set(line.allocated) == {MiB(2)}  # every bucket keeps its peak: live 1 + churn 1
    assert line.reserved[-1] == summary.reserved_bytes
    html = render_report([dump_from_snapshot(snapshot)])
    assert len(html) < 200_000


def test_thousands_of_segments_are_summarized() -> None:
    """With 3,000 segments only the 150 with most free bytes are drawn, plus a fill histogram."""
    builder = SnapshotBuilder()
    for index in range(3000):
        builder.segment(Block(MiB(2)), Block(MiB(index % 7 + 1), state="inactive", site=None))
    html = render_report([dump_from_snapshot(builder.build())])
    assert "the 150 of 3,000 segments with the most free bytes" in html
    assert html.count("% used</text>") == 150


def test_oom_marker_in_plot() -> None:
    """The OOM entry of the trace is drawn as a marker on the memory plot."""
    synthetic = exhausted()
    html = render_report([dump_from_snapshot(synthetic.snapshot, sidecar=synthetic.sidecar)])
    assert html.count("<title>out of memory</title>") == 1
