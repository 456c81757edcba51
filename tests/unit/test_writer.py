"""The atomic writer: whole files or none, names that never collide, stale temp cleanup."""

from __future__ import annotations

import os
import pickle
import stat
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from memforensics import _writer


def test_window_and_event_names_follow_design(tmp_path: Path) -> None:
    """Window files are rank{r}_pid{p}; OOM files add _step{n} and a UTC timestamp."""
    paths = _writer.window_paths(tmp_path, "steps4-7", 3, 77)
    assert paths.snapshot == tmp_path / "steps4-7" / "rank3_pid77.pickle"
    assert paths.sidecar == tmp_path / "steps4-7" / "rank3_pid77.json"
    now = datetime(2026, 11, 30, 10, 11, 12, 123456, tzinfo=timezone.utc)
    oom = _writer.event_paths(tmp_path, "oom", 3, 77, 12, now)
    assert oom.snapshot.name == "rank3_pid77_step12_20261130-101112-123456.pickle"
    assert _writer.event_paths(tmp_path, "oom", 3, 77, None, now).snapshot.name == (
        "rank3_pid77_20261130-101112-123456.pickle"
    )


def test_write_dump_round_trips_with_protocol_4(tmp_path: Path) -> None:
    """The snapshot is pickled with protocol 4 and the sidecar records its size."""
    paths = _writer.window_paths(tmp_path, "step1", 0, 1)
    snapshot = {"segments": [{"address": 1, "segment_pool_id": (0, 0)}], "device_traces": [[]]}
    size = _writer.write_dump(paths, snapshot, lambda n: {"snapshot_bytes": n})
    data = paths.snapshot.read_bytes()
    assert data[:2] == b"\x80\x04"
    assert pickle.loads(data) == snapshot
    assert size == len(data)
    assert f'"snapshot_bytes": {size}' in paths.sidecar.read_text()


def test_failed_pickle_leaves_nothing_behind(tmp_path: Path) -> None:
    """An unpicklable snapshot raises and leaves neither pickle, sidecar nor temp file."""
    paths = _writer.window_paths(tmp_path, "step1", 0, 1)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        _writer.write_dump(paths, {"bad": lambda: None}, lambda n: {})
    assert list((tmp_path / "step1").iterdir()) == []


def test_failed_sidecar_keeps_whole_snapshot_without_orphans(tmp_path: Path) -> None:
    """If the sidecar cannot be built, the whole pickle stays and no sidecar or temp appears."""
    paths = _writer.window_paths(tmp_path, "step1", 0, 1)

    def broken(_: int) -> dict[str, object]:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        _writer.write_dump(paths, {"segments": []}, broken)
    assert sorted(p.name for p in (tmp_path / "step1").iterdir()) == ["rank0_pid1.pickle"]


def test_planted_symlink_at_final_name_is_replaced_not_followed(tmp_path: Path) -> None:
    """A symlink at the final name is replaced by the dump; its target is untouched."""
    target = tmp_path / "victim"
    target.write_text("precious")
    paths = _writer.window_paths(tmp_path, "step1", 0, 1)
    paths.snapshot.parent.mkdir()
    paths.snapshot.symlink_to(target)
    _writer.write_snapshot(paths.snapshot, {"segments": []})
    assert target.read_text() == "precious"
    assert not paths.snapshot.is_symlink()


def test_files_are_not_world_writable_even_with_umask_zero(tmp_path: Path) -> None:
    """Dump files are created 0644 at most, whatever the umask."""
    old = os.umask(0)
    try:
        path = tmp_path / "a.pickle"
        _writer.write_snapshot(path, {})
    finally:
        os.umask(old)
    assert not path.stat().st_mode & stat.S_IWOTH


def test_stale_temp_files_of_dead_processes_are_removed(tmp_path: Path) -> None:
    """Temp files from a dead pid on this host go; a live pid's and foreign hosts' stay."""
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(dead.stdout)
    host = _writer._hostname()
    folder = tmp_path / "steps0-1"
    folder.mkdir()
    stale = folder / f".rank0_pid{dead_pid}.pickle.tmp-{host}-{dead_pid}-abcd1234"
    live = folder / f".rank1_pid{os.getpid()}.pickle.tmp-{host}-{os.getpid()}-abcd1234"
    foreign = folder / f".rank2_pid{dead_pid}.pickle.tmp-otherhost-{dead_pid}-abcd1234"
    for path in (stale, live, foreign):
        path.write_bytes(b"partial")
    removed = _writer.clean_stale_temp_files(tmp_path)
    assert removed == [stale]
    assert live.exists()
    assert foreign.exists()


def test_remove_dump_folder_keeps_other_ranks_files(tmp_path: Path) -> None:
    """Retention deletes only this rank's files; the folder goes once it is empty."""
    mine = _writer.window_paths(tmp_path, "steps0-1", 0, 10)
    theirs = _writer.window_paths(tmp_path, "steps0-1", 1, 11)
    for paths in (mine, theirs):
        _writer.write_dump(paths, {}, lambda n: {})
    _writer.remove_dump_folder(tmp_path, "steps0-1", 0, 10)
    assert not mine.snapshot.exists()
    assert theirs.snapshot.exists()
    _writer.remove_dump_folder(tmp_path, "steps0-1", 1, 11)
    assert not (tmp_path / "steps0-1").exists()
