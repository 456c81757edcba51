"""Writers on hostile ground: full disks, shared folders, absurd settings."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memforensics.capture import atomic
from memforensics.capture.atomic import window_paths, write_dump

_SHORT_WRITE = """
import resource, signal, sys
from pathlib import Path
from memforensics.capture.journal import Journal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
journal = Journal(Path(sys.argv[1]), 0, lambda: {})
journal.write("step", 0)
size = journal.path.stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (size + size // 2, resource.RLIM_INFINITY))
try:
    journal.write("step", 1)
except OSError as exc:
    print("refused", exc.errno)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
journal.write("step", 2)
print(journal.path.read_bytes().hex())
"""


def test_a_full_disk_never_leaves_a_torn_journal_line(tmp_path: Path) -> None:
    """A line cut short by the file size limit is taken back: whole lines only, and the next
    line after the limit lifts lands whole."""
    done = subprocess.run(
        [sys.executable, "-c", _SHORT_WRITE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    refused, content = done.stdout.splitlines()
    assert refused == f"refused {errno.ENOSPC}"
    data = bytes.fromhex(content)
    lines = data.split(b"\n")
    assert lines[-1] == b""
    assert [line.count(b'"step":') for line in lines[:-1]] == [1, 1]
    assert b'"step":0,' in lines[0]
    assert b'"step":2,' in lines[1]


def test_a_sidecar_that_cannot_be_written_takes_its_snapshot_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Disk full at the sidecar: the pickle is removed again, the error reaches the caller."""
    paths = window_paths(tmp_path, "step0", 0, 1)

    def full(*_: Any, **__: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic, "write_sidecar", full)
    with pytest.raises(OSError, match="No space"):
        write_dump(paths, {"segments": []}, lambda size: {"snapshot_bytes": size})
    assert not paths.snapshot.exists()
    assert list(paths.snapshot.parent.iterdir()) == []


_ABSURD = [
    ({"rank": 10**240}, {}, "rank", "2147483648"),
    ({}, {"RANK": "7" * 300}, "RANK", "2,147,483,647"),
    ({}, {"RANK": "-1"}, "RANK", "from 0"),
    ({}, {"WORLD_SIZE": "999999999999"}, "WORLD_SIZE", "2,147,483,647"),
    ({"ranks": [2**40]}, {}, "ranks", "2,147,483,647"),
    ({"max_entries": 10**30}, {}, "max_entries", "physical memory"),
    ({"steps": 10**30}, {}, "steps", "4611686018427387904"),
    ({"journal_every": 10**30}, {}, "journal_every", "4611686018427387904"),
    ({"out_dir": "/tmp/a\0b"}, {}, "out_dir", "NUL"),
    ({"out_dir": "/tmp/" + "d/" * 2000}, {}, "out_dir", "PATH_MAX"),
    ({"out_dir": "/tmp/" + "n" * 300}, {}, "out_dir", "NAME_MAX"),
]


@pytest.mark.parametrize(
    ("keywords", "environ", "named", "bound"),
    _ABSURD,
    ids=[a[2] + str(i) for i, a in enumerate(_ABSURD)],
)
def test_absurd_facts_fail_install_naming_field_and_bound(
    keywords: dict[str, Any],
    environ: dict[str, str],
    named: str,
    bound: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Ranks past 2^31, negative env ranks, counts of 10^30, NUL and overlong out_dirs: each is a
    ConfigError at install() naming the field (or variable) and the bound."""
    import memforensics
    from memforensics import ConfigError

    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    keywords = {"out_dir": str(tmp_path / "out"), **keywords}
    with pytest.raises(ConfigError) as caught:
        memforensics.install(device="sim", **keywords)
    memforensics.uninstall()
    message = str(caught.value)
    assert named in message
    assert bound in message
    assert len(message.splitlines()) == 1


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_folder_others_can_write_is_warned_about_at_install(
    tmp_path: Path, mode: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """out_dir inside a folder group- or world-writable without the sticky bit: a warning at
    install() names that folder; a private folder (0700) and a sticky one (1777) give none."""
    import memforensics
    from memforensics.capture.log import reset_logging

    shared, private, sticky = tmp_path / "shared", tmp_path / "private", tmp_path / "sticky"
    for folder, bits in ((shared, mode), (private, 0o700), (sticky, 0o1777)):
        folder.mkdir()
        folder.chmod(bits)
    tmp_path.chmod(0o700)
    for folder in (shared, private, sticky):
        reset_logging()
        memforensics.install(device="sim", out_dir=str(folder / "out"))
        memforensics.uninstall()
        err = capsys.readouterr().err
        warned = [line for line in err.splitlines() if "out_dir_unsafe" in line]
        if folder is shared:
            assert len(warned) == 1
            assert str(shared) in warned[0]
            assert "no sticky bit" in warned[0]
        else:
            assert warned == []
    reset_logging()


def test_a_folder_owned_by_another_user_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder owned by a uid that is neither this process's nor root's is listed."""
    import os

    from memforensics._layout import unsafe_folders

    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o755)
    tmp_path.chmod(0o700)
    if os.geteuid() == 0:
        os.chown(folder, 4242, -1)  # root's job in a folder another user made
    else:
        monkeypatch.setattr(os, "geteuid", lambda: folder.stat().st_uid + 1)
    listed = unsafe_folders(folder)
    assert listed[0].startswith(f"{folder} (")
    assert "owned by uid" in listed[0]


def test_two_live_processes_with_one_rank_and_pid_never_share_a_journal(tmp_path: Path) -> None:
    """Two writers of rank 0 with the same pid (containers with python as pid 1): the second
    finds the journal locked and writes its own tagged file; overview reads both, whole."""
    from memforensics.analysis import build_overview
    from memforensics.capture.journal import Journal

    first = Journal(tmp_path, 0, lambda: {"reserved_bytes": 1})
    second = Journal(tmp_path, 0, lambda: {"reserved_bytes": 2})
    for step in range(3):
        first.write("step", step)
        second.write("step", step)
    first.close()
    second.close()
    assert first.path != second.path
    assert second.token
    for journal, reserved in ((first, 1), (second, 2)):
        lines = journal.path.read_text().splitlines()
        assert len(lines) == 3
        assert all(f'"reserved_bytes":{reserved},' in line for line in lines)
    view = build_overview(tmp_path, workers=1)
    assert sum(j.lines for j in view.journals) == 6
    assert view.problems.torn_last_lines == ()


def test_a_second_process_with_one_rank_and_pid_names_its_dumps_apart(tmp_path: Path) -> None:
    """Another live process holds this rank and pid's journal (a container with the same pid):
    this process's windows, OOM dump and journal carry a token, the other's files stay whole,
    and retention removes this process's own tagged windows only."""
    import fcntl
    import os

    import memforensics
    from memforensics._layout import journal_name
    from memforensics.backends.sim import SimOutOfMemoryError, reset_device

    pid = os.getpid()
    out = tmp_path / "out"
    theirs_journal = out / "journal" / journal_name(0, pid)
    theirs_journal.parent.mkdir(parents=True)
    theirs_window = out / "step0" / f"rank0_pid{pid}.pickle"
    theirs_window.parent.mkdir()
    theirs_window.write_bytes(b"their window")
    device = reset_device(total_bytes=32 << 20)
    with theirs_journal.open("ab") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        mf = memforensics.install(
            device="sim", out_dir=str(out), rank=0, steps=1, keep_last=1, journal_every=1
        )
        for step in range(3):
            with mf.step(step):
                device.empty(1 << 20).free()
        try:
            with mf.step(3):
                device.empty(1 << 40)
        except SimOutOfMemoryError:
            pass
        dumps = list(mf.dumps)
        memforensics.uninstall()
    assert theirs_window.read_bytes() == b"their window"
    assert theirs_journal.read_bytes() == b""
    names = sorted(p.relative_to(out).as_posix() for p in dumps)
    assert names
    assert all(f"rank0_pid{pid}_" in name for name in names)
    assert not (out / "step1").exists()  # our tagged window, removed by retention
    ours = [p.name for p in (out / "journal").iterdir() if p != theirs_journal]
    assert len(ours) == 1
    assert ours[0].startswith(f"rank0_pid{pid}_")
