"""Hostile files through the loader and the real console script: refused in one line, bounded."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from evidence import poisoned

from memforensics.testing import exhausted

_EXT_BYPASS = """
import copyreg, pickle, sys
from memforensics import SnapshotLoadError
from memforensics.analysis import load_dump
copyreg.add_extension("os", "system", 240)
pickle.loads(b"\\x80\\x02\\x82\\xf0.")  # the process resolves the code once: it is cached
try:
    load_dump(sys.argv[1])
except SnapshotLoadError as exc:
    print(exc)
"""


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "memforensics", *argv],
        capture_output=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_extension_opcode_is_refused_even_when_the_extension_cache_holds_it(
    tmp_path: Path,
) -> None:
    """EXT1 + REDUCE after the process cached that extension: refused, the command never runs."""
    marker = tmp_path / "pwned"
    path = tmp_path / "ext.pickle"
    path.write_bytes(b"\x80\x02\x82\xf0" + f"(S'touch {marker}'\ntR.".encode())
    done = subprocess.run(
        [sys.executable, "-c", _EXT_BYPASS, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert not marker.exists()
    assert "refused to load" in done.stdout, done.stdout + done.stderr
    assert "extension code 240" in done.stdout


def _memo_bomb(path: Path, references: int) -> None:
    """A real snapshot whose first trace holds ``references`` references to one entry."""
    snapshot = exhausted().snapshot
    entry = snapshot["device_traces"][0][0]
    snapshot["device_traces"][0] = [entry] * references
    path.write_bytes(pickle.dumps(snapshot, protocol=4))


@pytest.mark.integration
@pytest.mark.parametrize("command", ["summary", "replay"])
def test_memo_bomb_is_refused_in_one_line_naming_the_bound(tmp_path: Path, command: str) -> None:
    """A million references to one trace entry: exit 2 in one line naming how to lift the bound."""
    path = tmp_path / "bomb.pickle"
    _memo_bomb(path, 1_000_000)
    done = _run(command, str(path))
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2
    assert len(lines) == 1
    assert "MEMFORENSICS_MAX_EXPANSION" in lines[0]


@pytest.mark.integration
def test_memo_bomb_reads_when_the_bound_is_lifted(tmp_path: Path) -> None:
    """The same file reads once MEMFORENSICS_MAX_EXPANSION allows it: the bound, not the file."""
    path = tmp_path / "bomb.pickle"
    _memo_bomb(path, 20_000)
    assert _run("summary", str(path)).returncode == 2
    assert _run("summary", str(path), env={"MEMFORENSICS_MAX_EXPANSION": "inf"}).returncode == 0


# -- terminal escapes ------------------------------------------------------------------------

_ESC = "\x1b]52;c;cHduZWQ=\x07\x1b[2J\x1b]0;owned\x07"
_BIDI = "\u202egnp.txt\u2066"


def _hostile_folder(tmp_path: Path) -> tuple[Path, Path]:
    """A run folder whose dumps, file names and sidecar strings all carry terminal controls."""
    from memforensics.testing import make_sidecar, write_journals

    root = tmp_path / "run"
    write_journals(root, ranks=2, lines=5)
    window = root / "steps0-3"
    window.mkdir()
    snapshot = poisoned(exhausted().snapshot, _ESC, _BIDI)
    paths = []
    for index in range(2):
        path = window / f"rank{index}_pid{index + 1}{_ESC}{_BIDI}.pickle"
        path.write_bytes(pickle.dumps(snapshot, protocol=4))
        sidecar = make_sidecar(rank=index, hostname=_ESC + _BIDI, kind="window", steps=[0, 3])
        path.with_suffix(".json").write_text(__import__("json").dumps(sidecar))
        paths.append(path)
    return root, paths[0]


def _assert_inert(done: subprocess.CompletedProcess[bytes]) -> None:
    shown = done.stdout + done.stderr
    assert b"\x1b" not in shown, shown[-800:]
    assert b"\x07" not in shown
    assert "\u202e".encode() not in shown
    assert "\u2066".encode() not in shown


@pytest.mark.integration
def test_no_terminal_control_from_hostile_files_reaches_the_terminal(tmp_path: Path) -> None:
    """Frames, file names, sidecar strings and refused module names with ESC/OSC and bidi
    controls: no ESC, BEL or bidi byte reaches stdout or stderr of any reading command."""
    root, dump = _hostile_folder(tmp_path)
    other = dump.parent / dump.name.replace("rank0_pid1", "rank1_pid2")
    module = f"{_ESC}os".encode()
    refused = tmp_path / f"evil{_ESC}.pickle"
    refused.write_bytes(b"\x80\x04c" + module + b"\nsystem\n(S'true'\ntR.")
    runs = [
        ("summary", str(dump)),
        ("summary", "--json", str(dump)),
        ("replay", str(dump)),
        ("diff", str(dump), str(other)),
        ("leaks", str(root)),
        ("ls", str(root)),
        ("overview", str(root)),
        ("summary", str(refused)),
        ("replay", str(refused)),
    ]
    for argv in runs:
        done = _run(*argv)
        _assert_inert(done)
        assert done.returncode in (0, 1, 2), (argv, done.stderr[-800:])
    wide = {"COLUMNS": "1000"}  # no path shortened: the escaped bytes are all on screen
    printed = _run("summary", str(dump), env=wide).stdout.decode()
    assert "\\x1b]52" in printed
    assert "\\u202e" in printed


# -- special files -----------------------------------------------------------------------------


@pytest.mark.integration
def test_fifos_and_device_links_never_hang_or_exhaust_a_reader(tmp_path: Path) -> None:
    """FIFOs named like a pickle, a sidecar and a journal, and a sidecar and a journal linked to
    /dev/zero: ls, overview and summary finish, and name what they could not read."""
    from memforensics.testing import write_journals

    root = tmp_path / "run"
    write_journals(root, ranks=2, lines=5)
    oom = root / "oom"
    oom.mkdir()
    exhausted().write(oom / "rank0_pid1.pickle")
    (oom / "rank0_pid1.json").unlink()
    os.mkfifo(oom / "rank0_pid1.json")
    os.mkfifo(oom / "rank1_pid2.pickle")
    exhausted().write(oom / "rank2_pid3.pickle")
    (oom / "rank2_pid3.json").unlink()
    (oom / "rank2_pid3.json").symlink_to("/dev/zero")
    os.mkfifo(root / "journal" / "rank5_pid9.jsonl")
    (root / "journal" / "rank6_pid9.jsonl").symlink_to("/dev/zero")
    runs = [
        ("ls", str(root)),
        ("overview", str(root)),
        ("overview", "--json", str(root)),
        ("summary", str(oom / "rank0_pid1.pickle")),
        ("summary", str(oom / "rank2_pid3.pickle")),
        ("summary", str(oom / "rank1_pid2.pickle")),
    ]
    for argv in runs:
        done = subprocess.run(
            [sys.executable, "-m", "memforensics", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode in (0, 2), (argv, done.stderr[-800:])
        assert "Traceback" not in done.stderr
    overview = _run("overview", str(root)).stdout.decode()
    assert "not a regular file" in overview
    refused = _run("summary", str(oom / "rank1_pid2.pickle"))
    assert refused.returncode == 2
    assert b"not a regular file" in refused.stderr


# -- pages written where someone planted links -----------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("command", ["report", "overview"])
def test_page_output_never_follows_a_planted_symlink(tmp_path: Path, command: str) -> None:
    """report -o / overview -o onto a symlink: the link is replaced by the page, its target
    untouched, and no temporary file is left beside it."""
    from memforensics.testing import write_journals

    root = tmp_path / "run"
    write_journals(root, ranks=2, lines=3)
    dump = exhausted().write(root / "oom" / "rank0_pid1.pickle")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "page.html"
    out.symlink_to(victim)
    target = str(dump) if command == "report" else str(root)
    done = _run(command, target, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "precious\n"
    assert not out.is_symlink()
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html", "run", "victim"]
