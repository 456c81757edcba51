"""``memforensics watch`` as a user runs it: the real console script, and a job still writing."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import pytest
from evidence import SCRIPTS

from memforensics.analysis.folder import JournalWatch
from memforensics.testing import write_journals

pytestmark = pytest.mark.integration

MiB = 1 << 20
LEAK_RANK = 2
RANKS = 4
ROUNDS = 3
STEPS = 12


def _script() -> str:
    script = shutil.which("memforensics", path=str(Path(sys.executable).parent))
    assert script is not None, "the memforensics console script is not installed"
    return script


def _interruptible(command: list[str], **options: Any) -> subprocess.Popen[Any]:
    """Start ``command`` with Ctrl-C (SIGINT) at its default, as a terminal's foreground job has
    it, however this test process was started. A background job of a non-interactive shell
    (``nox -s tests &`` in a script, some CI runners) starts with SIGINT ignored, and an ignored
    signal stays ignored across ``exec``: the watch would never see the Ctrl-C the test sends.
    A handled signal is reset to the default by ``exec``, so one is handled while starting."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(command, **options)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_watch_once_puts_the_drifting_rank_first(tmp_path: Path) -> None:
    """watch --once (plain table into a pipe) lists the drifting, still running rank first."""
    write_journals(
        tmp_path, ranks=8, lines=40, every=10, leak_rank=6, leak_per_line=128 * MiB,
        jitter=64 * MiB, leak_fails=False,
    )  # fmt: skip
    proc = subprocess.run(
        [_script(), "watch", str(tmp_path), "--once"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("8 ranks · ")
    assert lines[2].split()[0] == "rank"
    assert lines[3].split()[0] == "6"
    assert "/step)" in lines[3]
    assert all(len(line) <= 80 for line in lines)  # a pipe: 80 columns, one line a rank
    assert len(lines) == 3 + 8 + 1  # the last says which columns 80 columns leave out
    data = json.loads(
        subprocess.run(
            [_script(), "watch", str(tmp_path), "--once", "--json"],
            capture_output=True, text=True, timeout=120, check=True,
        ).stdout
    )  # fmt: skip
    assert data["ranks"][0]["rank"] == 6
    assert data["ranks"][0]["forecast"]["step"] > data["ranks"][0]["step"]


def _send(writers: list[subprocess.Popen[str]], text: str) -> None:
    for writer in writers:
        assert writer.stdin is not None
        writer.stdin.write(text)
        writer.stdin.flush()


def _reply(writer: subprocess.Popen[str]) -> str:
    assert writer.stdout is not None
    return writer.stdout.readline().strip()


def _block_with(stream: IO[str], want: list[str], deadline: float) -> list[str]:
    """Read the live output's blocks (blank-line separated: a header, then a table) until a
    table's first row starts with the cells ``want``; that table and the header before it."""
    header = ""
    block: list[str] = []
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        if line.strip():
            block.append(line.rstrip("\n"))
            continue
        if len(block) > 1 and block[0].split()[0] == "rank":
            if block[1].split()[: len(want)] == want:
                return [header, *block]
        else:
            header = block[0] if block else header
        block = []
    raise AssertionError(f"watch never showed {want!r}")


def test_watch_follows_a_running_multi_process_job(tmp_path: Path) -> None:
    """While four training processes append journal lines, the reader sees exactly the steps
    each finished, the live command keeps drawing, and Ctrl-C ends it with status 0."""
    out = tmp_path / "run"
    writer = [sys.executable, str(SCRIPTS / "watch_writer.py"), str(out)]
    writers = [
        subprocess.Popen(
            [*writer, str(rank), str(MiB if rank == LEAK_RANK else 0)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for rank in range(RANKS)
    ]
    deadline = time.monotonic() + 120
    while not out.is_dir() and time.monotonic() < deadline:  # install() makes it: wait for it
        time.sleep(0.01)
    live = _interruptible(
        [_script(), "watch", str(out), "--interval", "0.05"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        watch = JournalWatch(out)
        for round_ in range(1, ROUNDS + 1):
            _send(writers, f"{STEPS}\n")
            last = round_ * STEPS - 1
            assert [_reply(w) for w in writers] == [f"ok {last}"] * RANKS
            watch.poll()
            view = watch.view()
            assert sorted(row.rank for row in view.rows) == list(range(RANKS))
            assert {row.step for row in view.rows} == {last}
        assert view.rows[0].rank == LEAK_RANK
        assert view.rows[0].forecast is not None
        assert live.stdout is not None
        final = f"{ROUNDS * STEPS - 1:,}"
        block = _block_with(live.stdout, [str(LEAK_RANK), final], time.monotonic() + 120)
        assert block[0].startswith(f"{RANKS} ranks · ")
        ranks = [line for line in block[2:] if not line.startswith("(")]  # less the footnote
        assert len(ranks) == RANKS
        live.send_signal(signal.SIGINT)
        live.communicate(timeout=60)  # keeps reading: a watch blocked on a full pipe can exit
        assert live.returncode == 0
    finally:
        _send(writers, "\n")
        for writer in writers:
            writer.communicate(timeout=60)
        if live.poll() is None:
            live.kill()
        live.communicate(timeout=60)


def _drain(terminal: int, deadline: float) -> None:
    """Read the pseudo-terminal until every process holding its other end has closed it (or
    until ``deadline``): a process writing to a terminal nobody reads blocks, and never exits."""
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([terminal], [], [], left)[0]:
            return
        try:
            if not os.read(terminal, 65536):
                return
        except OSError:  # EIO: the other end is closed
            return


def test_live_table_in_a_terminal_ends_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    """In a terminal watch draws rich's live table (the drifting rank in it) and Ctrl-C ends it
    with status 0."""
    import pty

    write_journals(
        tmp_path, ranks=3, lines=40, every=10, leak_rank=1, leak_per_line=128 * MiB,
        leak_fails=False,
    )  # fmt: skip
    main, child = pty.openpty()
    proc = _interruptible(
        [_script(), "watch", str(tmp_path), "--interval", "0.05"],
        stdin=child, stdout=child, stderr=child, close_fds=True,
        env={**os.environ, "COLUMNS": "160", "LINES": "40", "TERM": "xterm"},
    )  # fmt: skip
    os.close(child)
    seen = b""
    try:
        deadline = time.monotonic() + 120
        while b"/step)" not in seen and time.monotonic() < deadline:
            seen += os.read(main, 65536)
        assert b"3 ranks" in seen
        assert b"/step)" in seen  # the drifting rank's forecast cell
        assert b"\x1b[" in seen  # rich's own control sequences reach the terminal as bytes
        assert b"\\x1b" not in seen
        proc.send_signal(signal.SIGINT)
        _drain(main, time.monotonic() + 60)  # its last frame needs a reader to reach the screen
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main)


def test_watch_once_on_a_terminal_styles_with_real_control_sequences(tmp_path: Path) -> None:
    """watch --once on a terminal draws rich's table with real ESC bytes (the failed rank in
    red), never their escaped spelling; into a pipe it writes no ESC at all."""
    import pty

    write_journals(tmp_path, ranks=3, lines=10, every=5, leak_rank=1, leak_per_line=128 * MiB)
    main, child = pty.openpty()
    env = {**os.environ, "COLUMNS": "160", "LINES": "40", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [_script(), "watch", str(tmp_path), "--once"],
        stdout=child, stderr=child, env=env, close_fds=True,
    )  # fmt: skip
    os.close(child)
    seen = bytearray()
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: every writer closed its end
            break
        if not chunk:
            break
        seen += chunk
    assert proc.wait(timeout=120) == 0
    os.close(main)
    assert b"3 ranks" in seen
    assert b"\x1b[1;31m" in seen  # the failed rank's bold red
    assert b"\\x1b" not in seen
    piped = subprocess.run(
        [_script(), "watch", str(tmp_path), "--once"],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    assert b"\x1b" not in piped.stdout + piped.stderr
