"""explain reads what lies beside a dump in its run folder, and only that: its rank's window
dumps; evidence_files names exactly what it reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from memforensics.analysis import Dump, explain, load_dump, summarize
from memforensics.analysis.compare import leaks
from memforensics.analysis.report import ReportBuilder
from memforensics.analysis.story import evidence_files
from memforensics.testing import Block, MiB, Site, SnapshotBuilder, make_sidecar, write_dump

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
