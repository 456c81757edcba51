"""Progress is drawn on stderr when it is a terminal, and never in a pipe or with --quiet;
stdout is the same either way (the real console script under a pseudo-terminal)."""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memforensics.testing import fragmented

pytestmark = pytest.mark.integration


def _command(*args: str | Path) -> list[str]:
    script = shutil.which("memforensics", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "memforensics"]
    return [*command, *map(str, args)]


def _on_terminal(*args: str | Path) -> tuple[str, bytes, int]:
    """Run with stderr on a pseudo-terminal: (stdout, what the terminal got, exit status)."""
    main, child = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        _command(*args), stdout=subprocess.PIPE, stderr=child, env=env, close_fds=True
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
    assert proc.stdout is not None
    with proc.stdout:
        out = proc.stdout.read().decode()
    status = proc.wait(timeout=300)
    os.close(main)
    return out, bytes(seen), status


def _in_pipe(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_command(*args), capture_output=True, text=True, timeout=300, check=False)


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
