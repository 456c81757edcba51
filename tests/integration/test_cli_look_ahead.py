"""The look-ahead: after one command has read a dump, the next commands on it answer from the
cache without reading it, exactly as an uncached run; it runs on a terminal and never in a
pipe unless asked, holds no stream of the user's, and makes no one wait for an answer it
will not give."""

from __future__ import annotations

import argparse
import importlib
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from memforensics.analysis import Dump
from memforensics.analysis.cache import AnswerCache
from memforensics.cli import _look_ahead
from memforensics.cli._progress import Progress
from memforensics.cli.main import main
from memforensics.testing import exhausted, fragmented

pytestmark = pytest.mark.integration

REPLAY_TEXT = "replay [null, null, false]"  # the cache's name for `replay FILE`'s text
LOADERS = {
    "summary": "load_dump",
    "replay": "load_dump",
    "report": "load_dump",
    "diff": "load_dump",
}


def _command(*args: str | Path) -> list[str]:
    script = shutil.which("memforensics", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "memforensics"]
    return [*command, *map(str, args)]


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_command(*args), capture_output=True, text=True, timeout=300, check=False)


def _printed(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    status = main(argv)
    out = capsys.readouterr()
    return status, out.out, out.err


def _blind(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on no command can read a dump: whatever it prints came from the cache."""

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("a command read a dump")

    for command, name in LOADERS.items():
        module = importlib.import_module(f"memforensics.cli.commands.{command}")
        monkeypatch.setattr(module, name, refuse)


def _page(path: Path) -> str:
    """A report page without the moment it was generated."""
    text = path.read_text()
    start = text.find('"generated":')
    return text if start < 0 else text[:start] + text[text.find(",", start) :]


@pytest.mark.parametrize(
    "first", [["summary"], ["replay", "--json"], ["report", "-o", "first.html"]]
)
def test_after_a_look_ahead_every_per_dump_command_answers_without_reading_the_dump(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    first: list[str],
) -> None:
    """summary, replay (text and JSON) and report, after any one of them read the dump with
    --look-ahead, print what --no-cache prints, with every dump reader made to fail; each
    waits for the look-ahead if it is still at work, so nothing here is timed."""
    dump = exhausted().write(tmp_path / "d.pickle")
    cache = ["--cache-dir", str(tmp_path / "cache"), "-q"]
    monkeypatch.chdir(tmp_path)
    ran = _cli(*first[:1], dump, *first[1:], *cache, "--look-ahead")
    assert ran.returncode == 0, ran.stderr
    asks = [["summary"], ["summary", "--json"], ["replay"], ["replay", "--json"]]
    expected = [_printed(capsys, [ask[0], str(dump), *ask[1:], "--no-cache"]) for ask in asks]
    _printed(capsys, ["report", str(dump), "-o", "fresh.html", "--no-cache"])
    _blind(monkeypatch)
    for ask, fresh in zip(asks, expected, strict=True):
        assert _printed(capsys, [ask[0], str(dump), *ask[1:], *cache]) == fresh, ask
    status, _, _ = _printed(capsys, ["report", str(dump), "-o", "later.html", *cache])
    assert status == 0
    assert _page(tmp_path / "later.html") == _page(tmp_path / "fresh.html")


def test_diff_looks_ahead_at_both_dumps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """After diff A B --look-ahead, replay of either dump comes from the cache."""
    before = fragmented().write(tmp_path / "a.pickle")
    after = exhausted().write(tmp_path / "b.pickle")
    cache = ["--cache-dir", str(tmp_path / "cache"), "-q"]
    assert _cli("diff", before, after, *cache, "--look-ahead").returncode == 0
    expected = [_printed(capsys, ["replay", str(p), "--no-cache"]) for p in (before, after)]
    _blind(monkeypatch)
    assert [_printed(capsys, ["replay", str(p), *cache]) for p in (before, after)] == expected


def test_a_look_ahead_at_each_dump_answers_diff_without_reading_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """summary --look-ahead of two dumps keeps what diff reads of each: diff of the two, either
    way round, reads neither and prints what --no-cache prints."""
    before = fragmented().write(tmp_path / "a.pickle")
    after = exhausted().write(tmp_path / "b.pickle")
    cache = ["--cache-dir", str(tmp_path / "cache"), "-q"]
    for dump in (before, after):
        assert _cli("summary", dump, *cache, "--look-ahead").returncode == 0
    asks = [["diff", str(before), str(after)], ["diff", str(after), str(before), "--json"]]
    expected = [_printed(capsys, [*ask, "--no-cache"]) for ask in asks]
    _blind(monkeypatch)
    assert [_printed(capsys, [*ask, *cache]) for ask in asks] == expected


def test_a_pipe_gets_no_look_ahead_and_a_terminal_does(tmp_path: Path) -> None:
    """By default: piped, summary leaves no answer but its own; on a terminal, the replay's
    answer is kept too (waited for through the claim, not by sleeping)."""
    dump = exhausted().write(tmp_path / "d.pickle")
    piped_cache = tmp_path / "piped"
    assert _cli("summary", dump, "--cache-dir", piped_cache).returncode == 0
    assert AnswerCache(piped_cache).lookup_settled([dump], REPLAY_TEXT) is None
    assert not (piped_cache / "working").exists()

    terminal_cache = tmp_path / "terminal"
    main_end, child_end = pty.openpty()
    proc = subprocess.Popen(
        _command("summary", dump, "--cache-dir", terminal_cache),
        stdout=subprocess.DEVNULL,
        stderr=child_end,
        close_fds=True,
    )
    os.close(child_end)
    while True:  # drain the terminal until every holder of it has closed it
        try:
            if not os.read(main_end, 65536):
                break
        except OSError:
            break
    os.close(main_end)
    assert proc.wait(timeout=300) == 0
    assert AnswerCache(terminal_cache).lookup_settled([dump], REPLAY_TEXT) is not None


def test_no_cache_means_no_look_ahead(tmp_path: Path) -> None:
    """--no-cache --look-ahead: there is nowhere to keep answers, so nothing is started and no
    cache folder appears."""
    dump = exhausted().write(tmp_path / "d.pickle")
    env_cache = tmp_path / "xdg"
    ran = subprocess.run(
        _command("summary", dump, "--no-cache", "--look-ahead"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "XDG_CACHE_HOME": str(env_cache)},
    )
    assert ran.returncode == 0, ran.stderr
    assert not env_cache.exists()


class _Gate:
    """A follower that holds the look-ahead at work until the test lets it go, after telling
    the test its pid, through two FIFOs (the look-ahead keeps no inherited descriptor): the
    test sees the look-ahead at work, deterministically."""

    name = "gate"

    def __init__(self, folder: Path) -> None:
        self.go, self.pid = folder / "go", folder / "pid"
        os.mkfifo(self.go)
        os.mkfifo(self.pid)

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("file")

    def questions_ahead(self) -> list[str]:
        return ["gate"]

    def answer_ahead(self, path: Path, dump: Dump, cache: AnswerCache) -> None:
        self.pid.write_text(f"{os.getpid()}\n")  # blocks until the test reads
        self.go.read_bytes()  # blocks until the test opens and closes its end

    def worker_pid(self) -> int:
        return int(self.pid.read_text())

    def release(self) -> None:
        self.go.write_bytes(b"")


def _gated(monkeypatch: pytest.MonkeyPatch, gate: _Gate) -> None:
    """The look-ahead's followers: the gate first, then the real commands."""
    real = _look_ahead.all_commands
    monkeypatch.setattr(_look_ahead, "all_commands", lambda: [gate, *real()])
    monkeypatch.setattr(_look_ahead, "_ORDER", ("gate", *_look_ahead._ORDER))


def test_the_look_ahead_holds_no_stream_and_blocks_only_its_own_questions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """While the look-ahead is held at work: the command's stdout pipe has already closed (the
    look-ahead holds none of the user's streams); a question it will not answer (--top 3) is
    answered at once; one it will answer (replay) waits, and gets the look-ahead's answer."""
    dump = exhausted().write(tmp_path / "d.pickle")
    folder = tmp_path / "cache"
    gate = _Gate(tmp_path)
    _gated(monkeypatch, gate)
    out_read, out_write = os.pipe()
    saved = os.dup(1)
    sys.stdout.flush()
    os.dup2(out_write, 1)  # stdout is a pipe, as in `memforensics summary FILE | less`
    os.close(out_write)
    try:
        with open(1, "w", closefd=False) as stdout:
            monkeypatch.setattr(sys, "stdout", stdout)
            status = main(["summary", str(dump), "--cache-dir", str(folder), "-q", "--look-ahead"])
            stdout.flush()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        monkeypatch.undo()
    _gated(monkeypatch, gate)
    try:
        assert gate.worker_pid() > 0  # the look-ahead is now held at the gate
        assert status == 0
        printed = b""
        while select.select([out_read], [], [], 60)[0]:  # a pipe held open never gets to EOF
            chunk = os.read(out_read, 65536)
            if not chunk:  # EOF: no process holds the pipe any more
                break
            printed += chunk
        else:
            pytest.fail("the command's stdout pipe is still held open")
        os.close(out_read)
        assert b"verdict" in printed
        other = _cli("summary", dump, "--top", "3", "--cache-dir", folder, "-q")
        assert other.returncode == 0, other.stderr  # answered without waiting for the gate
        expected = _cli("replay", dump, "--no-cache", "-q").stdout
        _blind(monkeypatch)
        waits = threading.Event()
        monkeypatch.setattr(Progress, "awaiting", lambda self: waits.set())
        later: list[int] = []
        asking = threading.Thread(
            target=lambda: later.append(main(["replay", str(dump), "--cache-dir", str(folder)]))
        )
        asking.start()
        assert waits.wait(timeout=60)  # replay is waiting for the look-ahead
    finally:
        gate.release()  # let the look-ahead finish
    asking.join(timeout=300)
    assert later == [0]
    assert capsys.readouterr().out == expected
    AnswerCache(folder).settle()
    assert not list((folder / "working").glob("*.lock"))  # the look-ahead cleaned up


def test_a_killed_look_ahead_leaves_no_one_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A look-ahead killed mid-work releases its claim (the kernel drops the lock): the next
    replay works out its own answer, the same as --no-cache."""
    dump = exhausted().write(tmp_path / "d.pickle")
    folder = tmp_path / "cache"
    gate = _Gate(tmp_path)
    _gated(monkeypatch, gate)
    sys.stdout.flush()
    assert main(["summary", str(dump), "--cache-dir", str(folder), "-q", "--look-ahead"]) == 0
    os.kill(gate.worker_pid(), signal.SIGKILL)  # killed while held at the gate
    later = _cli("replay", dump, "--cache-dir", folder, "-q")
    assert later.returncode == 0, later.stderr
    assert later.stdout == _cli("replay", dump, "--no-cache", "-q").stdout
