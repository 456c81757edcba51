"""Untrusted text made printable: controls escaped, long strings cut, everywhere it is shown."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from memforensics._text import PRINT_LIMIT, printable, terminal_safe
from memforensics.capture.log import reset_logging, safe_log
from memforensics.testing import exhausted


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b]52;c;eA==\x07", "\\x1b]52;c;eA==\\x07"),
        ("a\u202eb\u2066c\u200fd", "a\\u202eb\\u2066c\\u200fd"),
        ("\x85\x9b31m", "\\x85\\x9b31m"),
        ("line\nfeed\ttab", "line\\x0afeed\\x09tab"),
        ("train.py:12 forward é 中", "train.py:12 forward é 中"),
    ],
)
def test_printable_escapes_every_control_and_keeps_text(raw: str, shown: str) -> None:
    """C0, C1, DEL and bidi controls are spelled out; ordinary text, accents and CJK stay."""
    assert printable(raw) == shown


def test_printable_cuts_long_strings_saying_how_much() -> None:
    """A string over the cap keeps PRINT_LIMIT characters and names how many it dropped."""
    shown = printable("x" * (PRINT_LIMIT + 1000))
    assert shown.startswith("x" * PRINT_LIMIT)
    assert shown.endswith("…(+1,000 characters)")


def test_terminal_safe_keeps_newlines_and_tabs() -> None:
    """The CLI's last line of defence escapes controls but leaves the layout alone."""
    assert terminal_safe("a\tb\nc\x1bd") == "a\tb\nc\\x1bd"


def test_log_fields_from_files_are_printable(capsys: pytest.CaptureFixture[str]) -> None:
    """A logged path carrying ESC reaches stderr escaped."""
    reset_logging()
    safe_log("warning", "dump_failed", path="/out/\x1b]0;owned\x07x.pickle")
    reset_logging()
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert "\\x1b]0;owned" in err


def test_a_huge_file_name_shared_by_every_frame_prints_little(tmp_path: Path) -> None:
    """A 1 MB file name in every frame: summary prints kilobytes, not megabytes."""
    snapshot = exhausted().snapshot
    huge = "/" + "a" * (1 << 20) + ".py"
    for segment in snapshot["segments"]:
        for block in segment["blocks"]:
            for frame in block.get("frames") or []:
                frame["filename"] = huge
    for entry in snapshot["device_traces"][0]:
        for frame in entry.get("frames") or []:
            frame["filename"] = huge
    path = tmp_path / "huge.pickle"
    path.write_bytes(pickle.dumps(snapshot, protocol=4))
    done = subprocess.run(
        [sys.executable, "-m", "memforensics", "summary", str(path)],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert len(done.stdout) < 64 * 1024
