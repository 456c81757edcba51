"""Progress is drawn on stderr when it is a terminal, and never in a pipe or with --quiet;
stdout is the same either way (the real console script under a pseudo-terminal)."""

from __future__ import annotations

import os
import pickle
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from evidence import poisoned

from memforensics.testing import exhausted, fragmented

pytestmark = pytest.mark.integration


def _command(*args: str | Path) -> list[str]:
    script = shutil.which("memforensics", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "memforensics"]
    return [*command, *map(str, args)]


def _on_terminal(*args: str | Path, stdout_too: bool = False) -> tuple[str, bytes, int]:
    """Run with stderr (and with ``stdout_too`` stdout as well) on a pseudo-terminal: (what a
    piped stdout got, what the terminal got, exit status). The terminal is read until every
    writer has closed it, so nothing the command drew is missed."""
    main, child = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        _command(*args),
        stdout=child if stdout_too else subprocess.PIPE,
        stderr=child,
        env=env,
        close_fds=True,
    )
    os.close(child)
    seen = bytearray()
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed its end (EIO on Linux)
            break
        if not chunk:
            break
        seen += chunk
    out = ""
    if proc.stdout is not None:
        with proc.stdout:
            out = proc.stdout.read().decode()
    status = proc.wait(timeout=300)
    os.close(main)
    return out, bytes(seen), status


def _in_pipe(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The command piped, at the terminal's width (summary wraps to ``COLUMNS``)."""
    return subprocess.run(
        _command(*args),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "120"},
    )


@pytest.mark.parametrize("command", ["summary", "replay"])
def test_progress_shows_on_a_terminal_and_never_in_a_pipe(tmp_path: Path, command: str) -> None:
    """On a terminal stderr shows the file being read; piped, stderr has none of it."""
    dump = fragmented().write(tmp_path / "frag.pickle")
    out, terminal, status = _on_terminal(command, dump, "--no-cache")
    assert status == 0
    assert b"reading frag.pickle" in terminal
    piped = _in_pipe(command, dump, "--no-cache")
    assert piped.returncode == 0
    assert "reading" not in piped.stderr
    assert "\x1b" not in piped.stderr
    assert out == piped.stdout


def test_quiet_draws_nothing_on_a_terminal(tmp_path: Path) -> None:
    """--quiet: the terminal gets no progress, stdout is unchanged."""
    dump = fragmented().write(tmp_path / "frag.pickle")
    out, terminal, status = _on_terminal("summary", dump, "--no-cache", "--quiet")
    assert status == 0
    assert b"reading" not in terminal
    assert out == _in_pipe("summary", dump, "--no-cache").stdout


def test_progress_sends_real_control_sequences_to_a_terminal(tmp_path: Path) -> None:
    """On a terminal the bar hides the cursor and erases its line with real ESC bytes, never
    with their escaped spelling; a pipe gets no ESC at all."""
    dump = fragmented().write(tmp_path / "frag.pickle")
    _, terminal, status = _on_terminal("summary", dump, "--no-cache")
    assert status == 0
    assert b"\x1b[?25l" in terminal  # hide the cursor
    assert b"\x1b[2K" in terminal  # erase the line: the bar leaves nothing behind
    assert b"\\x1b" not in terminal
    piped = _in_pipe("summary", dump, "--no-cache")
    assert "\x1b" not in piped.stdout + piped.stderr


_ESC = "\x1b]52;c;cHduZWQ=\x07\x1b]0;owned\x07"
_BIDI = "\u202e"


def test_hostile_names_reach_a_terminal_escaped_beside_real_progress(tmp_path: Path) -> None:
    """A file name and frames carrying OSC sequences and bidi controls: with stdout and stderr on
    a terminal, the bar still erases itself with real ESC bytes while every hostile control
    arrives spelled out, never as the byte."""
    dump = tmp_path / f"evil{_ESC}{_BIDI}.pickle"
    dump.write_bytes(pickle.dumps(poisoned(exhausted().snapshot, _ESC, _BIDI), protocol=4))
    _, terminal, status = _on_terminal("summary", dump, "--no-cache", stdout_too=True)
    assert status == 0, terminal[-800:]
    assert b"\x1b[2K" in terminal
    assert b"reading evil\\x1b]52;c;cHduZWQ=\\x07" in terminal  # the bar's file name
    assert b"\\x1b]0;owned" in terminal  # a frame in the answer on stdout
    assert b"\x1b]" not in terminal
    assert b"\x07" not in terminal
    assert _BIDI.encode() not in terminal
