"""A disk that takes no files at ``install()`` pauses capture; it never stops the job.

Where this machine lets the test mount file systems (root in a container that allows it), the
disk is real: a 64 KiB tmpfs filled to the brim (ENOSPC) or remounted read-only (EROFS). Where
it does not, and always for EDQUOT (no quota can be set up here), the same ``OSError`` is raised
by the call that meets it, ``atomic.check_writable``, whose refusal decides whether capture may
write; the writes behind it then go to an ordinary folder, so the tests still prove that
nothing is written while the disk is refused and that it all lands once it is not.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import memforensics
from memforensics._errors import ConfigError
from memforensics.capture import atomic
from memforensics.cli._main import main


@dataclass
class Disk:
    """A folder on a disk that takes no files until ``free()``; ``real`` when mounted."""

    root: Path
    free: Callable[[], None]
    real: bool
    code: str


def _mount(target: Path, options: str) -> bool:
    if shutil.which("mount") is None or os.geteuid() != 0:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def _refused(code: int, monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Make ``check_writable`` fail with ``code`` until the returned ``free`` is called."""
    real = atomic.check_writable
    state = {"blocked": True}

    def check(out_dir: Path) -> None:
        if state["blocked"]:
            raise OSError(code, os.strerror(code), str(out_dir))
        real(out_dir)

    monkeypatch.setattr(atomic, "check_writable", check)
    return lambda: state.update(blocked=False)


@pytest.fixture(params=["ENOSPC", "EROFS", "EDQUOT"])
def disk(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Disk]:
    """A disk full, read-only or over quota: mounted for real where allowed, else refused."""
    kind = request.param
    mount = tmp_path / "mnt"
    mount.mkdir()
    if kind != "EDQUOT" and _mount(mount, "size=64k"):
        try:
            if kind == "ENOSPC":
                filler = mount / "filler"
                _fill(filler)
                yield Disk(mount, filler.unlink, real=True, code=kind)
            else:
                remount = ["mount", "-o", "remount,{}", str(mount)]
                ro = [part.format("ro") for part in remount]
                rw = [part.format("rw") for part in remount]
                subprocess.run(ro, check=True, capture_output=True)
                yield Disk(mount, lambda: subprocess.run(rw, check=True), real=True, code=kind)
        finally:
            memforensics.uninstall()
            subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True)
        return
    yield Disk(mount, _refused(getattr(errno, kind), monkeypatch), real=False, code=kind)


def _fill(path: Path) -> None:
    """Write zeros to ``path`` until the file system says it is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="No space left"):
            _write_forever(fd)
    finally:
        os.close(fd)


def _write_forever(fd: int) -> None:
    while True:
        os.write(fd, b"\0" * 4096)


def _files(root: Path) -> list[str]:
    return sorted(
        str(Path(folder, name).relative_to(root))
        for folder, _dirs, names in os.walk(root)
        for name in names
        if name != "filler"
    )


def test_a_disk_that_takes_no_files_at_install_pauses_capture_then_resumes(
    disk: Disk, capsys: pytest.CaptureFixture[str]
) -> None:
    """install() on a full, read-only or over-quota disk returns with one warning, writes
    nothing while the disk refuses, says so in mf.status, and lands dumps once it takes files."""
    out = disk.root / "run"
    mf = memforensics.install(device="sim", out_dir=str(out), steps=1, journal_every=1)
    for step in range(3):
        with mf.step(step):
            pass
    assert mf.dump() is None
    status = mf.status
    assert status.capturing
    assert not status.writing
    assert status.out_dir_error is not None
    assert status.out_dir_error.endswith(f"({disk.code})")
    assert _files(disk.root) == []
    warned = [line for line in capsys.readouterr().err.splitlines() if "out_dir_unwritable" in line]
    assert len(warned) == 1

    disk.free()
    with mf.step(3):
        pass
    assert mf.dump() is not None
    assert mf.status.writing
    mf.close()
    landed = _files(out)
    assert any(name.startswith("step3/") for name in landed)
    assert any(name.startswith("manual/") for name in landed)
    assert any(name.startswith("journal/") for name in landed)
    assert not any(name.startswith(("step0/", "step1/", "step2/")) for name in landed)


def test_a_paused_disk_is_tried_again_at_each_write_and_never_in_between(
    disk: Disk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the disk refuses, capture probes it once per dump and per journal line, and never
    on steps that write nothing: no timer, no poll."""
    mf = memforensics.install(device="sim", out_dir=str(disk.root / "run"), journal_every=10)
    with mf.step(0):  # writes the first journal line (refused)
        pass
    probes: list[Path] = []
    real = atomic.check_writable

    def counted(out_dir: Path) -> None:
        probes.append(out_dir)
        real(out_dir)

    monkeypatch.setattr(atomic, "check_writable", counted)
    for step in range(1, 10):  # no journal line falls due on steps 1 to 9
        with mf.step(step):
            pass
    assert probes == []
    mf.dump()
    mf.dump()
    assert len(probes) == 2
    with mf.step(10):  # a journal line falls due
        pass
    assert len(probes) == 3
    assert _files(disk.root) == []


@pytest.mark.parametrize("code", [errno.EACCES, errno.ENOTDIR])
def test_a_path_the_user_cannot_write_is_still_a_config_error(
    code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EACCES and ENOTDIR are the path's fault, not the disk's: install() raises ConfigError."""
    _refused(code, monkeypatch)
    with pytest.raises(ConfigError, match="out_dir"):
        memforensics.install(device="sim", out_dir=str(tmp_path / "run"))


def test_out_dir_under_a_file_is_still_a_config_error(tmp_path: Path) -> None:
    """A real ENOTDIR (out_dir below a regular file) fails install() as before."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="out_dir"):
        memforensics.install(device="sim", out_dir=str(tmp_path / "file" / "run"))


def test_doctor_warns_about_a_paused_disk_and_exits_zero(
    disk: Disk, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """doctor on such a disk: a WARN line for out_dir that says training goes on; exit 0."""
    monkeypatch.setenv("COLUMNS", "400")  # a screen wide enough for the tmp path on one line
    code = main(["doctor", "--device", "sim", "--out-dir", str(disk.root / "run")])
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "out_dir" in line and "WARN" in line)
    assert "training goes on" in line
    assert code == 0
