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
    assert "predicted by memforensics plan" in summary_text(summary).splitlines()[0]


def test_a_measured_dump_does_not(tmp_path: Path) -> None:
    """Without the record, nothing says predicted."""
    dump = fragmented()
    path = write_dump(tmp_path / "oom.pickle", dump.snapshot, sidecar=make_sidecar("oom"))
    summary = summarize(load_dump(path))
    assert summary.predicted is False
    assert "predicted" not in summary_text(summary)
