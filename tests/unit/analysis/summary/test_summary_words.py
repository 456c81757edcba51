"""The small words of ``summary``, ``ls`` and the kinds tables: what a raw snapshot is, what is
unknown about its history, what ``ls`` did not open, and an empty dump in one line."""

from __future__ import annotations

from pathlib import Path

from memforensics.analysis import list_dumps, summarize
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.folder import ls_text
from memforensics.analysis.schema import to_json
from memforensics.analysis.summary import summary_text
from memforensics.testing import TRAIN, Block, MiB, SnapshotBuilder, make_sidecar, write_dump


def _raw() -> SnapshotBuilder:
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(8), site=TRAIN), Block(MiB(2), state="inactive"))
    return builder


def test_raw_snapshot_header_says_what_it_is() -> None:
    """A pickle with no sidecar reads 'raw PyTorch snapshot, no sidecar', never 'kind ?'."""
    head = summary_text(summarize(dump_from_snapshot(_raw().build()))).splitlines()[0]
    assert head.endswith("(raw PyTorch snapshot, no sidecar)")
    assert "?" not in head


def test_sidecar_header_keeps_kind_and_rank() -> None:
    """With a sidecar the header names the kind and the rank, and JSON says a sidecar exists."""
    sidecar = make_sidecar("window", rank=3, steps=[4, 7])
    summary = summarize(dump_from_snapshot(_raw().build(), sidecar=sidecar))
    assert "(kind window, rank 3, steps 4-7)" in summary_text(summary).splitlines()[0]
    assert to_json(summary)["has_sidecar"] is True


def test_unknown_truncation_says_what_is_unknown() -> None:
    """Without a sidecar, a trace that starts with nothing live says so; one that starts with
    blocks live says so, and --verbose that older events may have been dropped; neither says
    'ring-buffer'."""
    text = summary_text(summarize(dump_from_snapshot(_raw().build())))
    [line] = [line for line in text.splitlines() if line.strip().startswith("history")]
    assert "(unknown)" not in line
    assert "ring-buffer" not in line
    assert "events (starts with nothing live)" in line
    snapshot = _raw().build()
    snapshot["device_traces"] = [snapshot["device_traces"][0][2:]]  # the live block's alloc dropped
    summary = summarize(dump_from_snapshot(snapshot))
    [line] = [line for line in summary_text(summary).splitlines() if "history" in line]
    assert line.endswith("events (blocks were live when it started)")
    verbose = summary_text(summary, verbose=True)
    [line] = [line for line in verbose.splitlines() if "history" in line]
    assert "blocks were live when it started; older events may have been dropped" in line


def test_empty_dump_prints_no_header_only_kind_tables() -> None:
    """A dump with nothing in it gets one line about kinds, no table headers without rows."""
    text = summary_text(
        summarize(dump_from_snapshot({"segments": [], "device_traces": [[]]})), verbose=True
    )
    assert "confidence" not in text
    assert "live memory by kind: nothing live" in text
    assert "history      none: nothing allocated" in text
    assert "history was not recorded" not in text
    assert "nothing allocated: the snapshot holds no segment" in text


def test_ls_of_raw_pickles_says_it_did_not_open_them(tmp_path: Path) -> None:
    """A folder of raw pickles is not 'no OOM dumps': ls says how many it could not judge."""
    for index in range(3):
        write_dump(tmp_path / f"snap{index}.pickle", _raw().build())
    head = ls_text(list_dumps(tmp_path)).splitlines()[0]
    assert "no OOM dumps" not in head
    assert "3 snapshot(s) of unknown kind (no sidecar), not opened" in head


def test_ls_counts_known_dumps_beside_raw_ones(tmp_path: Path) -> None:
    """With one window dump beside a raw pickle, ls names both counts."""
    write_dump(tmp_path / "a.pickle", _raw().build(), sidecar=make_sidecar("window"))
    write_dump(tmp_path / "b.pickle", _raw().build())
    head = ls_text(list_dumps(tmp_path)).splitlines()[0]
    assert head.startswith("no OOM dump among 1 of known kind; 1 snapshot(s) of unknown kind")
