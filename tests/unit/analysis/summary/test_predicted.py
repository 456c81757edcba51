"""A dump ``memforensics plan`` wrote says so wherever summary shows it."""

from __future__ import annotations

from pathlib import Path

from memforensics.analysis import load_dump, summarize
from memforensics.analysis.summary import summary_text
from memforensics.testing import fragmented, make_sidecar, write_dump

PREDICTED = {
    "device_total_bytes": 80 << 30,
    "capability": "9.0",
    "context_bytes": 512 << 20,
    "allocator_settings": "",
}


def test_a_predicted_dump_says_it_is_predicted(tmp_path: Path) -> None:
    """The sidecar's ``predicted`` record makes the summary's header and JSON say predicted."""
    dump = fragmented()
    path = write_dump(
        tmp_path / "oom.pickle", dump.snapshot, sidecar=make_sidecar("oom", predicted=PREDICTED)
    )
    summary = summarize(load_dump(path))
    assert summary.predicted is True
    header = " ".join(summary_text(summary).splitlines()[:2])
    assert "predicted by memforensics plan, not measured on a GPU" in header


def test_a_predicted_dump_s_header_keeps_its_path_whole_and_counts_its_lines(
    tmp_path: Path,
) -> None:
    """The long details of a planned dump leave its path no room beside them: the path keeps a
    line of its own, whole, the details wrap under it, and the screen counts both lines (25 at
    most, none over 80 columns)."""
    dump = fragmented()
    path = write_dump(
        tmp_path / "rank0_pid17183.pickle",
        dump.snapshot,
        sidecar=make_sidecar("oom", predicted=PREDICTED),
    )
    summary = summarize(load_dump(path))
    lines = summary_text(summary, width=80).splitlines()
    assert lines[0] == summary.file if len(summary.file) <= 80 else lines[0].startswith("…")
    assert lines[0].endswith("/rank0_pid17183.pickle")
    assert lines[1].startswith("  (kind oom, rank ")
    assert lines[1].rstrip().endswith("not measured on a GPU)")
    assert lines[2].startswith("  cause ")
    assert len(lines) <= 25
    assert all(len(line) <= 80 for line in lines)


def test_a_measured_dump_does_not(tmp_path: Path) -> None:
    """Without the record, nothing says predicted."""
    dump = fragmented()
    path = write_dump(tmp_path / "oom.pickle", dump.snapshot, sidecar=make_sidecar("oom"))
    summary = summarize(load_dump(path))
    assert summary.predicted is False
    assert "predicted" not in summary_text(summary)
