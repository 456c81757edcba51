"""A worker of the process that installed memforensics is inert: what install() does there.

The real processes (spawn, forkserver and fork DataLoader workers, pool children) are in
tests/integration/test_worker_children.py; here the parent is named through the two facts the
rule reads, the marker and ``multiprocessing.parent_process()``, to check what follows from them.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

import memforensics
from memforensics.capture.health import INSTALLER_ENV


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as a child of pid 4242, which installed memforensics; RANK inherited."""
    monkeypatch.setenv(INSTALLER_ENV, "4242")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: SimpleNamespace(pid=4242))


@pytest.mark.usefixtures("worker")
def test_a_worker_writes_nothing_and_logs_one_debug_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No files, no observer, no history; status says whose worker it is; one debug line."""
    monkeypatch.setenv("MEMFORENSICS_LOG_LEVEL", "DEBUG")
    mf = memforensics.install(device="sim", out_dir=str(tmp_path / "run"), steps=1)
    with mf.step(0):
        pass
    assert mf.dump() is None
    mf.close()
    assert not (tmp_path / "run").exists()
    assert not mf.oom_attached
    assert mf.status.inert == "a worker process of pid 4242, which installed memforensics"
    lines = [line for line in capsys.readouterr().err.splitlines() if "inert_worker" in line]
    assert len(lines) == 1
    assert "level='debug'" in lines[0]


@pytest.mark.usefixtures("worker")
def test_a_worker_that_names_its_rank_captures(tmp_path: Path) -> None:
    """rank= given by the child itself: it is a rank, and it captures."""
    mf = memforensics.install(device="sim", out_dir=str(tmp_path / "run"), rank=3)
    assert mf.status.capturing
    assert mf.dump() is not None


def test_a_rank_under_a_launcher_that_installed_still_captures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A marker from elsewhere without a multiprocessing parent (a torchrun rank started by a
    script that installed) is no worker: it captures."""
    monkeypatch.setenv(INSTALLER_ENV, "4242")
    mf = memforensics.install(device="sim", out_dir=str(tmp_path / "run"))
    assert mf.status.capturing
    assert os.environ[INSTALLER_ENV] == str(os.getpid())
    memforensics.uninstall()
    assert INSTALLER_ENV not in os.environ
