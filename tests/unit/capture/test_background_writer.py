"""Window dumps written by a forked child: whole or absent, reaped, retained and flushed."""

from __future__ import annotations

import json
import os
import pickle
import signal
import time
from pathlib import Path
from typing import Any

import pytest

import memforensics
from memforensics.backends.sim import reset_device
from memforensics.capture import atomic, background
from memforensics.capture.config import build_config

MiB = 1 << 20


class _Sleeper:
    """Pickling this blocks the writer for a while, so a test can act mid-write."""

    def __reduce__(self) -> Any:
        time.sleep(30)
        return (int, ())


def _forking(tmp_path: Path, **config: Any) -> memforensics.MemoryForensics:
    reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), **config)
    mf._dumper.writer = "fork"
    return mf


def _visible(root: Path) -> list[str]:
    """Dump files below ``root`` (the journal/ folder has its own tests: test_journal.py)."""
    files = (p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    return sorted(name for name in files if not name.startswith("journal/"))


pytestmark = pytest.mark.skipif(not background.fork_supported(), reason="forks only on Linux")


def test_forked_window_lands_whole_and_is_listed(tmp_path: Path) -> None:
    """A window written by the child is listed by ``dumps`` with its sidecar beside it."""
    mf = _forking(tmp_path, steps=2)
    for step in range(2):
        with mf.step(step):
            pass
    assert mf._dumper._background.pending or mf._dumper.dumps
    (dump,) = mf.dumps
    assert dump.parent.name == "steps0-1"
    assert pickle.loads(dump.read_bytes())["device_traces"] is not None
    sidecar = json.loads(dump.with_suffix(".json").read_text())
    assert sidecar["snapshot_bytes"] == dump.stat().st_size
    assert sidecar["kind"] == "window"
    assert not mf._dumper._background.pending


def test_retention_applies_after_each_forked_window_lands(tmp_path: Path) -> None:
    """keep_last=1 keeps the first and newest windows; older ones go once a newer one lands."""
    mf = _forking(tmp_path, steps=1, keep_last=1)
    for step in range(4):
        with mf.step(step):
            pass
    assert [p.parent.name for p in mf.dumps] == ["step0", "step3"]
    assert sorted({Path(p).parts[0] for p in _visible(tmp_path)}) == ["step0", "step3"]


def test_close_waits_for_the_child(tmp_path: Path) -> None:
    """After close() the window written in the background is on disk: nothing is left behind."""
    mf = _forking(tmp_path, steps=1)
    with mf.step(0):
        pass
    mf.close()
    assert not mf._dumper._background.pending
    assert any(name.endswith(".pickle") for name in _visible(tmp_path))


def test_failed_child_warns_and_lists_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unpicklable snapshot fails in the child: a dump_failed warning, no file, no raise."""
    mf = _forking(tmp_path, steps=1)
    mf._dumper.backend.snapshot = lambda: {"segments": [], "bad": lambda: None}  # type: ignore[method-assign]
    with mf.step(0):
        pass
    assert mf.dumps == []
    assert "dump_failed" in capsys.readouterr().err
    assert [n for n in _visible(tmp_path) if not Path(n).name.startswith(".")] == []


def test_killed_child_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A writer killed mid-write leaves no visible file and its signal is named in the warning."""
    writer = background.BackgroundWriter()
    results: list[background.WriteResult] = []
    paths = atomic.window_paths(tmp_path, "step0", 0, os.getpid())
    assert writer.submit(paths, {"x": _Sleeper()}, lambda n: {}, results.append, 1)
    assert writer._child is not None
    os.kill(writer._child.pid, signal.SIGKILL)
    writer.flush()
    assert results == [background.WriteResult(False, error="writer process killed by signal 9")]
    assert not paths.snapshot.exists()
    assert not paths.sidecar.exists()


def test_a_forked_copy_of_the_owner_neither_waits_nor_writes(tmp_path: Path) -> None:
    """In a process forked from the owner (a DataLoader worker) the writer does nothing."""
    writer = background.BackgroundWriter()
    results: list[background.WriteResult] = []
    paths = atomic.window_paths(tmp_path, "step0", 0, os.getpid())
    assert writer.submit(paths, {"segments": []}, lambda n: {}, results.append, 1)
    child = writer._child
    owner = writer._owner
    writer._owner = owner + 1  # as seen from a forked copy: another pid owns the child
    assert writer.submit(paths, {}, lambda n: {}, results.append, 1) is False
    writer.flush()
    assert results == []
    assert not writer.pending
    writer._owner, writer._child = owner, child
    writer.flush()
    assert results[0].ok
    assert paths.snapshot.exists()


def test_costs_prefer_inline_for_small_writes_and_large_processes() -> None:
    """Forking is chosen only when the write it saves clearly outweighs the fork's cost."""
    costs = background.WriteCosts()
    costs.write_seconds_per_entry = 1e-6
    costs.fork_seconds_per_byte = 0.01 / (1 << 30)  # 10 ms per GiB
    assert not costs.prefer_fork(1_000, 1 << 30)  # 1 ms of writing: stays inline
    assert costs.prefer_fork(200_000, 1 << 30)  # 200 ms of writing vs 10 ms of fork
    assert not costs.prefer_fork(200_000, 20 << 30)  # a 20 GiB process: 200 ms of fork
    costs.observed_fork(0.002, 1 << 30)
    costs.observed_write(0.5, 100_000)
    assert costs.fork_seconds_per_byte == pytest.approx(0.002 / (1 << 30))
    assert costs.write_seconds_per_entry == pytest.approx(5e-6)


def test_tiny_windows_stay_synchronous(tmp_path: Path) -> None:
    """With writer="auto", a small window is written inline: on disk as the step ends."""
    reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), steps=1)
    with mf.step(0):
        pass
    assert not mf._dumper._background.pending
    assert len(mf._dumper.dumps) == 1


def test_snapshot_weight_counts_trace_entries_and_blocks() -> None:
    """Weight is trace entries plus blocks, and 0 for a shape it does not know."""
    snapshot = {"segments": [{"blocks": [{}, {}]}], "device_traces": [[{}] * 3, []]}
    assert background.snapshot_weight(snapshot) == 5
    assert background.snapshot_weight(None) == 0


def test_forked_window_sidecar_names_the_training_process(tmp_path: Path) -> None:
    """A window the forked child wrote records the training process's pid, the one its file
    name carries, not the child's."""
    mf = _forking(tmp_path, steps=1)
    with mf.step(0):
        pass
    (dump,) = mf.dumps
    sidecar = json.loads(dump.with_suffix(".json").read_text())
    assert sidecar["pid"] == os.getpid()
    assert dump.name == f"rank0_pid{sidecar['pid']}.pickle"


def test_a_slow_fsync_never_makes_a_tiny_window_fork(tmp_path: Path) -> None:
    """After one tiny write that took seconds (a slow fsync), the next tiny window is still
    written inline: on disk as soon as step() returns."""
    reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), steps=1)
    costs = mf._dumper._background.costs
    costs.observed_write(2.0, 3)  # 3 entries in 2 s: fixed costs, not a per-entry cost
    assert costs.write_seconds_per_entry == background.WRITE_SECONDS_PER_ENTRY
    costs.write_seconds_per_entry = 1.0  # even if a huge per-entry cost had been learned
    with mf.step(0):
        pass
    assert not mf._dumper._background.pending
    assert (tmp_path / "step0" / f"rank0_pid{os.getpid()}.pickle").is_file()
    assert not costs.prefer_fork(background.MIN_FORK_WEIGHT - 1, 0)


def test_writer_inline_never_forks(tmp_path: Path) -> None:
    """writer="inline" (a public config field) writes every window on the training thread,
    however large and however slow writes were."""
    reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), steps=1, writer="inline")
    assert mf.config.writer == "inline"
    big = {"segments": [], "device_traces": [[{"action": "alloc"}] * 200_000]}
    mf._dumper.backend.snapshot = lambda: big  # type: ignore[method-assign]
    mf._dumper._background.costs.write_seconds_per_entry = 1.0
    with mf.step(0):
        pass
    assert not mf._dumper._background.pending
    assert (tmp_path / "step0" / f"rank0_pid{os.getpid()}.pickle").is_file()


def test_writer_field_is_validated_and_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """writer accepts "auto" and "inline" (also as MEMFORENSICS_WRITER); anything else fails
    at install with the field named."""
    monkeypatch.setenv("MEMFORENSICS_WRITER", "inline")
    assert memforensics.ForensicsConfig().writer == "auto"
    assert build_config({}).writer == "inline"
    with pytest.raises(memforensics.ConfigError, match="writer"):
        build_config({"writer": "fork"})
