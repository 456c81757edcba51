"""The per-rank memory journal on the sim device: when lines are written, what they say, bounds."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import memforensics
from memforensics._layout import journal_name
from memforensics.backends.sim import SimOutOfMemoryError, reset_device
from memforensics.capture.config import JOURNAL_EVERY, build_config
from memforensics.capture.journal import KEYS, MAX_OOM_LINES, Journal

MiB = 1 << 20


def _lines(out: Path) -> list[dict[str, Any]]:
    files = sorted((out / "journal").glob("*.jsonl"))
    assert len(files) == 1, files
    return [json.loads(line) for line in files[0].read_text().splitlines()]


def test_lines_at_every_nth_step_window_end_oom_and_close(tmp_path: Path) -> None:
    """journal_every=3: steps 0, 3, 6 and 9, the window's last step, the OOM and close()."""
    device = reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(
        device="sim", out_dir=str(tmp_path), journal_every=3, steps=2, skip_first=4, max_windows=1
    )
    for step in range(10):
        with mf.step(step):
            device.empty(MiB).free()
            if step == 8:
                with pytest.raises(SimOutOfMemoryError):
                    device.empty(1 << 30)
    mf.close()
    lines = _lines(tmp_path)
    assert [(line["event"], line["step"]) for line in lines] == [
        ("step", 0),
        ("step", 3),
        ("window", 5),
        ("step", 6),
        ("oom", 8),
        ("step", 9),
        ("close", 9),
    ]
    assert all(tuple(line) == KEYS for line in lines)  # every key, in one order, always
    assert {line["rank"] for line in lines} == {0}
    assert lines[4]["ooms"] == 1
    assert lines[3]["ooms"] == 0
    assert lines[4]["alloc_retries"] == 1  # the sim retries once after freeing the cache
    times = [line["time"] for line in lines]
    assert times == sorted(times)


def test_figures_are_the_allocators_and_peaks_are_never_reset(tmp_path: Path) -> None:
    """allocated/reserved/free/limit match the device; external = limit - free - reserved."""
    device = reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), journal_every=1)
    held = []
    with mf.step(0):
        held.append(device.empty(5 * MiB))
        spike = device.empty(20 * MiB)
        spike.free()
    allocated, reserved = device.allocated_bytes, device.reserved_bytes
    with mf.step(1):
        pass
    mf.close()
    step0, step1 = _lines(tmp_path)[:2]
    assert step1["allocated_bytes"] == allocated == 5 * MiB
    assert step1["reserved_bytes"] == reserved
    assert step1["active_bytes"] == 5 * MiB
    assert step1["peak_allocated_bytes"] == 25 * MiB  # the spike, still the peak a step later
    assert step0["peak_allocated_bytes"] == 25 * MiB
    assert step1["device_total_bytes"] == 64 * MiB
    assert step1["device_free_bytes"] == 64 * MiB - reserved
    assert step1["external_bytes"] == 0  # the sim has nothing outside its allocator
    assert device.memory_stats()["allocated_bytes.all.peak"] == 25 * MiB


def test_journal_off_with_none_and_on_by_default(tmp_path: Path) -> None:
    """journal_every=None writes no journal; the default is JOURNAL_EVERY, via env var too."""
    reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path / "off"), journal_every=None)
    for step in range(3):
        with mf.step(step):
            pass
    mf.close()
    assert not (tmp_path / "off" / "journal").exists()
    assert build_config({}).journal_every == JOURNAL_EVERY
    assert build_config({}, {"MEMFORENSICS_JOURNAL_EVERY": "none"}).journal_every is None
    assert build_config({}, {"MEMFORENSICS_JOURNAL_EVERY": " 25 "}).journal_every == 25
    with pytest.raises(memforensics.ConfigError, match="MEMFORENSICS_JOURNAL_EVERY"):
        build_config({}, {"MEMFORENSICS_JOURNAL_EVERY": "0"})


def test_only_capturing_ranks_write(tmp_path: Path) -> None:
    """A rank outside ``ranks`` is inert: no journal file."""
    reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), rank=3, ranks=[0, 1])
    with mf.step(0):
        pass
    mf.close()
    assert not (tmp_path / "journal").exists()


def test_file_name_carries_rank_and_pid(tmp_path: Path) -> None:
    """The journal is journal/rank{R}_pid{P}.jsonl, so ranks sharing a folder never collide."""
    reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), rank=7)
    with mf.step(0):
        pass
    mf.close()
    assert [p.name for p in (tmp_path / "journal").iterdir()] == [f"rank7_pid{os.getpid()}.jsonl"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX-only")
def test_forked_child_never_writes(tmp_path: Path) -> None:
    """A DataLoader-style forked child stepping and closing adds no line to the parent's file."""
    reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), journal_every=1)
    with mf.step(0):
        pass
    before = _lines(tmp_path)
    pid = os.fork()
    if pid == 0:  # the child: everything it does must leave the journal alone
        code = 0
        try:
            with mf.step(1):
                pass
            mf._journal.line("step", 1)
            mf.close()
        except BaseException:  # noqa: BLE001 - report through the exit status
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _lines(tmp_path) == before
    mf.close()
    assert [line["event"] for line in _lines(tmp_path)] == ["step", "close"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX-only")
def test_a_journal_created_in_a_forked_child_writes(tmp_path: Path) -> None:
    """A training process started by fork (multiprocessing's default) keeps its own journal."""
    pid = os.fork()
    if pid == 0:
        journal = Journal(tmp_path, 4, dict)
        code = 0 if journal.write("step", 0) else 1
        journal.close()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert [p.name for p in (tmp_path / "journal").iterdir()] == [journal_name(4, pid)]


def test_rotation_bounds_the_file_and_keeps_whole_lines(tmp_path: Path) -> None:
    """Past max_bytes the file becomes .1.jsonl and a new one starts: 2 files, whole lines."""
    stats = dict.fromkeys(KEYS[4:-1], 1)
    journal = Journal(tmp_path, 2, lambda: stats, max_bytes=2000)
    for step in range(100):
        assert journal.write("step", step)
    journal.close()
    assert not journal.write("step", 100)  # closed: nothing more
    folder = tmp_path / "journal"
    current = folder / journal_name(2, os.getpid())
    rotated = folder / journal_name(2, os.getpid(), 1)
    assert sorted(p.name for p in folder.iterdir()) == sorted([current.name, rotated.name])
    for path in (current, rotated):
        assert path.stat().st_size <= 2000
        assert path.read_bytes().endswith(b"\n")
    texts = [p.read_text() for p in (rotated, current)]
    steps = [json.loads(line)["step"] for text in texts for line in text.splitlines()]
    assert steps == list(range(100 - len(steps), 100))  # the newest lines, in order
    assert len(steps) >= 2000 // 400


def test_unwritable_journal_folder_warns_and_training_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file where journal/ should be: one warning, steps and the OOM dump still work."""
    device = reset_device(total_bytes=64 * MiB)
    (tmp_path / "journal").write_text("not a folder")
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), journal_every=1)
    for step in range(3):
        with mf.step(step):
            pass
    with pytest.raises(SimOutOfMemoryError):
        device.empty(1 << 30)
    mf.close()
    assert len(mf.dumps) == 1
    assert capsys.readouterr().err.count("event='journal_failed'") == 1


def test_an_oom_retry_loop_cannot_flood_the_journal(tmp_path: Path) -> None:
    """A loop that hits OOM forever writes MAX_OOM_LINES oom lines; ooms counts them all."""
    device = reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), journal_every=1)
    with mf.step(0):
        for _ in range(MAX_OOM_LINES + 20):
            with pytest.raises(SimOutOfMemoryError):
                device.empty(1 << 30)
    mf.close()
    lines = _lines(tmp_path)
    assert [line["event"] for line in lines].count("oom") == MAX_OOM_LINES
    assert lines[-1]["event"] == "close"
    assert lines[-1]["ooms"] == MAX_OOM_LINES + 20
