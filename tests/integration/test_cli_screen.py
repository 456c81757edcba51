"""Every command's default text fits the screen: each line in 80 columns in a pipe (COLUMNS
when set), and summary's answer in 25 lines with its cause, fix and verdict sentence whole."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memforensics.testing import exhausted, fragmented, growth_pair, unwound_oom, write_run_folder
from shared_data import REAL_SNAPSHOTS, needs_shared_data, real_params, real_snapshots

pytestmark = pytest.mark.integration

REAL_FILES = real_params(real_snapshots())
WIDTHS = [None, 100]  # None: COLUMNS unset, stdout a pipe (80 columns)


def _cli(*args: str | Path, columns: int | None, cache: Path) -> str:
    """stdout of the real console script, in a pipe, with COLUMNS set or not."""
    script = shutil.which("memforensics", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "memforensics"]
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["XDG_CACHE_HOME"] = str(cache)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    proc = subprocess.run(
        [*command, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The demo's run folder, synthetic dumps and a synthetic run folder."""
    root = tmp_path_factory.mktemp("screen")
    demo = root / "demo"
    _cli("demo", "--device", "sim", "--out-dir", demo, columns=None, cache=root / "cache")
    made = {
        "demo": demo,
        "demo-oom": next((demo / "oom").glob("*.pickle")),
        "demo-window": sorted(demo.glob("steps*/*.pickle"))[-1],
        "run": root / "run",
    }
    write_run_folder(made["run"])
    for name, synthetic in [("exhausted", exhausted()), ("fragmented", fragmented())]:
        made[name] = synthetic.write(root / "single" / f"{name}.pickle")
    made["unwound"] = unwound_oom().write(root / "single" / "unwound.pickle")
    before, after = growth_pair()
    made["before"] = before.write(root / "pair" / "before.pickle")
    made["after"] = after.write(root / "pair" / "after.pickle")
    return made


def _fits(text: str, columns: int | None) -> None:
    width = columns or 80
    over = [line for line in text.splitlines() if len(line) > width]
    assert not over, "\n".join(over)


def _words(text: str) -> str:
    return " ".join(text.split())


def _summary_holds_its_answer(path: Path, columns: int | None, cache: Path) -> None:
    """summary's default text: at most 25 lines in the width, the header first, then the
    whole cause and fix and the whole verdict sentence (read from its own JSON), and below
    them one kinds table and one call tree of at least one frame."""
    text = _cli("summary", path, columns=columns, cache=cache)
    _fits(text, columns)
    lines = text.splitlines()
    assert len(lines) <= 25, text
    assert lines[0].endswith(")"), lines[0]
    assert path.name[-12:] in lines[0], lines[0]
    answer = json.loads(_cli("summary", "--json", path, columns=columns, cache=cache))
    if answer["diagnosis"] is not None:
        assert _words(answer["diagnosis"]["headline"]) in _words(text), text
    sentence = answer["verdict"]["explanation"].split(". ")[0].rstrip(".")
    assert _words(sentence) in _words(text), text
    titles = [n for n, line in enumerate(lines) if line.startswith("  call tree ")]
    assert len(titles) == 1, text
    assert len(lines) > titles[0] + 1, text
    sentences = sum(line.startswith("  kinds ") for line in lines)
    tables = sum(line.split()[:2] == ["kind", "bytes"] for line in lines)
    assert sentences + tables == 1, text


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize(
    "name", ["demo-oom", "demo-window", "exhausted", "fragmented", "unwound", "after"]
)
def test_summary_and_replay_fit_on_made_dumps(
    dumps: dict[str, Path], name: str, columns: int | None, tmp_path: Path
) -> None:
    """On the demo's and synthetic dumps, summary keeps its answer whole in one screen and
    replay's every line fits."""
    _summary_holds_its_answer(dumps[name], columns, tmp_path)
    _fits(_cli("replay", dumps[name], columns=columns, cache=tmp_path), columns)


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("path", REAL_FILES, ids=lambda path: path.stem)
def test_summary_and_replay_fit_on_real_snapshots(
    path: Path, columns: int | None, tmp_path: Path
) -> None:
    """On every real snapshot, summary keeps its answer whole in one screen and replay's
    every line (its baseline and why lines too) fits."""
    _summary_holds_its_answer(path, columns, tmp_path)
    _fits(_cli("replay", path, columns=columns, cache=tmp_path), columns)


@needs_shared_data
def test_the_real_snapshots_are_there() -> None:
    """The real snapshots above were read, not an empty list."""
    assert len(real_snapshots()) >= 3


@pytest.mark.parametrize("columns", WIDTHS)
def test_every_other_command_fits(
    dumps: dict[str, Path], columns: int | None, tmp_path: Path
) -> None:
    """diff, ls, leaks, overview, watch in a pipe, doctor: every line in the width."""
    windows = sorted(dumps["demo"].glob("steps*/*.pickle"))
    runs: list[tuple[str | Path, ...]] = [
        ("diff", windows[0], windows[-1]),
        ("diff", dumps["before"], dumps["after"]),
        ("ls", dumps["demo"]),
        ("ls", dumps["run"]),
        ("leaks", dumps["demo"]),
        ("leaks", dumps["run"]),
        ("overview", dumps["demo"]),
        ("overview", dumps["run"]),
        ("watch", "--once", dumps["demo"]),
        ("doctor",),
    ]
    real = real_snapshots()
    if len(real) >= 2:
        runs.append(("diff", real[0], real[1]))
        runs.append(("ls", REAL_SNAPSHOTS))
    for args in runs:
        text = _cli(*args, columns=columns, cache=tmp_path)
        assert text.strip(), args
        _fits(text, columns)


def test_the_demo_s_last_lines_fit_and_its_next_command_runs(tmp_path: Path) -> None:
    """Run as a user runs it (its folder under the working one), the demo's lines fit 80
    columns, and its ``next: memforensics summary`` command, continued over two lines, runs as
    pasted into a shell and explains the OOM."""
    script = shutil.which("memforensics", path=str(Path(sys.executable).parent))
    assert script is not None
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    done = subprocess.run(
        [script, "demo", "--device", "sim"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    _fits(done.stdout, None)
    lines = done.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("next: memforensics summary"))
    pasted = "\n".join(lines[at : at + 2] if lines[at].endswith("\\") else lines[at : at + 1])
    env["PATH"] = f"{Path(script).parent}{os.pathsep}{env.get('PATH', '')}"
    ran = subprocess.run(
        ["bash", "-c", pasted.removeprefix("next: ")], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "keep_metrics" in ran.stdout.split("verdict")[0]  # the leak is the cause it names


def _rows_after(text: str, header: str, count: int) -> list[str]:
    """The ``count`` lines right after the line that starts (stripped) with ``header``."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(header))
    return lines[at + 1 : at + 1 + count]


def test_tables_keep_one_line_per_row_at_80_columns(dumps: dict[str, Path], tmp_path: Path) -> None:
    """In a pipe at 80 columns, ls's dump table, overview's rank table and replay's what-if
    table each keep one line per row: the line after each row is the next row (its dump's
    kind, its rank, its setting), never the rest of a wrapped one, and every line fits."""
    listing = json.loads(_cli("ls", dumps["demo"], "--json", columns=80, cache=tmp_path))
    text = _cli("ls", dumps["demo"], columns=80, cache=tmp_path)
    _fits(text, 80)
    kinds = [entry["kind"] for entry in listing["dumps"]]
    rows = _rows_after(text, "kind", len(kinds))
    assert [row.split()[0] for row in rows] == kinds
    paired = zip(listing["dumps"], rows, strict=True)
    assert all(Path(entry["path"]).name[-12:] in row for entry, row in paired)

    view = json.loads(_cli("overview", dumps["run"], "--json", "--all", columns=80, cache=tmp_path))
    text = _cli("overview", dumps["run"], "--all", columns=80, cache=tmp_path)
    _fits(text, 80)
    ranks = [str(rank["rank"]) for rank in view["ranks"]]
    assert [row.split()[0] for row in _rows_after(text, "rank", len(ranks))] == ranks

    replayed = json.loads(_cli("replay", dumps["demo-oom"], "--json", columns=80, cache=tmp_path))
    text = _cli("replay", dumps["demo-oom"], columns=80, cache=tmp_path)
    _fits(text, 80)
    names = [row["name"] for row in replayed["what_if"]]
    rows = _rows_after(text, "setting", len(names))
    assert len(names) > 2
    for name, row in zip(names, rows, strict=True):
        shown = "the baseline" if name == replayed["baseline"] else name
        cell = row[2:].split("  ")[0].rstrip("…")
        assert shown.startswith(cell), (name, row)
