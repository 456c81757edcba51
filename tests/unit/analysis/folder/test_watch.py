"""watch's reader: new bytes only, torn last lines left for later, rows most urgent first."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from memforensics._layout import journal_folder, journal_name
from memforensics.analysis.folder import JournalWatch, watch_text
from memforensics.capture.journal import format_line
from memforensics.testing import write_journals

GIB = 1 << 30
MIB = 1 << 20


def _line(step: int, allocated: int, *, event: str = "step", rank: int = 0) -> bytes:
    stats: dict[str, int | None] = {
        "allocated_bytes": allocated,
        "reserved_bytes": allocated + GIB,
        "peak_reserved_bytes": allocated + GIB,
        "alloc_retries": 0,
        "ooms": 1 if event == "oom" else 0,
        "device_free_bytes": 80 * GIB - allocated - GIB,
        "device_total_bytes": 80 * GIB,
    }
    return format_line(event, step, rank, stats, 1_796_000_000.0 + step)


def test_reads_only_new_bytes_and_waits_for_a_torn_line(tmp_path: Path) -> None:
    """A second poll reads just the appended bytes; half a line waits until it is whole."""
    folder = journal_folder(tmp_path)
    folder.mkdir()
    path = folder / journal_name(0, 7)
    first = b"".join(_line(s, 40 * GIB) for s in range(3))
    path.write_bytes(first)
    watch = JournalWatch(tmp_path)
    assert watch.poll() == 3
    assert watch.bytes_read == len(first)
    nxt = _line(3, 41 * GIB)
    with open(path, "ab") as handle:
        handle.write(nxt[:20])
    assert watch.poll() == 0
    assert watch.view().torn_lines == 1
    assert watch.view().rows[0].step == 2
    with open(path, "ab") as handle:
        handle.write(nxt[20:])
    assert watch.poll() == 1
    view = watch.view()
    assert (view.torn_lines, view.rows[0].step, view.rows[0].allocated_bytes) == (0, 3, 41 * GIB)
    assert watch.bytes_read == len(first) + len(nxt)  # each byte once: the torn part was kept
    assert watch.poll() == 0
    assert watch.bytes_read == len(first) + len(nxt)


def test_a_rotated_file_is_read_from_its_start(tmp_path: Path) -> None:
    """When the journal rotates, the fresh file's lines are read from byte 0."""
    folder = journal_folder(tmp_path)
    folder.mkdir()
    path = folder / journal_name(0, 7)
    path.write_bytes(b"".join(_line(s, 40 * GIB) for s in range(5)))
    watch = JournalWatch(tmp_path)
    watch.poll()
    os.replace(path, folder / journal_name(0, 7, 1))
    path.write_bytes(_line(5, 42 * GIB))
    assert watch.poll() == 1
    assert watch.view().rows[0].allocated_bytes == 42 * GIB


def test_rows_put_failed_then_drifting_then_least_headroom_first(tmp_path: Path) -> None:
    """A failed rank leads, the drifting rank comes next, the rest by least headroom."""
    truth = write_journals(
        tmp_path, ranks=6, lines=40, every=10, leak_rank=4, leak_per_line=128 * MIB,
        jitter=64 * MIB, leak_fails=False,
    )  # fmt: skip
    failed = journal_folder(tmp_path) / journal_name(2, 1002)
    with open(failed, "ab") as handle:
        handle.write(_line(truth.lines * truth.every, 41 * GIB, event="oom", rank=2))
    watch = JournalWatch(tmp_path)
    watch.poll()
    view = watch.view()
    order = [row.rank for row in view.rows]
    assert order[:2] == [2, 4]
    assert view.rows[1].forecast is not None
    assert all(row.forecast is None for row in view.rows[2:])
    rest = [row.headroom_bytes or 0 for row in view.rows[2:]]
    assert rest == sorted(rest)
    assert view.first_oom is not None
    assert view.first_oom.rank == 2
    assert watch_text(view).splitlines()[0].startswith("6 ranks · allocated ")


def test_a_fifo_named_like_a_journal_never_blocks_a_poll(tmp_path: Path) -> None:
    """A FIFO where a journal should be is skipped: the poll returns and still reads the rest."""
    folder = journal_folder(tmp_path)
    folder.mkdir()
    os.mkfifo(folder / journal_name(1, 9))
    (folder / journal_name(0, 7)).write_bytes(_line(0, 40 * GIB))
    watch = JournalWatch(tmp_path)
    assert watch.poll() == 1
    assert [row.rank for row in watch.view().rows] == [0]


def test_a_line_that_never_ends_is_read_once_in_bounded_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """8 MiB with no newline, polled ten times: each byte is read once, never more than one
    chunk per poll; the overlong line is skipped and counted, and the next line reads."""
    import memforensics.analysis.folder.watch as watch_module

    got: list[int] = []
    real = watch_module.open_regular

    class Counted:
        def __init__(self, handle: Any) -> None:
            self._handle = handle

        def __enter__(self) -> Counted:
            self._handle.__enter__()
            return self

        def __exit__(self, *exc: object) -> None:
            self._handle.__exit__(*exc)

        def fileno(self) -> int:
            return int(self._handle.fileno())

        def seek(self, offset: int) -> None:
            self._handle.seek(offset)

        def read(self, size: int) -> bytes:
            data: bytes = self._handle.read(size)
            got.append(len(data))
            return data

    monkeypatch.setattr(watch_module, "open_regular", lambda path: Counted(real(path)))
    folder = journal_folder(tmp_path)
    folder.mkdir()
    path = folder / journal_name(0, 7)
    path.write_bytes(b"x" * (8 << 20))
    watch = JournalWatch(tmp_path)
    for _ in range(10):
        assert watch.poll() == 0
    assert sum(got) == 8 << 20
    assert max(got) <= watch_module.READ_CHUNK
    with open(path, "ab") as handle:
        handle.write(b"\n" + _line(5, 40 * GIB))
    assert watch.poll() == 1
    view = watch.view()
    assert view.rows[0].step == 5
    assert view.skipped_lines == 1
    assert sum(got) == path.stat().st_size


def test_lines_with_a_nan_time_or_a_negative_figure_are_skipped_and_counted(
    tmp_path: Path,
) -> None:
    """A NaN-time OOM line and a line of -5 allocated bytes: watch shows no failure, no
    negative memory, and says two lines were skipped; overview says the same."""
    from memforensics.analysis import build_overview
    from memforensics.analysis.folder import overview_text

    folder = journal_folder(tmp_path)
    folder.mkdir()
    good = _line(1, 40 * GIB)
    nan_oom = _line(2, 40 * GIB, event="oom").replace(b'"time":1796000002.0', b'"time":NaN')
    negative = _line(3, 40 * GIB).replace(b'"allocated_bytes":42949672960', b'"allocated_bytes":-5')
    assert b"NaN" in nan_oom
    assert b"-5" in negative
    (folder / journal_name(0, 7)).write_bytes(good + nan_oom + negative)
    watch = JournalWatch(tmp_path)
    watch.poll()
    view = watch.view()
    assert (view.failed_ranks, view.first_oom, view.skipped_lines) == (0, None, 2)
    assert view.rows[0].allocated_bytes == 40 * GIB
    assert "2 journal line(s) skipped" in watch_text(view)
    overview = build_overview(tmp_path, workers=1)
    assert overview.first_oom is None
    assert overview.problems.bad_lines == 2
    assert overview.rank(0).last_allocated_bytes == 40 * GIB  # type: ignore[union-attr]
    assert "2 journal line(s) skipped" in overview_text(overview)
