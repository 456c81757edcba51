"""explain reads what lies beside a dump in its run folder, and only that: its rank's window
dumps; evidence_files names exactly what it reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from memforensics.analysis import Dump, explain, load_dump, summarize
from memforensics.analysis.compare import leaks
from memforensics.analysis.report import ReportBuilder
from memforensics.analysis.story import evidence_files
from memforensics.testing import (
    Block,
    JournalTruth,
    MiB,
    Site,
    SnapshotBuilder,
    make_sidecar,
    write_dump,
    write_journals,
)

LEAK = Site("/job/train.py", 30, "remember")
TRAIN = Site("/job/model.py", 40, "forward")
OOM_NAME = "rank{rank}_pid1_step16_20261130-101112-000001.pickle"


def _windows(root: Path, rank: int, site: Site) -> list[Path]:
    """Three window dumps of ``rank`` in which ``site`` grows 16 MiB a step from step 4."""
    paths = []
    for last in (7, 11, 15):
        builder = SnapshotBuilder()
        builder.segment(Block(MiB(64), site=TRAIN))
        builder.segment(*[Block(MiB(16), site=site, step=step) for step in range(4, last + 1)])
        path = root / f"steps{last - 3}-{last}" / f"rank{rank}_pid1.pickle"
        sidecar = make_sidecar("window", rank=rank, steps=[last - 3, last])
        write_dump(path, builder.build(), sidecar=sidecar)
        paths.append(path)
    return paths


def _oom(root: Path, rank: int) -> Path:
    """An OOM dump of ``rank`` without step tags: nothing in it shows growth."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(64), site=TRAIN), *[Block(MiB(16), site=LEAK)] * 13)
    builder.oom(requested=MiB(64), device_free=0)
    oom = {"requested_bytes": MiB(64), "device_free_bytes": 0, "device_total_bytes": MiB(272)}
    path = root / "oom" / OOM_NAME.format(rank=rank)
    write_dump(path, builder.build(), sidecar=make_sidecar("oom", rank=rank, step=16, oom=oom))
    return path


def test_the_windows_of_its_own_rank_are_read_and_no_others(tmp_path: Path) -> None:
    """Rank 0's OOM dump is explained from rank 0's windows (its leaking line grows), never
    from rank 1's, whose growth is at another line."""
    mine = _windows(tmp_path, 0, LEAK)
    _windows(tmp_path, 1, Site("/job/other.py", 9, "elsewhere"))
    path = _oom(tmp_path, 0)
    assert evidence_files(path) == (path, *mine)
    diagnosis = explain(path).diagnosis
    assert diagnosis is not None
    growth = diagnosis.causes[0]
    assert (growth.name, growth.sites, growth.rate_bytes_per_step) == (
        "growth",
        (str(LEAK),),
        MiB(16),
    )


def test_a_dump_in_no_run_folder_reads_nothing_beside_it(tmp_path: Path) -> None:
    """The same dump copied out of its run folder is explained from itself alone: its story is
    summarize's of the dump, with no growth."""
    _windows(tmp_path, 0, LEAK)
    loose = tmp_path / "copied" / "oom.pickle"
    loose.parent.mkdir()
    loose.write_bytes(_oom(tmp_path, 0).read_bytes())
    assert evidence_files(loose) == (loose,)
    told = explain(loose)
    assert told.diagnosis == summarize(load_dump(loose)).diagnosis
    assert told.diagnosis is not None
    assert "growth" not in [cause.name for cause in told.diagnosis.causes]


def test_a_folder_report_reads_each_window_dump_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report of a run folder explains each of its dumps from the windows of its rank, and
    reads each window dump for that once, not once per dump explained; its headline is the
    growth explain names."""
    windows = _windows(tmp_path, 0, LEAK)
    oom = _oom(tmp_path, 0)
    read: list[Path] = []

    def counted(path: Path) -> Dump:
        read.append(Path(path))
        return load_dump(path)

    monkeypatch.setattr(leaks, "load_dump", counted)
    builder = ReportBuilder(folder=True)
    for path in [*windows, oom]:
        builder.add(load_dump(path))
    assert sorted(read) == sorted(windows)
    document = builder.document()
    sections = document["dumps"][-1]["devices"][0]["sections"]
    [cause] = [s["data"]["cause"] for s in sections if "cause" in s["data"]]
    diagnosis = explain(oom).diagnosis
    assert diagnosis is not None
    assert cause == diagnosis.headline
    assert cause.startswith("growth: ")


def _oom_of_process(root: Path, rank: int, step: int) -> Path:
    """An OOM dump written by ``write_journals``' process of ``rank`` (pid 1000 + rank) at
    ``step``, without step tags and with no window dumps beside it: only the journal can show
    growth. It holds 64 MiB plus 13 blocks of 16 MiB: what ``_journals`` below says the leaking
    rank holds at its last line."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(64), site=TRAIN), *[Block(MiB(16), site=LEAK)] * 13)
    builder.oom(requested=MiB(64), device_free=0)
    oom = {"requested_bytes": MiB(64), "device_free_bytes": 0, "device_total_bytes": MiB(272)}
    path = root / "oom" / f"rank{rank}_pid{1000 + rank}_step{step}_20261130-101112-000001.pickle"
    sidecar = make_sidecar("oom", rank=rank, pid=1000 + rank, step=step, oom=oom)
    write_dump(path, builder.build(), sidecar=sidecar)
    return path


def _journals(root: Path, leak_rank: int, **damage: list[int]) -> JournalTruth:
    """Journals of 4 ranks holding 64 MiB over 14 steps; ``leak_rank`` keeps 16 MiB more every
    step and runs out at step 13."""
    return write_journals(
        root, ranks=4, lines=14, every=1, base=MiB(64), limit=MiB(4096), leak_rank=leak_rank,
        leak_per_line=MiB(16), **damage,
    )  # fmt: skip


def test_its_process_journal_climbing_names_growth(tmp_path: Path) -> None:
    """An OOM dump whose process's journal shows allocated bytes climbing 16 MiB a step up to
    the OOM is explained first as growth at that rate, read from the journal, stopping it
    freeing what it gained (13 steps of it), with window dumps as what names the site; the
    journal is evidence the cache keys by."""
    truth = _journals(tmp_path, 2)
    assert truth.oom_step is not None
    path = _oom_of_process(tmp_path, 2, truth.oom_step)
    journal = tmp_path / "journal" / "rank2_pid1002.jsonl"
    assert evidence_files(path) == (path, journal)
    diagnosis = explain(path).diagnosis
    assert diagnosis is not None
    growth = diagnosis.causes[0]
    assert growth.name == "growth"
    assert growth.rate_bytes_per_step == MiB(16)
    assert growth.freed_bytes == truth.leaked_at_oom == 13 * MiB(16)
    assert growth.sufficient
    assert "14 journal lines" in growth.evidence
    assert "install(steps=N)" in growth.fixes[0].action


def test_a_torn_last_line_of_its_journal_is_skipped(tmp_path: Path) -> None:
    """A process killed mid-write leaves half a line at the end of its journal: the climb
    before it is still read, at its true rate."""
    truth = _journals(tmp_path, 1, torn=[1])
    assert truth.oom_step is not None
    diagnosis = explain(_oom_of_process(tmp_path, 1, truth.oom_step)).diagnosis
    assert diagnosis is not None
    assert diagnosis.causes[0].name == "growth"
    assert diagnosis.causes[0].rate_bytes_per_step == MiB(16)


def test_the_journal_of_another_rank_is_not_read(tmp_path: Path) -> None:
    """Rank 2 climbs and fails; rank 0's OOM dump is explained from rank 0's flat journal
    alone, so no growth is named, and rank 2's journal is no evidence of it."""
    truth = _journals(tmp_path, 2)
    assert truth.oom_step is not None
    path = _oom_of_process(tmp_path, 0, truth.oom_step)
    assert evidence_files(path) == (path, tmp_path / "journal" / "rank0_pid1000.jsonl")
    diagnosis = explain(path).diagnosis
    assert diagnosis is not None
    assert "growth" not in [cause.name for cause in diagnosis.causes]
