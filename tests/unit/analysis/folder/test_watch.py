"""watch's reader: new bytes only, torn last lines left for later, rows most urgent first."""

from __future__ import annotations

import os
from pathlib import Path

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
    """A second poll reads just the appended bytes; half a line is left until it is whole."""
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
    assert watch.bytes_read == len(first) + 20 + len(nxt)  # the torn part is read twice
    assert watch.poll() == 0
    assert watch.bytes_read == len(first) + 20 + len(nxt)


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
