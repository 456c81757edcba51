"""Hostile files through the loader and the real console script: refused in one line, bounded."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

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
