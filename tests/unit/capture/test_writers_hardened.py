"""Writers on hostile ground: full disks, shared folders, absurd settings."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memforensics.capture import atomic
from memforensics.capture.atomic import window_paths, write_dump

_SHORT_WRITE = """
import resource, signal, sys
from pathlib import Path
from memforensics.capture.journal import Journal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
journal = Journal(Path(sys.argv[1]), 0, lambda: {})
journal.write("step", 0)
size = journal.path.stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (size + size // 2, resource.RLIM_INFINITY))
try:
    journal.write("step", 1)
except OSError as exc:
    print("refused", exc.errno)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
journal.write("step", 2)
print(journal.path.read_bytes().hex())
"""


def test_a_full_disk_never_leaves_a_torn_journal_line(tmp_path: Path) -> None:
    """A line cut short by the file size limit is taken back: whole lines only, and the next
    line after the limit lifts lands whole."""
    done = subprocess.run(
        [sys.executable, "-c", _SHORT_WRITE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    refused, content = done.stdout.splitlines()
    assert refused == f"refused {errno.ENOSPC}"
    data = bytes.fromhex(content)
    lines = data.split(b"\n")
    assert lines[-1] == b""
    assert [line.count(b'"step":') for line in lines[:-1]] == [1, 1]
    assert b'"step":0,' in lines[0]
    assert b'"step":2,' in lines[1]


def test_a_sidecar_that_cannot_be_written_takes_its_snapshot_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Disk full at the sidecar: the pickle is removed again, the error reaches the caller."""
    paths = window_paths(tmp_path, "step0", 0, 1)

    def full(*_: Any, **__: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic, "write_sidecar", full)
    with pytest.raises(OSError, match="No space"):
        write_dump(paths, {"segments": []}, lambda size: {"snapshot_bytes": size})
    assert not paths.snapshot.exists()
    assert list(paths.snapshot.parent.iterdir()) == []
