"""A snapshot ``plan`` recorded carries its own mark, so a ``_snapshot()`` the script pickled
itself, with no sidecar, says "predicted" in every analysis command as a sidecar would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memforensics._layout import PREDICTED_KEY
from memforensics.analysis import diff_dumps, list_dumps, load_dump, replay_dump, summarize
from memforensics.analysis.compare.text import diff_text
from memforensics.analysis.dump import PREDICTED
from memforensics.analysis.folder import ls_text
from memforensics.analysis.replay import replay_text
from memforensics.analysis.report import ReportBuilder
from memforensics.analysis.schema import to_json
from memforensics.analysis.summary import summary_text
from memforensics.testing import fragmented, write_dump

RECORD = {
    "device_total_bytes": 80 << 30,
    "capability": "8.0",
    "context_bytes": 512 << 20,
    "allocator_settings": "",
}


def _marked() -> dict[str, Any]:
    """A snapshot as plan's ``_snapshot()`` returns it: the mark first, then PyTorch's keys."""
    return {PREDICTED_KEY: dict(RECORD), **fragmented().snapshot}


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_a_marked_snapshot_without_a_sidecar_says_predicted_everywhere(
    tmp_path: Path, protocol: int
) -> None:
    """summary (header and JSON), replay, diff, report and ls all say predicted for the
    script's own pickle of a planned snapshot, which has no sidecar."""
    path = write_dump(tmp_path / "mem_snapshot.pickle", _marked(), protocol=protocol)
    measured = write_dump(tmp_path / "real.pickle", fragmented().snapshot)
    dump = load_dump(path)
    assert dump.meta.has_sidecar is False
    summary = summarize(dump)
    assert to_json(summary)["predicted"] is True
    header = " ".join(" ".join(summary_text(summary).splitlines()[:3]).split())
    assert PREDICTED in header  # a long path has a line of its own, the details wrap under it
    assert PREDICTED in replay_text(replay_dump(dump)).splitlines()[0]
    compared = diff_dumps(load_dump(measured), dump)
    assert (compared.before_predicted, compared.after_predicted) == (False, True)
    before_line, after_line = [
        line for line in diff_text(compared).splitlines() if str(tmp_path) in line
    ]
    assert PREDICTED not in before_line
    assert PREDICTED in after_line
    report = ReportBuilder()
    report.add(dump)
    assert PREDICTED in report.html()
    flags = {entry.path.name: entry.predicted for entry in list_dumps(tmp_path).dumps}
    assert flags == {"mem_snapshot.pickle": True, "real.pickle": False}


def test_ls_reads_the_mark_in_a_compressed_dump_too(tmp_path: Path) -> None:
    """ls finds the mark at the head of a gzip-compressed pickle and flags the entry ``~``."""
    write_dump(tmp_path / "planned.pickle.gz", _marked(), gz=True)
    listing = list_dumps(tmp_path)
    assert [entry.predicted for entry in listing.dumps] == [True]
    (row,) = [line for line in ls_text(listing).splitlines() if "planned.pickle.gz" in line]
    assert "~" in row.split()[-2]  # the flags column


def test_a_snapshot_without_the_mark_is_measured(tmp_path: Path) -> None:
    """No mark, or a mark that is not plan's record (not a dict, or not where plan puts it for
    ls), says nothing predicted: a real GPU's pickle stays measured."""
    plain = write_dump(tmp_path / "a.pickle", fragmented().snapshot)
    odd = write_dump(tmp_path / "b.pickle", {**fragmented().snapshot, PREDICTED_KEY: True})
    for path in (plain, odd):
        summary = summarize(load_dump(path))
        assert summary.predicted is False
        assert PREDICTED not in summary_text(summary)
    report = ReportBuilder()
    report.add(load_dump(plain))
    assert PREDICTED not in report.html()
    assert [entry.predicted for entry in list_dumps(tmp_path).dumps] == [False, False]
