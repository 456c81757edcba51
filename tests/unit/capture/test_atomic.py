"""The atomic writer: whole files or none, names that never collide, stale temp cleanup."""

from __future__ import annotations

import os
import pickle
import stat
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from memforensics import _layout
from memforensics.capture import atomic


def test_window_and_event_names_follow_design(tmp_path: Path) -> None:
    """Window files are rank{r}_pid{p}; OOM files add _step{n} and a UTC timestamp."""
    paths = atomic.window_paths(tmp_path, "steps4-7", 3, 77)
    assert paths.snapshot == tmp_path / "steps4-7" / "rank3_pid77.pickle"
    assert paths.sidecar == tmp_path / "steps4-7" / "rank3_pid77.json"
    now = datetime(2026, 11, 30, 10, 11, 12, 123456, tzinfo=timezone.utc)
    oom = atomic.event_paths(tmp_path, "oom", 3, 77, 12, now)
    assert oom.snapshot.name == "rank3_pid77_step12_20261130-101112-123456.pickle"
    assert atomic.event_paths(tmp_path, "oom", 3, 77, None, now).snapshot.name == (
        "rank3_pid77_20261130-101112-123456.pickle"
    )


def test_write_dump_round_trips_with_protocol_4(tmp_path: Path) -> None:
    """The snapshot is pickled with protocol 4 and the sidecar records its size."""
    paths = atomic.window_paths(tmp_path, "step1", 0, 1)
    snapshot = {"segments": [{"address": 1, "segment_pool_id": (0, 0)}], "device_traces": [[]]}
    size = atomic.write_dump(paths, snapshot, lambda n: {"snapshot_bytes": n})
    data = paths.snapshot.read_bytes()
    assert data[:2] == b"\x80\x04"
    assert pickle.loads(data) == snapshot
    assert size == len(data)
    assert f'"snapshot_bytes": {size}' in paths.sidecar.read_text()


def test_failed_pickle_leaves_nothing_behind(tmp_path: Path) -> None:
    """An unpicklable snapshot raises and leaves neither pickle, sidecar nor temp file."""
    paths = atomic.window_paths(tmp_path, "step1", 0, 1)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        atomic.write_dump(paths, {"bad": lambda: None}, lambda n: {})
    assert list((tmp_path / "step1").iterdir()) == []


def test_failed_sidecar_removes_its_snapshot_without_orphans(tmp_path: Path) -> None:
    """If the sidecar cannot be built, the pickle goes again and no sidecar or temp appears."""
    paths = atomic.window_paths(tmp_path, "step1", 0, 1)

    def broken(_: int) -> dict[str, object]:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        atomic.write_dump(paths, {"segments": []}, broken)
    assert sorted(p.name for p in (tmp_path / "step1").iterdir()) == []


def test_planted_symlink_at_final_name_is_replaced_not_followed(tmp_path: Path) -> None:
    """A symlink at the final name is replaced by the dump; its target is untouched."""
    target = tmp_path / "victim"
    target.write_text("precious")
    paths = atomic.window_paths(tmp_path, "step1", 0, 1)
    paths.snapshot.parent.mkdir()
    paths.snapshot.symlink_to(target)
    atomic.write_snapshot(paths.snapshot, {"segments": []})
    assert target.read_text() == "precious"
    assert not paths.snapshot.is_symlink()


def test_files_are_not_world_writable_even_with_umask_zero(tmp_path: Path) -> None:
    """Dump files are created 0644 at most, whatever the umask."""
    old = os.umask(0)
    try:
        path = tmp_path / "a.pickle"
        atomic.write_snapshot(path, {})
    finally:
        os.umask(old)
    assert not path.stat().st_mode & stat.S_IWOTH


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(dead.stdout)


def _plant(
    out_dir: Path, rank: int, host: str, pid: int, folder: str = "steps0-1", *, aged: bool = True
) -> Path:
    """A temp file as a writer killed mid-write leaves it, registered for ``rank``; ``aged``:
    last written longer than ``STALE_AFTER_S`` ago."""
    token = "abcd1234"
    temp = out_dir / folder / f".rank{rank}_pid{pid}.pickle.tmp-{host}-{pid}-{token}"
    temp.parent.mkdir(parents=True, exist_ok=True)
    temp.write_bytes(b"partial")
    if aged:
        old = time.time() - atomic.STALE_AFTER_S - 60
        os.utime(temp, (old, old))
    inflight = _layout.inflight_folder(out_dir, rank)
    inflight.mkdir(parents=True, exist_ok=True)
    (inflight / f".{host}-{pid}-{token}").symlink_to(f"{folder}/{temp.name}")
    return temp


def test_only_old_unlocked_temp_files_are_removed(tmp_path: Path) -> None:
    """This rank's registered temp file, old and unlocked, goes; a fresh one (a writer in
    another pid namespace, whose pid is dead here), an old one under a writer's lock, a
    foreign host's and other ranks' stay."""
    import fcntl

    dead_pid = _dead_pid()
    host = atomic._hostname()
    stale = _plant(tmp_path, 0, host, dead_pid)
    fresh = _plant(tmp_path, 0, host, dead_pid + 1, "steps2-3", aged=False)
    locked = _plant(tmp_path, 0, host, dead_pid + 2, "steps8-9")
    foreign = _plant(tmp_path, 0, "otherhost", dead_pid, "steps4-5")
    other_rank = _plant(tmp_path, 1, host, dead_pid, "steps6-7")
    with locked.open("rb") as holder:
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX)
        removed = atomic.clean_stale_temp_files(tmp_path, 0)
    assert removed == [stale]
    assert not stale.exists()
    for kept in (fresh, locked, foreign, other_rank):
        assert kept.exists()
    assert sorted(os.listdir(_layout.inflight_folder(tmp_path, 0))) == sorted(
        [
            f".{host}-{dead_pid + 1}-abcd1234",
            f".{host}-{dead_pid + 2}-abcd1234",
            f".otherhost-{dead_pid}-abcd1234",
        ]
    )


def test_a_writer_holds_its_temp_file_locked_until_the_rename(tmp_path: Path) -> None:
    """While a dump is written its temp file is locked: cleanup could not take it even if old."""
    import fcntl

    paths = atomic.window_paths(tmp_path, "step1", 0, 1)
    seen: list[bool] = []
    with atomic._atomic_file(paths.snapshot) as handle:
        handle.write(b"x")
        (temp,) = [p for p in paths.snapshot.parent.iterdir() if p.name.startswith(".")]
        with temp.open("rb") as probe:
            try:
                fcntl.flock(probe.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen.append(False)
            except BlockingIOError:
                seen.append(True)
    assert seen == [True]
    assert paths.snapshot.read_bytes() == b"x"


def test_install_time_cleanup_lists_only_the_ranks_own_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cleanup never walks out_dir: the one folder it lists is the rank's in-flight folder,
    however many dump folders and files out_dir holds."""
    for window in range(20):
        folder = tmp_path / f"step{window}"
        folder.mkdir()
        for rank in range(10):
            (folder / f"rank{rank}_pid1.pickle").write_bytes(b"x")
    stale = _plant(tmp_path, 3, atomic._hostname(), _dead_pid())
    listed: list[str] = []
    real_listdir, real_scandir = os.listdir, os.scandir

    def listdir(path: Any = ".") -> list[str]:
        listed.append(os.fspath(path))
        return real_listdir(path)

    def scandir(path: Any = ".") -> Any:
        listed.append(os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "walk", lambda *a, **k: pytest.fail("os.walk over out_dir"))
    monkeypatch.setattr(Path, "rglob", lambda *a, **k: pytest.fail("rglob over out_dir"))
    monkeypatch.setattr(Path, "iterdir", lambda *a, **k: pytest.fail("iterdir over out_dir"))
    assert atomic.clean_stale_temp_files(tmp_path, 3) == [stale]
    assert listed == [os.fspath(_layout.inflight_folder(tmp_path, 3))]


@pytest.mark.parametrize(
    "target",
    ["/etc/hostname", "../outside/.x.pickle.tmp-{host}-{pid}-abcd1234", "steps0-1/victim.pickle"],
)
def test_a_planted_registration_removes_nothing_else(tmp_path: Path, target: str) -> None:
    """A registration pointing outside out_dir, or at a file that is not that process's temp
    file, is dropped without deleting its target."""
    pid, host = _dead_pid(), atomic._hostname()
    out = tmp_path / "out"
    victim = out / "steps0-1" / "victim.pickle"
    victim.parent.mkdir(parents=True)
    victim.write_bytes(b"evidence")
    outside = tmp_path / "outside" / f".x.pickle.tmp-{host}-{pid}-abcd1234"
    outside.parent.mkdir()
    outside.write_bytes(b"not ours")
    inflight = _layout.inflight_folder(out, 0)
    inflight.mkdir(parents=True)
    link = inflight / f".{host}-{pid}-abcd1234"
    link.symlink_to(target.format(host=host, pid=pid))
    assert atomic.clean_stale_temp_files(out, 0) == []
    assert victim.read_bytes() == b"evidence"
    assert outside.read_bytes() == b"not ours"
    assert not os.path.lexists(link)


def test_writes_register_and_unregister_their_temp_files(tmp_path: Path) -> None:
    """While a dump is written its temp file is registered in the rank's folder; once it has
    landed (or failed) nothing is left registered."""
    paths = atomic.window_paths(tmp_path, "step0", 2, os.getpid())
    inflight = paths.inflight
    assert inflight is not None
    seen: list[str] = []
    modes: list[int] = []

    class Probe:
        def __reduce__(self) -> Any:
            seen.extend(os.readlink(inflight / name) for name in os.listdir(inflight))
            modes.extend(stat.S_IMODE(p.stat().st_mode) for p in (inflight.parent, inflight))
            return (int, ())

    old = os.umask(0)
    try:
        atomic.write_dump(paths, {"x": Probe()}, lambda n: {})
    finally:
        os.umask(old)
    assert modes == [0o755, 0o755]  # never world-writable, even under umask 0
    assert len(seen) == 1
    assert seen[0].startswith(f"step0/.rank2_pid{os.getpid()}.pickle.tmp-")
    assert not inflight.parent.exists()  # the empty folders go: out_dir holds only dumps
    with pytest.raises((pickle.PicklingError, AttributeError)):
        atomic.write_dump(paths, {"bad": lambda: None}, lambda n: {})
    assert sorted(os.listdir(tmp_path)) == ["step0"]


def test_remove_dump_folder_keeps_other_ranks_files(tmp_path: Path) -> None:
    """Retention deletes only this rank's files; the folder goes once it is empty."""
    mine = atomic.window_paths(tmp_path, "steps0-1", 0, 10)
    theirs = atomic.window_paths(tmp_path, "steps0-1", 1, 11)
    for paths in (mine, theirs):
        atomic.write_dump(paths, {}, lambda n: {})
    atomic.remove_dump_folder(tmp_path, "steps0-1", 0, 10)
    assert not mine.snapshot.exists()
    assert theirs.snapshot.exists()
    atomic.remove_dump_folder(tmp_path, "steps0-1", 1, 11)
    assert not (tmp_path / "steps0-1").exists()


def test_write_file_atomic_refuses_a_symlink_planted_at_its_temp_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A symlink waiting at the temporary name is never followed: the write fails, the link's
    target keeps its bytes and no page appears."""
    monkeypatch.setattr("memforensics.capture.atomic.secrets.token_hex", lambda _n: "feedbeef")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    page = tmp_path / "report.html"
    temp = f".{page.name}.tmp-{atomic._hostname()}-{os.getpid()}-feedbeef"
    (tmp_path / temp).symlink_to(victim)
    with pytest.raises(FileExistsError):
        atomic.write_file_atomic(page, b"<html>")
    assert victim.read_text() == "precious"
    assert not page.exists()


def test_write_file_atomic_replaces_a_symlink_at_the_final_name(tmp_path: Path) -> None:
    """A symlink at the page's own name is replaced by the page; its target is untouched."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    page = tmp_path / "report.html"
    page.symlink_to(victim)
    atomic.write_file_atomic(page, b"<html>")
    assert (page.is_symlink(), page.read_bytes(), victim.read_text()) == (
        False,
        b"<html>",
        "precious",
    )


def test_write_file_atomic_failure_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails before its rename (disk full at fsync) leaves neither the target, a
    temporary file, nor a changed older page."""
    page = tmp_path / "report.html"
    page.write_bytes(b"old page")

    def full(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space"):
        atomic.write_file_atomic(page, b"new page")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]
    assert page.read_bytes() == b"old page"
