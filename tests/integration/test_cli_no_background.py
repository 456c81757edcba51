"""Nothing outlives a command: once an analysis command has returned, in a pipe or on a
terminal, no process it started is left; the retired --look-ahead flag only warns."""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from memforensics.testing import fragmented, growth_pair, write_run_folder

pytestmark = pytest.mark.integration

MARKER = "MEMFORENSICS_TEST_MARKER"


def _command(*args: str | Path) -> list[str]:
    script = shutil.which("memforensics", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "memforensics"]
    return [*command, *map(str, args)]


def _marked() -> tuple[dict[str, str], str]:
    """The environment for one command, with a marker no other process carries."""
    mark = uuid.uuid4().hex
    return {**os.environ, MARKER: mark}, f"{MARKER}={mark}".encode()


def _left(mark: bytes) -> list[int]:
    """Processes whose environment carries ``mark`` (a child inherits it), other than zombies
    waiting to be reaped (their environment reads empty)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if mark in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def _in_a_pipe(args: list[str | Path]) -> tuple[int, bytes]:
    env, mark = _marked()
    proc = subprocess.run(_command(*args), capture_output=True, env=env, timeout=300, check=False)
    return proc.returncode, mark


def _on_a_terminal(args: list[str | Path]) -> tuple[int, bytes]:
    """Run the console script with stdin, stdout and stderr on a pseudo-terminal (its own
    session, the terminal its controlling one), reading everything it prints."""
    env, mark = _marked()
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        _command(*args),
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        env=env,
        start_new_session=True,
    )
    os.close(secondary)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.1)
            if ready:
                try:
                    if not os.read(primary, 65536):
                        break
                except OSError:  # EIO: every holder of the terminal's other end has gone
                    break
            elif proc.poll() is not None and not _left(mark):
                break
        status = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(primary)
    return status, mark


def _commands(tmp_path: Path) -> dict[str, list[str | Path]]:
    dump = fragmented().write(tmp_path / "f.pickle")
    before, after = growth_pair()
    a, b = before.write(tmp_path / "a.pickle"), after.write(tmp_path / "b.pickle")
    run = tmp_path / "run"
    write_run_folder(run, world_size=2)
    cache = ["--cache-dir", str(tmp_path / "cache")]
    return {
        "summary": ["summary", dump, *cache],
        "summary-pool": ["summary", dump, a, b, "--jobs", "2", *cache],
        "replay": ["replay", dump, "--jobs", "2", *cache],
        "report": ["report", dump, "-o", tmp_path / "r.html", *cache],
        "report-pool": ["report", run, "-o", tmp_path / "run.html", "--jobs", "2", *cache],
        "diff": ["diff", a, b, *cache],
        "leaks": ["leaks", run, "--jobs", "2", *cache],
        "look-ahead": ["summary", dump, "--look-ahead", *cache],
        "ls": ["ls", run],
        "overview": ["overview", run, "--jobs", "2", "-o", tmp_path / "overview.html"],
        "watch": ["watch", run, "--once"],
        "cache": ["cache", "info", *cache],
        "demo": ["demo", "--device", "sim", "--out-dir", tmp_path / "demo"],
    }


@pytest.mark.parametrize("where", ["pipe", "terminal"])
def test_no_process_of_a_command_is_left_once_it_returns(tmp_path: Path, where: str) -> None:
    """Every command that reads or writes and returns (pools of --jobs 2 included, asked to look
    ahead or not, the demo's training with its forked window writer): when the command has
    returned, no process carrying its marker remains."""
    run = _in_a_pipe if where == "pipe" else _on_a_terminal
    for name, args in _commands(tmp_path).items():
        for _ in range(2):  # a first look, then one answered from the cache
            status, mark = run(args)
            assert status in (0, 1), name
            assert _left(mark) == [], name


def test_the_retired_look_ahead_flags_warn_once_and_change_nothing(tmp_path: Path) -> None:
    """--look-ahead and --no-look-ahead are accepted, say once that they do nothing, and the
    answer is the one printed without them."""
    dump = fragmented().write(tmp_path / "f.pickle")
    plain = subprocess.run(
        _command("summary", dump, "--no-cache"), capture_output=True, text=True, check=False
    )
    flagged = subprocess.run(
        _command("summary", dump, "--no-cache", "--look-ahead", "--no-look-ahead"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert flagged.returncode == plain.returncode == 0
    assert flagged.stdout == plain.stdout
    assert flagged.stderr.count("does nothing any more") == 1, flagged.stderr
    helped = subprocess.run(
        _command("summary", "--help"), capture_output=True, text=True, check=False
    )
    assert "look-ahead" not in helped.stdout
