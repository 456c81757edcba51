"""A command that skips many files says how many and names at most ten of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from memforensics.cli._command import SKIPPED_LISTED
from memforensics.cli._main import main
from memforensics.testing import exhausted

MANY = 40


def _junk(folder: Path, count: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"rank{i}_pid1.pickle" for i in range(count)]
    for path in paths:
        path.write_bytes(b"not a pickle " * 50)
    return paths


def test_report_of_a_folder_of_unreadable_files_fails_in_one_short_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """report DIR where no file reads: exit 2, one stderr line naming ten files and the count."""
    _junk(tmp_path / "run" / "oom", MANY)
    code = main(["report", str(tmp_path / "run"), "-o", str(tmp_path / "r.html")])
    err = capsys.readouterr().err
    assert code == 2
    [line] = err.splitlines()
    assert f"none of the {MANY} files could be read" in line
    assert f"and {MANY - SKIPPED_LISTED} more" in line
    assert line.count("rank") == SKIPPED_LISTED


def test_report_skipping_many_files_lists_ten_and_counts_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """report DIR with one good dump among many bad: exit 1, ten skipped lines and a count."""
    run = tmp_path / "run"
    _junk(run / "oom", MANY)
    exhausted().write(run / "manual" / "rank0_pid1_20261130-101112-000000.pickle")
    code = main(["report", str(run), "-o", str(tmp_path / "r.html")])
    err = capsys.readouterr().err.splitlines()
    assert code == 1
    skipped = [line for line in err if "skipped" in line]
    assert len(skipped) == SKIPPED_LISTED + 1
    assert skipped[-1].endswith(f"skipped {MANY - SKIPPED_LISTED} more file(s), {MANY} in all")


def test_summary_of_many_unreadable_files_names_ten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """summary of 40 bad files: ten named, the rest counted, then the closing line; exit 2."""
    paths = _junk(tmp_path, MANY)
    code = main(["summary", "--jobs", "1", *map(str, paths)])
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert len(err) == SKIPPED_LISTED + 2
    assert f"{MANY - SKIPPED_LISTED} more file(s)" in err[-2]
    assert f"none of the {MANY} files could be read" in err[-1]
