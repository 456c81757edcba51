"""Real faults against a real process: full disk, kill -9, a vanished folder, broken seams."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from evidence import SCRIPTS, check_evidence, run_script, temp_files, visible_files

import memforensics
import memforensics.capture.atomic
import memforensics.capture.dumps
import memforensics.capture.log
from memforensics.backends.sim import SimBackend, SimOutOfMemoryError, reset_device

MiB = 1 << 20

# -- disk full ------------------------------------------------------------------------------------


def _disk_full(tmp_path: Path, limits: list[int]) -> tuple[dict[str, Any], str]:
    out = tmp_path / "out"
    proc = run_script("fault_worker.py", "disk_full", out, *map(str, limits), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    assert report["steps_done"] == [0, 1, 2, 3, 4, 5]  # training never stopped
    assert report["oom_errors"] == 2  # the user saw both OOMs, as raised
    assert report["dumps_under_limit"] == []
    assert report["returned"] == [None] * (len(limits) - 1)
    assert report["stray"] == []  # no temp file, no sidecar without its snapshot, at any point
    names = sorted(str(p.relative_to(out).parent) for p in visible_files(out))
    assert names == ["manual", "manual", "oom", "oom", "steps4-5", "steps4-5"]
    assert [p for p in out.rglob("*") if p.is_file() and p.name.startswith(".")] == []
    assert check_evidence(out) == 3
    return report, proc.stderr


@pytest.mark.integration
def test_disk_full_dumps_fail_quietly_then_recover(tmp_path: Path) -> None:
    """Under RLIMIT_FSIZE writes fail (EFBIG): training goes on, warnings, nothing half-written."""
    _, stderr = _disk_full(tmp_path, [64 * 1024, 1, 4096, 100_000])
    failed = [line for line in stderr.splitlines() if "event='dump_failed'" in line]
    assert len(failed) == 6  # two windows, one OOM, three manual dumps
    assert all("File too large" in line for line in failed)


@pytest.mark.integration
@pytest.mark.stress
def test_disk_full_at_many_limits(tmp_path: Path) -> None:
    """Stress: 200 file-size limits from 0 bytes to just under the snapshot: no partial file."""
    rng = random.Random()
    limits = [64 * 1024, *sorted(rng.randrange(0, 100_000) for _ in range(199))]
    _, stderr = _disk_full(tmp_path, limits)
    failed = [line for line in stderr.splitlines() if "event='dump_failed'" in line]
    assert len(failed) == 3 + 199
    print(f"FIGURES disk_full faults_injected={len(failed)} partial_files=0")


# -- kill -9 mid-write --------------------------------------------------------------------------


def _kill_rounds(tmp_path: Path, rounds: int, events: int, max_delay: float) -> dict[str, int]:
    """Kill a dumping process at ``rounds`` random moments; check the folder after each."""
    rng = random.Random()
    stats = {"kills": 0, "mid_write": 0, "snapshots_checked": 0, "temp_files_cleaned": 0}
    for round_ in range(rounds):
        out = tmp_path / f"kill{round_}"
        with (
            (tmp_path / "worker.log").open("w") as log,
            subprocess.Popen(
                [sys.executable, str(SCRIPTS / "fault_worker.py"), "kill", str(out), str(events)],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            ) as proc,
        ):
            try:
                assert proc.stdout is not None
                assert proc.stdout.readline().strip() == "READY"
                time.sleep(rng.uniform(0.0, max_delay))
                proc.send_signal(signal.SIGKILL)
                assert proc.wait(timeout=30) == -signal.SIGKILL
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=30)
        stats["kills"] += 1
        left = temp_files(out)
        stats["mid_write"] += bool(left)
        assert all(f"-{proc.pid}-" in p.name for p in left)
        stats["snapshots_checked"] += check_evidence(out)
        memforensics.install(device="sim", out_dir=str(out))  # at once: too fresh to be stale
        memforensics.uninstall()
        assert temp_files(out) == left
        old = time.time() - memforensics.capture.atomic.STALE_AFTER_S - 60
        for temp in left:
            os.utime(temp, (old, old))
        memforensics.install(device="sim", out_dir=str(out))  # the next run, an hour on
        memforensics.uninstall()
        assert temp_files(out) == []
        stats["temp_files_cleaned"] += len(left)
        shutil.rmtree(out)
    return stats


@pytest.mark.integration
def test_kill_9_mid_write_leaves_whole_evidence_only(tmp_path: Path) -> None:
    """kill -9 at random moments of a dump loop: no truncated pickle, no orphan sidecar, cleanup."""
    reset_device(total_bytes=16 * MiB)
    stats = _kill_rounds(tmp_path, rounds=5, events=30_000, max_delay=0.3)
    assert stats["kills"] == 5


@pytest.mark.integration
@pytest.mark.stress
def test_kill_9_mid_write_many_times(tmp_path: Path) -> None:
    """Stress: 60 kills while 200k-event snapshots are written; most land inside a write."""
    reset_device(total_bytes=16 * MiB)
    stats = _kill_rounds(tmp_path, rounds=60, events=200_000, max_delay=1.0)
    assert stats["kills"] == 60
    assert stats["mid_write"] > 0
    print("FIGURES kill9 " + " ".join(f"{k}={v}" for k, v in stats.items()))


# -- unwritable or vanished out_dir -------------------------------------------------------------


def _break_out_dir(out: Path, how: str) -> None:
    if how == "removed":
        shutil.rmtree(out)
    elif how == "replaced_by_file":
        shutil.rmtree(out)
        out.write_text("in the way\n")
    elif how == "subfolders_are_files":
        for name in ("oom", "steps0-1", "steps2-3", "manual"):
            (out / name).write_text("in the way\n")


@pytest.mark.parametrize("how", ["removed", "replaced_by_file", "subfolders_are_files"])
def test_broken_out_dir_after_install_never_stops_training(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """out_dir removed or blocked by files after install: warnings only, OOMs reach the user."""
    # Tests run as root here, where chmod 0o500 blocks nothing: files in the way do.
    device = reset_device(total_bytes=32 * MiB)
    out = tmp_path / "out"
    mf = memforensics.install(device="sim", out_dir=str(out), steps=2, keep_last=None)
    _break_out_dir(out, how)
    seen: list[BaseException] = []
    reached: list[BaseException] = []
    for step in range(4):
        try:
            with mf.step(step):
                device.empty(MiB).free()
                if step == 1:
                    try:
                        device.empty(1 << 30)
                    except SimOutOfMemoryError as exc:
                        seen.append(exc)
                        raise
        except SimOutOfMemoryError as exc:
            reached.append(exc)
    assert len(reached) == 1
    assert reached[0] is seen[0]
    assert mf.dump() is None or how == "removed"
    mf.close()
    err = capsys.readouterr().err
    if how == "removed":  # the writer recreates the folders: the evidence still lands
        assert [p.parent.name for p in mf.dumps] == ["oom", "steps0-1", "steps2-3", "manual"]
        assert check_evidence(out) == 4
    else:
        assert mf.dumps == []
        assert err.count("event='dump_failed'") == 4
        assert temp_files(tmp_path) == []
    if how == "replaced_by_file":
        assert out.read_text() == "in the way\n"


# -- each seam of the OOM path failing in turn ------------------------------------------------


class _Boom(RuntimeError):
    """The injected fault."""


def _raiser(counter: list[int]) -> Callable[..., Any]:
    def boom(*_: object, **__: object) -> Any:
        counter.append(1)
        raise _Boom("injected fault")

    return boom


class _RaisingLogger:
    def __init__(self, counter: list[int]) -> None:
        self._boom = _raiser(counter)

    def __getattr__(self, name: str) -> Any:
        return self._boom


@pytest.fixture
def _structlog_reset() -> Iterator[None]:
    yield
    structlog.reset_defaults()


SEAMS = [
    "python_stack",
    "exception_stack",
    "memory_stats",
    "mem_get_info",
    "snapshot",
    "pickling",
    "fsync",
    "rename",
    "sidecar",
    "logger",
    "structlog_processor",
    "everything",
]


def _inject(seam: str, monkeypatch: pytest.MonkeyPatch, counter: list[int]) -> None:
    boom = _raiser(counter)
    every = seam == "everything"
    if seam in ("python_stack", "everything"):
        monkeypatch.setattr(memforensics.capture.dumps, "python_stack", boom)
    if seam in ("exception_stack", "everything"):
        monkeypatch.setattr(memforensics.capture.dumps, "exception_stack", boom)
    for name in ("memory_stats", "mem_get_info", "snapshot"):
        if seam == name or every:
            monkeypatch.setattr(SimBackend, name, boom)
    if seam in ("pickling", "everything"):
        monkeypatch.setattr(pickle, "dump", boom)
        monkeypatch.setattr(pickle, "dumps", boom)
    if seam in ("fsync", "everything"):
        monkeypatch.setattr(os, "fsync", boom)
    if seam in ("rename", "everything"):
        monkeypatch.setattr(os, "replace", boom)
    if seam in ("sidecar", "everything"):
        monkeypatch.setattr(memforensics.capture.atomic, "write_sidecar", boom)
    if seam in ("logger", "everything"):
        monkeypatch.setattr(memforensics.capture.log, "get_logger", lambda: _RaisingLogger(counter))
    if seam == "structlog_processor":
        structlog.configure(processors=[boom])


@pytest.mark.usefixtures("_structlog_reset")
@pytest.mark.parametrize("seam", SEAMS)
def test_every_oom_callback_step_failing_keeps_the_users_error(
    tmp_path: Path, seam: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any seam of the OOM path raising: the observer returns; the user gets the same OOM error."""
    device = reset_device(total_bytes=32 * MiB)
    out = tmp_path / "out"
    mf = memforensics.install(device="sim", out_dir=str(out), max_oom_snapshots=10)
    after_ours: list[int] = []  # an observer attached after ours runs only if ours returned
    device.attach_out_of_memory_observer(lambda *args: after_ours.append(args[1]))
    counter: list[int] = []
    _inject(seam, monkeypatch, counter)
    raised: list[BaseException] = []

    def train_step() -> None:
        try:
            device.empty(1 << 30)
        except SimOutOfMemoryError as exc:
            raised.append(exc)
            raise

    with pytest.raises(SimOutOfMemoryError) as observed, mf.step(0):
        train_step()
    assert observed.value is raised[0]
    assert after_ours == [1 << 30]
    nccl = RuntimeError("NCCL error: out of memory. Tried to allocate 2.00 GiB")
    with pytest.raises(RuntimeError) as fallback, mf.step(1):
        raise nccl  # the step() fallback path, which the observer never sees
    assert fallback.value is nccl
    with mf.step(2):
        kept = device.empty(MiB)  # training goes on
    assert kept.nbytes == MiB
    monkeypatch.undo()
    structlog.reset_defaults()
    assert counter, f"the {seam} fault was never hit"
    assert temp_files(out) == []
    check_evidence(out)


# -- concurrency --------------------------------------------------------------------------------


def _join(*threads: threading.Thread, timeout: float = 60) -> None:
    for thread in threads:
        thread.join(timeout)
        assert not thread.is_alive(), f"{thread.name} deadlocked"


def test_oom_on_another_thread_while_window_write_is_stalled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OOM dump lands while a window dump is stuck mid-write; then the window lands too."""
    device = reset_device(total_bytes=32 * MiB)
    out = tmp_path / "out"
    mf = memforensics.install(device="sim", out_dir=str(out), steps=1, max_windows=1)
    stalled, release = threading.Event(), threading.Event()
    real_fsync = os.fsync
    first = threading.Lock()

    def fsync(fd: int) -> None:
        if first.acquire(blocking=False):  # the window snapshot's fsync: hold it there
            stalled.set()
            assert release.wait(60)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)

    def train() -> None:
        with mf.step(0):
            device.empty(MiB).free()

    errors: list[BaseException] = []

    def oom() -> None:
        try:
            device.empty(1 << 30)
        except SimOutOfMemoryError as exc:
            errors.append(exc)

    trainer = threading.Thread(target=train, name="trainer", daemon=True)
    trainer.start()
    assert stalled.wait(30)
    other = threading.Thread(target=oom, name="oom", daemon=True)
    other.start()
    _join(other, timeout=30)
    assert len(errors) == 1
    assert [p.parent.name for p in visible_files(out) if p.suffix == ".pickle"] == ["oom"]
    release.set()
    _join(trainer, timeout=30)
    mf.close()
    assert sorted(p.parent.name for p in mf.dumps) == ["oom", "step0"]
    assert check_evidence(out) == 2


def _storm(tmp_path: Path, calls: int, threads: int, cap: int) -> float:
    device = reset_device(total_bytes=32 * MiB)
    out = tmp_path / "out"
    mf = memforensics.install(device="sim", out_dir=str(out), max_oom_snapshots=cap)
    errors = [0] * threads

    def worker(index: int) -> None:
        for _ in range(calls // threads):
            try:
                device.empty(1 << 30)
            except SimOutOfMemoryError:
                errors[index] += 1

    started = time.monotonic()
    pool = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for thread in pool:
        thread.start()
    _join(*pool, timeout=300)
    elapsed = time.monotonic() - started
    assert sum(errors) == calls  # every caller got its OOM error
    assert len(mf.dumps) == cap
    assert check_evidence(out) == cap
    assert temp_files(out) == []
    return elapsed


def test_oom_storm_is_capped_and_bounded(tmp_path: Path) -> None:
    """10,000 OOM observer calls from 4 threads: 3 dumps, no deadlock, under 60 seconds."""
    assert _storm(tmp_path, calls=10_000, threads=4, cap=3) < 60


@pytest.mark.stress
def test_oom_storm_stress(tmp_path: Path) -> None:
    """Stress: 200,000 OOM observer calls from 16 threads: exactly the cap, bounded time."""
    elapsed = _storm(tmp_path, calls=200_000, threads=16, cap=5)
    assert elapsed < 300
    print(f"FIGURES storm calls=200000 threads=16 dumps=5 seconds={elapsed:.1f}")


def _install_churn(tmp_path: Path, threads: int, rounds: int) -> None:
    device = reset_device(total_bytes=32 * MiB)
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            for round_ in range(rounds):
                mf = memforensics.install(
                    device="sim",
                    out_dir=str(tmp_path / f"out{index}"),
                    steps=1 + index % 2,
                    max_oom_snapshots=2,
                )
                with mf.step(round_):
                    device.empty(MiB).free()
                with contextlib.suppress(SimOutOfMemoryError):
                    device.empty(1 << 30)
                if round_ % 3 == 0:
                    memforensics.uninstall()
                elif round_ % 3 == 1:
                    mf.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for thread in pool:
        thread.start()
    _join(*pool, timeout=120)
    assert errors == []
    assert len(device._observers) == 1  # one observer, ever
    final = memforensics.install(device="sim", out_dir=str(tmp_path / "final"))
    with pytest.raises(SimOutOfMemoryError):
        device.empty(1 << 30)
    assert [p.parent.name for p in final.dumps] == ["oom"]  # the live facade still observes
    for folder in tmp_path.iterdir():
        check_evidence(folder)
        assert temp_files(folder) == []
    oom_dumps = list(tmp_path.glob("out*/oom/*.pickle"))
    assert 0 < len(oom_dumps) <= 2 * threads * rounds


def test_install_uninstall_from_many_threads(tmp_path: Path) -> None:
    """install/close/uninstall racing on 4 threads: no deadlock, one observer, whole files."""
    _install_churn(tmp_path, threads=4, rounds=15)


@pytest.mark.stress
def test_install_uninstall_from_many_threads_stress(tmp_path: Path) -> None:
    """Stress: 16 threads x 100 install/close/uninstall rounds with OOMs and windows."""
    _install_churn(tmp_path, threads=16, rounds=100)


def test_closing_a_stale_facade_never_silences_the_live_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow close() of an old facade racing install() of a new one never silences the new one."""
    device = reset_device(total_bytes=32 * MiB)
    old = memforensics.install(device="sim", out_dir=str(tmp_path / "old"), steps=4)
    with old.step(0):
        device.empty(MiB).free()
    stalled, release = threading.Event(), threading.Event()
    real_fsync = os.fsync
    first = threading.Lock()

    def fsync(fd: int) -> None:
        if first.acquire(blocking=False):  # the old facade's partial-window dump
            stalled.set()
            assert release.wait(60)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    closer = threading.Thread(target=old.close, name="closer", daemon=True)
    closer.start()
    assert stalled.wait(30)
    installed: list[memforensics.MemoryForensics] = []
    installer = threading.Thread(
        target=lambda: installed.append(
            memforensics.install(device="sim", out_dir=str(tmp_path / "new"), oom_history="all")
        ),
        name="installer",
        daemon=True,
    )
    installer.start()
    installer.join(0.2)  # let it race the close as far as it can
    release.set()
    _join(closer, installer, timeout=30)
    [new] = installed
    kept = device.empty(3 * MiB)
    with pytest.raises(SimOutOfMemoryError):
        device.empty(1 << 30)
    assert [p.parent.name for p in new.dumps] == ["oom"]  # still observing
    trace = pickle.loads(new.dumps[0].read_bytes())["device_traces"][0]
    assert [e["size"] for e in trace if e["action"] == "alloc"] == [kept.nbytes]  # still recording
