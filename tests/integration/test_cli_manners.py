"""The console script as a shell user meets it: several files, cut tables, closed pipes, a clean
checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memforensics.testing import (
    Block,
    MiB,
    Site,
    SnapshotBuilder,
    exhausted,
    fragmented,
    growth_pair,
    write_dump,
    write_run_folder,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


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


def _two_dumps(tmp_path: Path) -> tuple[Path, Path]:
    first = fragmented().write(tmp_path / "oom" / "rank0_pid1_step12_20261130-101112-000001.pickle")
    second = exhausted().write(tmp_path / "oom" / "rank0_pid1_step12_20261130-101113-000001.pickle")
    return first, second


def test_summary_of_several_files_prints_one_section_each(tmp_path: Path) -> None:
    """Two files (a retry loop's glob) give two sections, each with its own verdict."""
    first, second = _two_dumps(tmp_path)
    proc = _cli("summary", first, second)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.index(f"{first}  (") < proc.stdout.index(f"{second}  (")
    assert "FRAGMENTATION" in proc.stdout
    assert "EXHAUSTED" in proc.stdout


def test_summary_json_lists_several_files_under_dumps_and_prints_one_object_for_one(
    tmp_path: Path,
) -> None:
    """--json prints the files' objects under ``dumps`` in argument order, one for one file."""
    first, second = _two_dumps(tmp_path)
    document = json.loads(_cli("summary", "--json", first, second).stdout)
    assert next(iter(document)) == "schema"
    several = document["dumps"]
    assert [item["file"] for item in several] == [str(first), str(second)]
    assert [item["verdict"]["name"] for item in several] == ["fragmentation", "exhausted"]
    one = json.loads(_cli("summary", "--json", first).stdout)
    assert isinstance(one, dict)
    assert one["file"] == str(first)


def test_summary_reports_a_bad_file_and_goes_on(tmp_path: Path) -> None:
    """A corrupt file among good ones: one stderr line for it, the others summarized, exit 1."""
    first, second = _two_dumps(tmp_path)
    bad = tmp_path / "oom" / "rank1_pid2.pickle"
    bad.write_bytes(first.read_bytes()[:100])
    proc = _cli("summary", "--json", first, bad, second)
    assert proc.returncode == 1
    assert [item["file"] for item in json.loads(proc.stdout)["dumps"]] == [str(first), str(second)]
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"memforensics summary: {bad}: ")
    assert "Traceback" not in proc.stderr


def test_summary_exits_2_when_no_file_is_readable(tmp_path: Path) -> None:
    """Every file bad: one line each, a closing line, exit status 2, nothing on stdout."""
    missing = tmp_path / "none.pickle"
    junk = tmp_path / "junk.pickle"
    junk.write_bytes(b"not a pickle")
    proc = _cli("summary", missing, junk)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 3
    assert "none of the 2 files could be read" in lines[-1]


def _many_sites(tmp_path: Path) -> Path:
    builder = SnapshotBuilder()
    sites = [Site(f"/job/layer{index}.py", 1, "forward") for index in range(25)]
    builder.segment(*(Block(MiB(index + 1), site=site) for index, site in enumerate(sites)))
    return write_dump(tmp_path / "many.pickle", builder.build())


def _site_rows(text: str) -> int:
    """The site table's rows (each with its kind; the headline and the call tree name the
    layers too, without one)."""
    return sum("/job/layer" in line and " activation " in line for line in text.splitlines())


def test_summary_top_and_all(tmp_path: Path) -> None:
    """--top 4 shows 4 site rows and says 21 are hidden; --all shows all 25 and hides none."""
    path = _many_sites(tmp_path)
    cut = _cli("summary", path, "--top", "4")
    assert cut.returncode == 0, cut.stderr
    assert _site_rows(cut.stdout) == 4
    assert "… 21 more sites not shown" in cut.stdout
    full = _cli("summary", path, "--all")
    assert _site_rows(full.stdout) == 25
    assert "not shown" not in full.stdout
    assert len(json.loads(_cli("summary", path, "--all", "--json").stdout)["top_sites"]) == 25
    both = _cli("summary", path, "--all", "--top", "3")
    assert both.returncode == 2
    assert "not allowed with" in both.stderr


def test_diff_top_and_all(tmp_path: Path) -> None:
    """diff --top 2 shows two rows and says how many sites it hides; --all hides nothing."""
    before, after = growth_pair()
    a = before.write(tmp_path / "steps4-7" / "rank0_pid1.pickle")
    b = after.write(tmp_path / "steps100-103" / "rank0_pid1.pickle")
    many = _many_sites(tmp_path)
    cut = _cli("diff", a, many, "--top", "2")
    assert cut.returncode == 0, cut.stderr
    assert "… 26 more sites not shown" in cut.stdout  # 25 grew, 3 (cache, train, optim) went
    assert "not shown" not in _cli("diff", a, many, "--all").stdout
    assert _cli("diff", a, b, "--all").returncode == 0


def _closed_pipe_run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """Run with stdout a pipe whose read end is already closed: every write fails (EPIPE)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [*_command(), *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            cwd=cwd,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "command",
    [
        ["summary", "{dump}"],
        ["summary", "--json", "{dump}", "{dump}"],
        ["diff", "{dump}", "{dump}"],
        ["ls", "{run}"],
        ["ls", "--json", "{run}"],
        ["report", "{dump}", "-o", "{out}"],
        ["doctor", "--device", "sim", "--out-dir", "{out_dir}"],
        ["--help"],
    ],
)
def test_closed_output_pipe_exits_quietly(tmp_path: Path, command: list[str]) -> None:
    """With stdout's reader gone, each command exits 0 with no traceback on stderr."""
    dump = fragmented().write(tmp_path / "x.pickle")
    run = tmp_path / "run"
    write_run_folder(run, world_size=3)
    values = {"dump": dump, "run": run, "out": tmp_path / "r.html", "out_dir": tmp_path / "mf"}
    args = [part.format(**values) for part in command]
    proc = _closed_pipe_run(args, tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"Traceback" not in proc.stderr
    assert b"BrokenPipe" not in proc.stderr


def test_summary_piped_into_head_exits_quietly(tmp_path: Path) -> None:
    """`memforensics summary FILE... | head -1` prints one line; summary exits 0, no traceback."""
    path = fragmented().write(tmp_path / "x.pickle")
    files = " ".join([str(path)] * 150)  # ~150 KiB of text: far more than a pipe holds
    script = f'{" ".join(_command())} summary {files} | head -1; echo "status ${{PIPESTATUS[0]}}"'
    proc = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    first, status = proc.stdout.splitlines()
    assert first.endswith("x.pickle  (kind oom, rank 0, step 12)"), first  # the summary's header
    assert status == "status 0"
    assert proc.stderr == ""


def test_demo_folder_is_ignored_by_git() -> None:
    """A checkout where `memforensics demo` ran stays clean: memforensics-demo/ is ignored."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    proc = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "-q", "memforensics-demo/oom/rank0_pid1.pickle"],
        check=False,
    )
    assert proc.returncode == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["summary", "x.pickle"],
        ["diff", "a.pickle", "b.pickle"],
        ["replay", "x.pickle"],
        ["report", "x.pickle"],
        ["ls", "."],
        ["leaks", "."],
        ["overview", "."],
        ["watch", "."],
        ["cache", "info"],
        ["doctor"],
        ["demo"],
        ["run", "--bogus-flag", "train.py"],
    ],
)
def test_a_bad_flag_prints_that_subcommands_usage(tmp_path: Path, argv: list[str]) -> None:
    """An unknown flag is reported with the usage of the subcommand it was given to, status 2."""
    args = argv if "--bogus-flag" in argv else [*argv, "--bogus-flag"]
    proc = subprocess.run(
        [*_command(), *args], capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False
    )
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[0].startswith(f"usage: memforensics {argv[0]} ")
    assert lines[-1] == f"memforensics {argv[0]}: error: unrecognized arguments: --bogus-flag"
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("command", "said"),
    [
        ("ls", "no dumps"),
        ("leaks", "no dumps"),
        ("report", "no dumps"),
        ("overview", "no journals or sidecars"),
    ],
)
def test_a_folder_with_nothing_to_read_exits_2_in_one_line(
    tmp_path: Path, command: str, said: str
) -> None:
    """ls, leaks, report and overview of an empty folder: one line on stderr, nothing on
    stdout, nothing written, exit status 2."""
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run(
        [*_command(), command, str(empty)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"memforensics {command}: {said} under {empty}"]
    assert proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]  # no page written


def test_new_spellings_replace_the_old_in_help() -> None:
    """--out-dir DIR for folders and --jobs N for processes; the old spellings are not shown."""
    shown = {name: _cli(name, "--help").stdout for name in ("demo", "doctor", "overview")}
    assert "--out-dir DIR" in shown["demo"]
    assert "--out-dir DIR" in shown["doctor"]
    assert "--jobs N" in shown["overview"]
    for text in shown.values():
        assert "--out " not in text
        assert "--out\n" not in text
        assert "--workers" not in text


@pytest.mark.parametrize(
    ("argv", "warning"),
    [
        (
            ["doctor", "--device", "sim", "--json", "--out", "{dir}", "--out", "{dir}"],
            "memforensics doctor: warning: --out is deprecated; use --out-dir",
        ),
        (
            ["overview", "--json", "--workers", "1", "--workers", "1", "{run}"],
            "memforensics overview: warning: --workers is deprecated; use --jobs",
        ),
    ],
)
def test_old_spellings_still_work_and_warn_once(
    tmp_path: Path, argv: list[str], warning: str
) -> None:
    """An old spelling, given twice, still sets its option, with one deprecation line on stderr."""
    run = tmp_path / "run"
    write_run_folder(run, world_size=3)
    values = {"dir": tmp_path / "mf", "run": run}
    proc = _cli(*(part.format(**values) for part in argv))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [warning]
    data = json.loads(proc.stdout)
    if argv[0] == "doctor":
        assert data["out_dir"] == str(tmp_path / "mf")
    else:
        assert data["ranks_seen"] == 3
