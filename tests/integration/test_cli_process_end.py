"""The console script leaves the dump it read to the operating system when its process ends,
and ``main()`` called by a program that goes on frees it as usual."""

from __future__ import annotations

import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest

import memforensics.cli.commands.summary as summary_command
from memforensics.cli import main
from memforensics.testing import exhausted

pytestmark = pytest.mark.integration

# The console script's entry, run as ``python -m memforensics`` does, reporting after it returns
# whether the dump it read is still alive and kept out of the collector's reach.
_WRAPPER = """
import gc, sys, weakref
import memforensics.cli.commands.summary as command
from memforensics.cli import console
read = []
load = command.load_dump
command.load_dump = lambda *a, **k: read.append(load(*a, **k)) or read[-1]
status = console(sys.argv[1:])
alive = weakref.ref(read.pop())() is not None
print(f"alive={alive} frozen={gc.get_freeze_count() > 0}", file=sys.stderr)
sys.exit(status)
"""


def test_main_in_a_program_frees_the_dump(tmp_path: Path, monkeypatch: Any) -> None:
    """After ``main(["summary", FILE])`` returns in-process, the dump it read is gone."""
    path = exhausted().write(tmp_path / "rank0_pid1_step3.pickle")
    refs: list[weakref.ref[Any]] = []
    load = summary_command.load_dump

    def recorded(*args: Any, **kwargs: Any) -> Any:
        found = load(*args, **kwargs)
        refs.append(weakref.ref(found))
        return found

    monkeypatch.setattr(summary_command, "load_dump", recorded)
    assert main(["summary", str(path), "--cache-dir", str(tmp_path / "cache")]) == 0
    assert len(refs) == 1
    assert refs[0]() is None


def test_console_keeps_the_dump_to_the_end_and_answers_the_same(tmp_path: Path) -> None:
    """The console script prints what ``main`` prints and exits 0, its dump kept (and frozen)
    until the process ends instead of freed object by object."""
    path = exhausted().write(tmp_path / "rank0_pid1_step3.pickle")
    args = ["summary", str(path), "--no-cache"]
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "alive=True frozen=True" in done.stderr
    plain = subprocess.run(
        [sys.executable, "-c", "import sys; from memforensics.cli import main; sys.exit(main())",
         *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stderr
    assert done.stdout == plain.stdout
