"""``memforensics overview`` as a user runs it: a real subprocess over a run folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memforensics.testing import write_journals, write_run_folder

pytestmark = pytest.mark.integration


def _command() -> list[str]:
    script = shutil.which("memforensics", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "memforensics"]


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The command in a pipe, wide enough that a tmp path stays on one line (the 80-column
    layout is tests/integration/test_cli_screen.py's)."""
    return subprocess.run(
        [*_command(), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_text_names_first_oom_outlier_and_peer(tmp_path: Path) -> None:
    """The text's first lines carry the answer: who failed first, who stands out, by how much."""
    truth = write_journals(tmp_path, ranks=8, lines=30, leak_rank=6, torn=[1])
    proc = _cli("overview", tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"run {tmp_path}: 8 ranks seen of 8, steps 0-{truth.oom_step:,}")
    assert lines[1].startswith(f"first OOM: rank 6 at step {truth.oom_step:,}")
    assert lines[2].startswith("stand out: rank 6 ")
    assert "rank 6 peak reserved" in lines[2]
    assert "rank 6 reserved growth" in lines[2]
    assert lines[3].startswith("rank 6 vs healthiest peer rank ")
    assert lines[4].startswith("forecast: none")  # rank 6 failed: its limit is behind it
    assert "torn last line (skipped): rank(s) 1" in lines[5]


def test_json_and_html_together(tmp_path: Path) -> None:
    """--json prints the object; -o writes the page and says so on stderr, stdout stays JSON."""
    write_journals(tmp_path / "run", ranks=4, lines=10, leak_rank=2)
    page = tmp_path / "out" / "overview.html"
    page.parent.mkdir()
    proc = _cli("overview", tmp_path / "run", "--json", "-o", page)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["first_oom"]["rank"] == 2
    assert data["ranks_seen"] == 4
    assert [o["rank"] for o in data["outliers"]] == [2, 2]
    assert page.is_file()
    assert f"wrote {page}" in proc.stderr
    assert not list(page.parent.glob(".*"))  # the temporary file was renamed away


def test_user_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    """A missing folder and a bad --jobs: one line on stderr, exit status 2."""
    proc = _cli("overview", tmp_path / "nowhere")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"memforensics overview: {tmp_path / 'nowhere'}: not a folder"
    ]
    assert _cli("overview", tmp_path, "--jobs", "0").returncode == 2


def test_a_dump_folder_of_a_run_names_its_run_folder(tmp_path: Path) -> None:
    """overview of a run's oom/ folder, which holds a sidecar, never says it holds none: it
    names the run folder to read instead, in one line, exit status 2."""
    write_run_folder(tmp_path / "run")
    proc = _cli("overview", tmp_path / "run" / "oom")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"memforensics overview: {tmp_path / 'run' / 'oom'} is a dump folder of the run"
        f" {(tmp_path / 'run').resolve()}: overview reads the run folder (memforensics overview"
        f" {(tmp_path / 'run').resolve()})"
    ]


def test_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    """`overview --all | head -1` on many ranks: no traceback, exit status 0."""
    write_journals(tmp_path, ranks=1000, lines=2, leak_rank=None)  # more than a pipe holds
    with subprocess.Popen(
        [*_command(), "overview", str(tmp_path), "--all"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()
        error = proc.stderr.read()
        status = proc.wait(timeout=120)
    assert first.startswith(b"run ")
    assert status == 0
    assert b"Traceback" not in error


def test_a_folder_of_raw_snapshots_beside_other_json_holds_no_sidecar(tmp_path: Path) -> None:
    """A folder of a raw snapshot and a JSON file that is not its sidecar (a truth.json) is
    no run's dump folder: overview says it holds no journals or sidecars."""
    (tmp_path / "snapshot.pickle").write_bytes(b"not read")
    (tmp_path / "truth.json").write_text("{}")
    proc = _cli("overview", tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"memforensics overview: no journals or sidecars under {tmp_path}"
    ]
