"""Untrusted text made printable: controls escaped, long strings cut, everywhere it is shown;
lines fitted to the screen's width with every word kept whole."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memforensics._text import PRINT_LIMIT, fit, printable, terminal_safe
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


_WORD = st.text(alphabet="abcdefghij.:()0123456789", min_size=1, max_size=10)


@given(
    indent=st.integers(0, 6),
    words=st.lists(_WORD, min_size=1, max_size=40),
    gaps=st.lists(st.sampled_from([" ", "  ", "      "]), min_size=40, max_size=40),
    labelled=st.booleans(),
    width=st.integers(40, 120),
)
def test_fit_keeps_every_word_whole_and_every_line_in_the_width(
    indent: int, words: list[str], gaps: list[str], labelled: bool, width: int
) -> None:
    """A line fitted to the width keeps its words, in order and unjoined, in lines that fit,
    whether or not a label's run of spaces sets its text column."""
    gaps = gaps if labelled else [" "] * len(gaps)
    line = " " * indent + "".join(word + gap for word, gap in zip(words, gaps, strict=False))
    fitted = fit(line.rstrip(), width)
    assert fitted.split() == line.split()
    assert all(len(row) <= width for row in fitted.split("\n"))


def test_fit_wraps_a_sentence_without_a_label_from_its_indent() -> None:
    """A sentence with no label wraps at its words, never gluing its first two together."""
    line = "  it rose across 3 window dumps; removing it frees 143.00 MiB, the request needed 4 MiB"
    assert fit(line, 80).split("\n")[0].startswith("  it rose across")


def test_fit_keeps_a_path_label_whole_on_its_own_line() -> None:
    """A path before its details keeps one line, whole, and the details wrap under it in few
    lines, never one word a line under a column past the middle of the screen."""
    path = "/tmp/probe/a/rank0_pid17183_20261203-172414-196584.pickle"
    line = f"{path}  (kind oom, rank 0, predicted by memforensics plan, not measured on a GPU)"
    fitted = fit(line, 80).split("\n")
    assert fitted == [
        path,
        "  (kind oom, rank 0, predicted by memforensics plan, not measured on a GPU)",
    ]


def test_fit_shortens_a_path_label_too_long_for_a_line_keeping_its_end() -> None:
    """A path label longer than the screen keeps its file name behind ``…`` on its own line."""
    path = "/data/" + "nested_folder_with_a_long_name/" * 3 + "rank0_pid1_step25.pickle"
    fitted = fit(f"{path}  (kind oom, rank 0, step 25)", 80).split("\n")
    assert fitted[0].startswith("…")
    assert fitted[0].endswith("/rank0_pid1_step25.pickle")
    assert len(fitted[0]) <= 80
    assert fitted[1:] == ["  (kind oom, rank 0, step 25)"]
