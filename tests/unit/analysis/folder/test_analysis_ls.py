"""ls: every dump of a run folder across ranks, the first OOM, and tolerance of stray files."""

from __future__ import annotations

from pathlib import Path

import pytest

from memforensics import SnapshotLoadError
from memforensics.analysis import list_dumps
from memforensics.analysis.schema import to_json
from memforensics.testing import write_run_folder


def test_run_folder_listing(tmp_path: Path) -> None:
    """All dumps are listed (gz and sidecar-less too); stray and temp files are not."""
    truth = write_run_folder(tmp_path, world_size=5)
    listing = list_dumps(tmp_path)
    assert len(listing.dumps) == truth.dumps
    kinds = sorted(entry.kind or "?" for entry in listing.dumps)
    assert kinds == ["manual", "manual", "oom", "oom", "oom", "oom", "window"]
    window = next(entry for entry in listing.dumps if entry.kind == "window")
    assert window.steps == (4, 7)
    assert window.rank == 0


def test_first_oom_is_earliest_by_sidecar_time(tmp_path: Path) -> None:
    """The highest rank failed first in the synthetic run, and ls says so."""
    truth = write_run_folder(tmp_path, world_size=8)
    first = to_json(list_dumps(tmp_path))["first_oom"]
    assert (first["rank"], first["step"], first["path"]) == (
        truth.first_oom_rank,
        12,
        str(truth.first_oom_path),
    )
    assert first["kind"] == "oom"


def test_dump_without_sidecar_is_placed_by_its_name(tmp_path: Path) -> None:
    """A gz dump without sidecar still has kind (folder), rank and time (file name)."""
    write_run_folder(tmp_path)
    entry = next(e for e in list_dumps(tmp_path).dumps if e.path.name.endswith(".gz"))
    assert entry.has_sidecar is False
    assert entry.kind == "manual"
    assert entry.rank == 0
    assert entry.created_at == "2026-11-30T10:15:00+00:00"


def test_broken_sidecar_is_reported_not_fatal(tmp_path: Path) -> None:
    """A sidecar that is not JSON is flagged on its entry; listing goes on."""
    write_run_folder(tmp_path)
    entry = next(e for e in list_dumps(tmp_path).dumps if e.path.name == "broken.pickle")
    assert entry.sidecar_error is not None
    assert "not valid JSON" in entry.sidecar_error


def test_not_a_folder(tmp_path: Path) -> None:
    """ls of a file or a missing path is a SnapshotLoadError."""
    with pytest.raises(SnapshotLoadError, match="not a folder"):
        list_dumps(tmp_path / "missing")


def test_empty_folder_has_no_first_oom(tmp_path: Path) -> None:
    """A folder with no dumps lists nothing and has no first OOM."""
    listing = list_dumps(tmp_path)
    assert listing.dumps == ()
    assert listing.first_oom is None


def test_an_empty_dump_file_is_empty_never_the_first_oom(tmp_path: Path) -> None:
    """0-byte OOM files, one with a sidecar and one without, earlier than every real OOM:
    ls and overview name the real first OOM and call the empty ones empty."""
    import json

    from memforensics.analysis import build_overview
    from memforensics.analysis.folder import ls_text, overview_text
    from memforensics.testing import make_sidecar

    truth = write_run_folder(tmp_path, world_size=8)
    oom = tmp_path / "oom"
    early = "2026-11-30T00:00:00+00:00"
    (oom / "rank6_pid9_step1_20261130-000000-000000.pickle").write_bytes(b"")
    (oom / "rank6_pid9_step1_20261130-000000-000000.json").write_text(
        json.dumps(make_sidecar("oom", rank=6, step=1, created_at=early))
    )
    (oom / "rank5_pid9_step1_20261130-000000-000001.pickle").write_bytes(b"")
    listing = list_dumps(tmp_path)
    assert listing.first_oom is not None
    assert listing.first_oom.path == truth.first_oom_path
    empty = [e for e in listing.dumps if e.empty]
    assert len(empty) == 2
    assert "E empty" in ls_text(listing)
    overview = build_overview(tmp_path, workers=1)
    assert overview.first_oom is not None
    assert overview.first_oom.rank == truth.first_oom_rank
    assert all(f.step != 1 for f in overview.failures)  # the empty files' step
    assert "empty (0 bytes)" in overview_text(overview)


def test_a_predicted_dump_is_flagged(tmp_path: Path) -> None:
    """A dump ``memforensics plan`` wrote is flagged ``~`` and ``predicted`` in JSON; the first
    OOM line says predicted; a measured dump beside it is not flagged."""
    from memforensics.analysis.dump import PREDICTED
    from memforensics.analysis.folder import ls_text
    from memforensics.testing import fragmented, make_sidecar, write_dump

    record = {"device_total_bytes": 80 << 30, "capability": "9.0", "context_bytes": 0}
    snapshot = fragmented().snapshot
    planned = write_dump(
        tmp_path / "oom" / "rank0_pid1.pickle",
        snapshot,
        sidecar=make_sidecar("oom", predicted=record),
    )
    write_dump(tmp_path / "manual" / "rank0_pid2.pickle", snapshot, sidecar=make_sidecar("manual"))
    listing = list_dumps(tmp_path)
    flags = {entry.kind: to_json(entry)["predicted"] for entry in listing.dumps}
    assert flags == {"oom": True, "manual": False}
    head, _, _, *rows = ls_text(listing).splitlines()
    assert PREDICTED in head
    row = {line.split()[0]: line for line in rows[:2]}
    assert " ~ " in row["oom"]
    assert " ~ " not in row["manual"]
    assert listing.first_oom is not None
    assert listing.first_oom.path == planned
