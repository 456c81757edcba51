"""A dump with no OOM is judged at its peak: its site rows are the peak's, kept in the JSON."""

from __future__ import annotations

import json
from pathlib import Path

from memforensics.analysis import load_dump, summarize
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.schema import from_json, to_json
from memforensics.analysis.summary import Summary, summary_text
from memforensics.analysis.summary.text import MOST
from memforensics.testing import GiB, MiB, context_pair, unwound_oom
from memforensics.testing._synthetic import Block, Site, SnapshotBuilder

ATTENTION = "/job/model.py:71 attention"  # context_pair's activations, freed by the step's end


def _after(tmp_path: Path) -> Summary:
    _before, after = context_pair()
    return summarize(load_dump(after.write(tmp_path / "steps4-7" / "rank0_pid1.pickle")))


def _site_rows(text: str) -> tuple[str, list[str]]:
    """The site table's header and its rows (the lines up to the next table)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("live bytes"))
    rows = []
    for line in lines[start + 1 :]:
        if not line.startswith(("   ", "  …")) or "kind " in line or "call tree" in line:
            break
        rows.append(line)
    return lines[start], rows


def test_the_site_rows_are_those_live_at_the_peak(tmp_path: Path) -> None:
    """The peak's 584 MiB of attention, freed before the snapshot, heads the site rows, whose
    header names the peak; the snapshot's rows stay in ``top_sites``."""
    summary = _after(tmp_path)
    assert summary.peak is not None
    assert summary.peak.name == "peak"
    header, rows = _site_rows(summary_text(summary))
    assert f"at the peak, trace entry {summary.peak.position:,}" in header
    assert ATTENTION in rows[0]
    assert "584.00 MiB" in rows[0]
    assert {row.site: row.bytes for row in summary.peak_sites}[ATTENTION] == MiB(584)
    assert ATTENTION not in {row.site for row in summary.top_sites}


def test_a_summary_read_back_from_json_prints_the_peak_s_rows(tmp_path: Path) -> None:
    """The cache keeps the summary's JSON: read back, it prints the same peak rows."""
    summary = _after(tmp_path)
    back = from_json(Summary, json.loads(json.dumps(to_json(summary))))
    assert back.peak_sites == summary.peak_sites
    assert summary_text(back) == summary_text(summary)


def test_an_oom_dump_has_no_peak_rows(tmp_path: Path) -> None:
    """Where an OOM is judged, the peak is not the moment judged: ``peak_sites`` is empty."""
    summary = summarize(load_dump(unwound_oom().write(tmp_path / "oom" / "rank0_pid1.pickle")))
    assert summary.peak_sites == ()
    assert summary.oom is not None
    assert summary.oom.top_sites


def test_the_default_rows_are_those_that_hold_most_of_the_moment() -> None:
    """Of twelve sites, the screen shows the first rows that hold 80 % of the peak, not a fixed
    count: 5 GiB, 2 GiB and 1 GiB of 10 GiB take three rows, the rest are counted."""
    builder = SnapshotBuilder()
    sizes = [GiB(5), GiB(2), GiB(1), *[GiB(0.25)] * 8]
    for index, size in enumerate(sizes):
        builder.segment(Block(size, site=Site("/job/net.py", 10 + index, f"layer{index}")))
    summary = summarize(dump_from_snapshot(builder.build()))
    _header, rows = _site_rows(summary_text(summary))
    shown = [row for row in rows if not row.lstrip().startswith("…")]
    held = [site.bytes for site in summary.peak_sites or summary.top_sites]
    total = sum(sizes)
    assert len(shown) == 3
    assert sum(held[:3]) >= MOST * total > sum(held[:2])
    assert rows[-1].lstrip().startswith("… 8 more sites")


def test_verbose_prints_the_peak_s_rows_and_the_snapshot_s(tmp_path: Path) -> None:
    """--verbose keeps both tables where they differ: the peak's, then the snapshot's."""
    text = summary_text(_after(tmp_path), verbose=True)
    peak, snapshot = text.index("(live at the peak, trace entry"), text.index("(at the snapshot)")
    assert peak < text.index(ATTENTION) < snapshot
    assert ATTENTION not in text[snapshot:].split("\n\n")[0]
