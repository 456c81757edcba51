"""Every file memforensics writes goes through the one atomic writer (``capture/atomic.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from memforensics.cli import main
from memforensics.testing import exhausted, write_dump

PACKAGE = Path(__file__).parents[2] / "src" / "memforensics"
WRITER = "capture/atomic.py"
ALLOWED = {
    "capture/journal.py": "the journal appends whole lines with O_APPEND, one write() each",
    "doctor/checks.py": "probes writability with an unnamed temporary file that never appears",
    "cli/_cache.py": "its own folder only, never a run's: temp file + os.replace",
    "plan/nvidia_smi.py": "the planned nvidia-smi, in a temporary folder of its own that only "
    "the planned run reads and that goes with the run",
    "plan/toolkit.py": "the planned node's nvcc, in a temporary folder of its own that only the "
    "planned run reads and that goes with the run",
}
"""Files that may write by other means, and why."""
EXEMPT_FOLDERS = ("testing/",)
"""Test helpers write damaged files on purpose (torn journals, half-written temporaries)."""
_WRITE_CALLS = {"write_text", "write_bytes", "copyfile", "copy", "copy2", "copytree", "move"}
_TEMP_CALLS = {"mkstemp", "NamedTemporaryFile", "TemporaryFile", "SpooledTemporaryFile"}


def _writes(tree: ast.AST) -> list[str]:
    """Each call in ``tree`` that writes a file by itself, as ``line: source``."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        text = ast.unparse(node)
        mode = node.args[1] if len(node.args) > 1 else None
        mode = next((k.value for k in node.keywords if k.arg == "mode"), mode)
        writes_mode = isinstance(mode, ast.Constant) and any(c in str(mode.value) for c in "wax+")
        if (
            name in _WRITE_CALLS | _TEMP_CALLS
            or (name == "open" and writes_mode)
            or (name == "open" and text.startswith("os.open(") and _os_open_writes(text))
        ):
            found.append(f"{node.lineno}: {text}")
    return found


def _os_open_writes(text: str) -> bool:
    """An ``os.open`` writes unless it opens /dev/null or reads only (``O_RDONLY`` and no flag
    that writes or creates)."""
    if "os.devnull" in text:
        return False
    writing = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC")
    return "O_RDONLY" not in text or any(flag in text for flag in writing)


def test_no_module_writes_a_file_but_the_atomic_writer() -> None:
    """No module but the writer (and the append-only journal) opens a file for writing."""
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name == WRITER or name in ALLOWED or name.startswith(EXEMPT_FOLDERS):
            continue
        calls = _writes(ast.parse(path.read_text(encoding="utf-8")))
        if calls:
            offenders[name] = calls
    assert offenders == {}


def test_the_check_sees_the_ways_a_file_is_written() -> None:
    """The scan above finds each way of writing a file it is meant to forbid."""
    source = "\n".join(
        [
            "Path('a').write_text('x')",
            "open('a', 'w')",
            "path.open(mode='wb')",
            "os.open('a', os.O_WRONLY | os.O_CREAT)",
            "shutil.copyfile(a, b)",
            "tempfile.mkstemp()",
            "open('a')",
            "os.open(os.devnull, os.O_WRONLY)",
            "os.open('a', os.O_RDONLY | os.O_NONBLOCK)",
            "os.open('a', os.O_RDONLY | os.O_CREAT)",
        ]
    )
    assert [line.split(":")[0] for line in _writes(ast.parse(source))] == [*"123456", "10"]


def test_report_page_failure_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``report -o`` into a place that cannot hold a file fails with one line, exit 2, and
    leaves no temporary file behind."""
    case = exhausted()
    dump = write_dump(tmp_path / "oom" / "rank0_pid1.pickle", case.snapshot, sidecar=case.sidecar)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file")
    assert main(["report", str(dump), "-o", str(blocker / "report.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "report.html: cannot write" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-folder", "oom"]
