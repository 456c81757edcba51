"""overview: the whole run from synthetic journals with known truth, damage included."""

from __future__ import annotations

import base64
import builtins
import json
import os
from pathlib import Path
from typing import Any

import pytest

from memforensics import SnapshotLoadError
from memforensics._layout import journal_name
from memforensics.analysis import build_overview, explain
from memforensics.analysis.diagnosis import Diagnosis
from memforensics.analysis.folder import overview_text
from memforensics.analysis.folder.overview import PARALLEL_FROM
from memforensics.analysis.folder.text import rank_ranges
from memforensics.analysis.report import render_overview
from memforensics.analysis.report.overview_page import overview_data
from memforensics.analysis.schema import to_json
from memforensics.capture.journal import Journal, format_line
from memforensics.testing import make_sidecar, write_journals, write_run_folder

GiB = 1 << 30


def test_leaking_rank_is_first_oom_outlier_and_differs_from_peer_by_its_leak(
    tmp_path: Path,
) -> None:
    """16 ranks, rank 5 leaks 256 MiB a line: first OOM, the only outlier, and the leak's bytes."""
    truth = write_journals(tmp_path, ranks=16, lines=50, leak_rank=5)
    view = build_overview(tmp_path, workers=1)
    assert len(view.ranks) == 16
    assert view.steps == (0, truth.oom_step)
    first = view.first_oom
    assert first is not None
    assert (first.rank, first.step, first.source) == (5, truth.oom_step, "journal")
    assert {(o.rank, o.figure) for o in view.outliers} == {
        (5, "peak_reserved_bytes"),
        (5, "reserved_growth_per_1k_steps"),
    }
    cmp = view.comparison
    assert cmp is not None
    healthy = {r: held for r, held in truth.held.items() if r != 5}
    peer = min(healthy, key=lambda r: (healthy[r], r))  # least reserved, lowest rank on ties
    assert (cmp.rank, cmp.peer, cmp.step, cmp.peer_step) == (
        5,
        peer,
        truth.oom_step,
        truth.oom_step,
    )
    expected = truth.held[5] + truth.leaked_at_oom - truth.held[peer]
    assert cmp.differences["allocated_bytes"] == expected
    assert cmp.differences["reserved_bytes"] == expected
    assert cmp.differences["external_bytes"] == 0
    leak = view.rank(5)
    assert leak is not None
    growth = leak.reserved_growth_per_1k_steps
    assert growth == pytest.approx(truth.leak_per_line * 1000 / truth.every)
    assert {r.reserved_growth_per_1k_steps for r in view.ranks if r.rank != 5} == {0.0}


def test_no_leak_no_outlier_no_oom(tmp_path: Path) -> None:
    """A healthy symmetric run: nobody stands out (64 MiB noise is under the 5 % floor)."""
    write_journals(tmp_path, ranks=12, lines=20, leak_rank=None)
    view = build_overview(tmp_path, workers=1)
    assert view.first_oom is None
    assert view.outliers == ()
    assert view.comparison is None
    assert "no OOM" in overview_text(view)


def test_damage_is_reported_never_raised(tmp_path: Path) -> None:
    """Missing rank, torn last line, a restart under a new pid and under the same pid."""
    truth = write_journals(
        tmp_path, ranks=16, lines=30, missing=[9], torn=[2], restarted=[4], same_pid_restart=[6]
    )
    view = build_overview(tmp_path, workers=1)
    problems = view.problems
    assert problems.ranks_missing == (9,)
    assert problems.torn_last_lines == (2,)
    assert problems.bad_lines == 0  # a torn last line is expected, not an error
    assert problems.restarts == {4: (1004, 51004), 6: (1006, 1006)}
    rank2, rank4, rank6 = view.rank(2), view.rank(4), view.rank(6)
    assert rank2 is not None
    assert rank4 is not None
    assert rank6 is not None
    assert rank2.lines == truth.lines
    assert rank4.lines == rank6.lines == truth.lines + 10  # the restart redid the last 10
    assert rank4.pids == (1004, 51004)
    assert view.rank(9) is None
    text = overview_text(view)
    assert "nothing at all from rank(s) 9" in text
    assert "rank 4 restarted (pids 1004, 51004)" in text


def test_bad_lines_in_the_middle_are_skipped_and_counted(tmp_path: Path) -> None:
    """Garbage, a list, lines without a usable time are dropped; out-of-range ints are unknown."""
    write_journals(tmp_path, ranks=3, lines=10, leak_rank=None)
    path = next((tmp_path / "journal").glob("rank1_*.jsonl"))
    good = path.read_bytes().splitlines(keepends=True)
    odd = [b"{not json\n", b"[1, 2]\n", b'{"step": 3}\n', b'{"time": 1e300, "step": 1}\n']
    huge = b'{"time": 1.0, "step": %d, "reserved_bytes": %d}\n' % (2**70, 2**65)
    path.write_bytes(b"".join([*good[:4], *odd, huge, *good[4:]]))
    view = build_overview(tmp_path, workers=1)
    assert view.problems.bad_lines == 4  # the huge line is read, its figures unknown
    rank1 = view.rank(1)
    assert rank1 is not None
    assert rank1.lines == 11


def test_sidecars_place_ranks_without_journal_and_their_oom(tmp_path: Path) -> None:
    """An OOM sidecar of a rank with no journal: named as failed, world size from the sidecar."""
    write_journals(tmp_path, ranks=4, lines=10, leak_rank=None)
    oom = tmp_path / "oom"
    oom.mkdir()
    (oom / "rank6_pid9_step300_20261130-101112-000001.pickle").write_bytes(b"not read")
    sidecar = make_sidecar("oom", rank=6, world_size=8, step=300, created_at="2020-01-01T00:00:00Z")
    (oom / "rank6_pid9_step300_20261130-101112-000001.json").write_text(json.dumps(sidecar))
    view = build_overview(tmp_path, workers=1)
    assert view.world_size == 8
    assert view.problems.ranks_without_journal == (6,)
    assert view.problems.ranks_missing == (4, 5, 7)
    first = view.first_oom
    assert first is not None
    assert (first.rank, first.step, first.source) == (6, 300, "sidecar")
    rank6 = view.rank(6)
    assert rank6 is not None
    assert rank6.dumps == ("oom/rank6_pid9_step300_20261130-101112-000001.pickle",)


def test_reads_no_pickle_and_stats_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One listing per folder: no os.stat per file (but for an OOM dump without a sidecar,
    to tell an empty file from an OOM), and no snapshot is ever opened."""
    write_journals(tmp_path, ranks=8, lines=5)
    for name in ("steps0-3", "oom"):
        (tmp_path / name).mkdir()
        for rank in range(8):
            (tmp_path / name / f"rank{rank}_pid{1000 + rank}.pickle").write_bytes(b"x")
    stats: list[str] = []
    opened: list[str] = []
    real_stat, real_open, real_os_open = os.stat, builtins.open, os.open

    def counting_stat(path: Any, *args: Any, **kwargs: Any) -> Any:
        stats.append(str(path))
        return real_stat(path, *args, **kwargs)

    def watching_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    def watching_os_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(path))
        return real_os_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counting_stat)
    monkeypatch.setattr(builtins, "open", watching_open)
    monkeypatch.setattr(os, "open", watching_os_open)
    view = build_overview(tmp_path, workers=1)
    monkeypatch.undo()
    assert len(view.ranks) == 8
    sidecarless_ooms = [p for p in stats if os.path.basename(os.path.dirname(p)) == "oom"]
    assert len(sidecarless_ooms) == 8
    assert len(stats) - len(sidecarless_ooms) <= 1  # the root's is_dir() check
    assert not [p for p in opened if p.endswith(".pickle")]
    assert len([p for p in opened if p.endswith(".jsonl")]) == 8


def test_worker_processes_give_the_same_answer(tmp_path: Path) -> None:
    """Enough files to fan out to worker processes: the result equals the in-process one."""
    write_journals(tmp_path, ranks=PARALLEL_FROM + 8, lines=6, leak_rank=3, torn=[7])
    serial = to_json(build_overview(tmp_path, workers=1))
    parallel = to_json(build_overview(tmp_path, workers=2))
    assert parallel == serial
    assert serial["first_oom"]["rank"] == 3


def test_journal_folder_given_directly_and_empty_or_missing_folders(tmp_path: Path) -> None:
    """DIR may be the journal/ folder itself; an empty folder is no error; a missing one is."""
    write_journals(tmp_path / "run", ranks=3, lines=4, leak_rank=None)
    assert len(build_overview(tmp_path / "run" / "journal", workers=1).ranks) == 3
    (tmp_path / "empty").mkdir()
    empty = build_overview(tmp_path / "empty", workers=1)
    assert empty.ranks == ()
    assert "no rank left a journal line or a dump" in overview_text(empty)
    with pytest.raises(SnapshotLoadError, match="not a folder"):
        build_overview(tmp_path / "nowhere")


def _cells(data: dict[str, Any], layer: str) -> bytes:
    return base64.b64decode(data["layers"][layer]["cells"])


def test_heatmap_cells_hold_each_columns_largest_value(tmp_path: Path) -> None:
    """One column per line here: the leak's row climbs to 255, a missing rank's row is empty."""
    truth = write_journals(tmp_path, ranks=6, lines=20, leak_rank=2, missing=[4])
    view = build_overview(tmp_path, workers=1)
    data = overview_data(view, link_base=tmp_path)
    columns = data["columns"]
    assert (columns, data["column_steps"], data["ranks"]) == (20, truth.every, list(range(6)))
    reserved = _cells(data, "reserved")
    rows = [reserved[r * columns : (r + 1) * columns] for r in range(6)]
    assert rows[4] == bytes(columns)  # rank 4 wrote nothing: no data, not zero bytes
    assert rows[2][-1] == 255
    assert list(rows[2]) == sorted(rows[2])  # the leak only grows
    low = data["layers"]["reserved"]["min"]
    assert low == min(truth.held[r] for r in truth.held) + 2 * GiB
    assert data["ooms"] == [[2, 19]]
    assert data["first_oom"] == 2
    assert data["outliers"] == [2]


def test_page_is_offline_and_links_dumps_relatively(tmp_path: Path) -> None:
    """No URL but the dumps' relative paths; the data block cannot close its script tag."""
    write_journals(tmp_path, ranks=4, lines=5, leak_rank=1)
    (tmp_path / "oom").mkdir()
    (tmp_path / "oom" / "rank1_pid1001_step400_20261130-101112-000001.pickle").write_bytes(b"x")
    page = render_overview(build_overview(tmp_path, workers=1), link_base=tmp_path / "site")
    assert "http://" not in page
    assert "https://" not in page
    assert page.count("</script>") == 2
    data = json.loads(page.split('id="overview-data">')[1].split("</script>")[0])
    assert data["facts"]["1"]["dumps"] == [
        "../oom/rank1_pid1001_step400_20261130-101112-000001.pickle"
    ]


def test_lines_with_unknown_figures_read_as_unknown(tmp_path: Path) -> None:
    """A device that reports nothing (all figures null): ranks are listed, figures unknown."""
    folder = tmp_path / "journal"
    folder.mkdir()
    for rank in range(3):
        lines = [format_line("step", step, rank, {}, 1.0e9 + step) for step in range(5)]
        (folder / journal_name(rank, 10 + rank)).write_bytes(b"".join(lines))
    view = build_overview(tmp_path, workers=1)
    assert [r.rank for r in view.ranks] == [0, 1, 2]
    assert {
        (r.peak_reserved_bytes, r.alloc_retries, r.reserved_growth_per_1k_steps) for r in view.ranks
    } == {(None, None, None)}
    assert view.outliers == ()
    assert "rank" in overview_text(view)
    data = overview_data(view)
    assert _cells(data, "reserved") == bytes(len(_cells(data, "reserved")))


def test_rank_lists_read_as_ranges() -> None:
    """Thousands of ranks print as runs: '0-3, 7', and past the limit '+N more'."""
    assert rank_ranges([3, 0, 1, 2, 7]) == "0-3, 7"
    assert rank_ranges(range(0, 40, 2), limit=3) == "0, 2, 4, +17 more"
    assert rank_ranges([]) == ""


def test_a_rotated_journal_is_read_oldest_file_first(tmp_path: Path) -> None:
    """rank{R}_pid{P}.1.jsonl (older) then rank{R}_pid{P}.jsonl: one process, steps in order."""
    stats = {"reserved_bytes": 5, "allocated_bytes": 4}
    journal = Journal(tmp_path, 3, lambda: stats, max_bytes=4000)
    for step in range(60):
        journal.write("step", step)
    journal.close()
    names = sorted(p.name for p in (tmp_path / "journal").iterdir())
    assert len(names) == 2  # rotated once at least, one older generation kept
    view = build_overview(tmp_path, workers=1)
    (rank,) = view.ranks
    kept = sum(len(p.read_bytes().splitlines()) for p in (tmp_path / "journal").iterdir())
    assert (rank.rank, rank.pids, rank.lines, rank.last_step) == (3, (journal.pid,), kept, 59)
    assert rank.first_step == 60 - kept
    assert view.problems.restarts == {}


def test_journals_without_step_lines_are_never_a_restart(tmp_path: Path) -> None:
    """Workers' journals of one close line each (newer than the training process's) name no
    restart, and the rank's last figures stay the training process's, not the workers' zeros."""
    write_journals(tmp_path, ranks=2, lines=20, leak_rank=None)
    folder = tmp_path / "journal"
    for pid in (7001, 7002):
        line = format_line("close", None, 0, {"reserved_bytes": 0}, 2_000_000_000.0 + pid)
        (folder / journal_name(0, pid)).write_bytes(line)
    view = build_overview(tmp_path, workers=1)
    assert view.problems.restarts == {}
    rank0 = view.rank(0)
    assert rank0 is not None
    assert rank0.last_reserved_bytes is not None
    assert rank0.last_reserved_bytes > GiB
    assert "restarted" not in overview_text(view)


def test_first_failing_rank_carries_summarys_diagnosis(tmp_path: Path) -> None:
    """overview asks the story of the first failing rank's OOM dump, and only of it, and
    names its cause with explain's own headline (one diagnosis everywhere) under the
    first-OOM line."""
    truth = write_run_folder(tmp_path, world_size=3)
    asked: list[Path] = []

    def diagnose(path: Path) -> Diagnosis | None:
        asked.append(path)
        return explain(path).diagnosis

    view = build_overview(tmp_path, workers=1, diagnose=diagnose)
    assert view.first_oom is not None
    assert view.first_oom.rank == truth.first_oom_rank
    [dump] = (tmp_path / "oom").glob(f"rank{truth.first_oom_rank}_*.pickle")
    assert asked == [dump]
    expected = explain(dump).diagnosis
    assert expected is not None
    assert view.first_oom_diagnosis == expected
    lines = overview_text(view).splitlines()
    assert lines[2] == f"cause: {expected.headline}"[: len(lines[2])]
    assert build_overview(tmp_path, workers=1).first_oom_diagnosis is None  # no pickle opened
