"""Multi-rank on a real distributed engine: torchrun, gloo on CPU, the sim device."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from evidence import SCRIPTS, check_evidence, journal_lines, visible_files

pytest.importorskip("torch.distributed")

pytestmark = [pytest.mark.integration, pytest.mark.torch]

LEAK_STEP_BYTES = 2 << 20
"""What the leaking rank keeps each step (scripts/multirank_worker.py)."""

_NAME = re.compile(
    r"^rank(?P<rank>\d+)_pid(?P<pid>\d+)(_step(?P<step>\d+))?(_[\d-]+)?\.(pickle|json)$"
)


@dataclass
class Job:
    """What one torchrun launch left behind."""

    world: int
    out: Path
    lone_out: Path
    reports: dict[int, dict[str, Any]]

    def capturing(self, rank: int) -> bool:
        return rank % 4 != 2

    def windowing(self, rank: int) -> bool:
        return rank % 2 == 1


def _torchrun(world: int, results: Path, env: dict[str, str], timeout: float) -> None:
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    command = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    proc = subprocess.run(
        [
            *command,
            "--standalone",
            "--nproc_per_node",
            str(world),
            str(SCRIPTS / "multirank_worker.py"),
            str(results),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def _launch(root: Path, world: int, timeout: float) -> Job:
    out, lone_out, results = root / "run", root / "lone", root / "results"
    results.mkdir(parents=True)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMFORENSICS_")},
        "OMP_NUM_THREADS": "1",
        "MEMFORENSICS_DEVICE": "sim",
        "MEMFORENSICS_OUT_DIR": str(out),
        "MEMFORENSICS_RANKS": ",".join(str(r) for r in range(world) if r % 4 != 2),
        "MEMFORENSICS_WINDOW_RANKS": json.dumps([r for r in range(world) if r % 2 == 1]),
        "MEMFORENSICS_STEPS": "2",
        "MEMFORENSICS_MAX_WINDOWS": "1",
        "MEMFORENSICS_LOG_LEVEL": "WARNING",
        "PHASE2_DIR": str(lone_out),
    }
    _torchrun(world, results, env, timeout)
    reports = {}
    for path in results.glob("rank*.json"):
        report = json.loads(path.read_text())
        reports[report["rank"]] = report
    assert sorted(reports) == list(range(world))
    return Job(world, out, lone_out, reports)


def _ls(folder: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "memforensics", "ls", str(folder), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    listing: dict[str, Any] = json.loads(proc.stdout)
    return listing


def _check_job(job: Job) -> None:
    """Every promise of the multi-rank section, for a job of any size."""
    expected: set[tuple[str, int]] = set()
    for rank, report in job.reports.items():
        assert report["phase1_ooms"] == [True]  # each rank saw its own OOM, same object
        assert report["capturing"] is job.capturing(rank)
        if job.capturing(rank):
            expected.add(("oom", rank))
        if job.windowing(rank) and job.capturing(rank):
            expected.add(("steps0-1", rank))
    files = visible_files(job.out)
    names = [p.name for p in files]
    assert len(set(names)) == len(names) == 2 * len(expected)  # no collision lost a file
    found = set()
    for path in files:
        match = _NAME.match(path.name)
        assert match, path
        rank = int(match["rank"])
        assert int(match["pid"]) == job.reports[rank]["pid"]
        if path.suffix == ".pickle":
            found.add((path.parent.name, rank))
            sidecar = json.loads(path.with_suffix(".json").read_text())
            assert sidecar["rank"] == rank
            assert sidecar["world_size"] == job.world
            if path.parent.name == "oom":
                assert sidecar["step"] == 2 + rank  # rank r failed at step 2 + r
    assert found == expected  # selected ranks wrote; the others stayed inert
    journals = journal_lines(job.out)  # journal_every's default: a line at step 0 and at close
    assert sorted(journals) == sorted(
        f"rank{r}_pid{job.reports[r]['pid']}.jsonl" for r in job.reports if job.capturing(r)
    )
    for lines in journals.values():
        assert [line["event"] for line in lines if line["event"] != "window"] == [
            "step",
            "oom",
            "close",
        ]
    assert check_evidence(job.out) == len(expected)
    first = _ls(job.out)["first_oom"]
    assert (first["rank"], first["step"]) == (0, 2)
    assert Path(first["path"]).parent.name == "oom"


def _check_lone(job: Job) -> None:
    lone = job.reports[1]
    assert lone["lone_oom_seconds"] < 30
    assert lone["collectives_in_oom_path"] == []
    assert len(lone["phase2_dumps"]) == 1
    files = visible_files(job.lone_out)
    assert [p.name.split("_")[0] for p in files] == ["rank1", "rank1"]
    assert check_evidence(job.lone_out) == 1
    first = _ls(job.lone_out)["first_oom"]
    assert first["rank"] == 1
    assert first["step"] is None


@pytest.fixture(scope="module")
def job4(tmp_path_factory: pytest.TempPathFactory) -> Job:
    """One torchrun launch of 4 ranks shared by the tests below (each launch costs seconds)."""
    return _launch(tmp_path_factory.mktemp("job4"), world=4, timeout=240)


def test_selected_ranks_capture_into_one_folder_without_collisions(job4: Job) -> None:
    """4 gloo ranks, rank r OOMs at step 2+r: ranks/window_ranks decide who writes; names unique."""
    _check_job(job4)


def test_a_rank_failing_alone_dumps_without_any_collective(job4: Job) -> None:
    """Rank 1 OOMs while the others wait in a barrier: its dump lands, ls names rank 1 first."""
    _check_lone(job4)


@pytest.mark.stress
def test_sixteen_ranks(tmp_path: Path) -> None:
    """Stress: the same promises with 16 torchrun processes sharing one folder."""
    job = _launch(tmp_path, world=16, timeout=600)
    _check_job(job)
    _check_lone(job)
    print(f"FIGURES multirank world=16 dumps={len(visible_files(job.out)) // 2}")


def _cli_json(*args: str | Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "memforensics", *map(str, args), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


@pytest.mark.stress
def test_sixteen_ranks_journal_names_the_leaking_rank(tmp_path: Path) -> None:
    """16 gloo ranks journal every step; one leaks until the sim OOMs: overview names it first
    OOM, outlier and the one rank forecast to run out, and its difference from the healthiest
    peer is the leaked bytes."""
    world, out, results = 16, tmp_path / "run", tmp_path / "results"
    results.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMFORENSICS_")},
        "OMP_NUM_THREADS": "1",
        "MEMFORENSICS_DEVICE": "sim",
        "MEMFORENSICS_OUT_DIR": str(out),
        "MEMFORENSICS_JOURNAL_EVERY": "1",
        "MEMFORENSICS_LOG_LEVEL": "ERROR",
        "MULTIRANK_SCENARIO": "leak",
    }
    _torchrun(world, results, env, timeout=600)
    reports = {r["rank"]: r for r in (json.loads(p.read_text()) for p in results.glob("*.json"))}
    leak_rank, late_rank = world - 3, 2
    leak = reports[leak_rank]
    assert leak["oom_step"] is not None
    assert leak["oom_step"] < reports[late_rank]["oom_step"]
    assert len(journal_lines(out)) == world  # every rank, whole lines only
    view = _cli_json("overview", out)
    assert view["ranks_seen"] == world
    assert (view["first_oom"]["rank"], view["first_oom"]["step"]) == (leak_rank, leak["oom_step"])
    assert [f["rank"] for f in view["failures"]] == [leak_rank, late_rank]
    assert {o["rank"] for o in view["outliers"]} == {leak_rank}
    cmp = view["comparison"]
    assert cmp["rank"] == leak_rank
    assert cmp["peer"] not in (leak_rank, late_rank)
    assert cmp["step"] == cmp["peer_step"] == leak["oom_step"]
    assert cmp["differences"]["allocated_bytes"] == leak["leaked_bytes"]
    assert view["problems"]["ranks_missing"] == []
    assert view["problems"]["not_closed"] == []
    forecast = view["forecasts"][0]  # the soonest to run out: the leaking rank
    assert forecast["rank"] == leak_rank
    assert forecast["growth_per_step"] == pytest.approx(LEAK_STEP_BYTES, rel=0.10)
    assert [r["rank"] for r in view["ranks"] if r["forecast"] is not None] == [leak_rank]
    page = tmp_path / "overview.html"
    proc = subprocess.run(
        [sys.executable, "-m", "memforensics", "overview", str(out), "-o", str(page)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"rank {leak_rank} vs healthiest peer rank {cmp['peer']}" in proc.stdout
    assert page.stat().st_size < 200_000
