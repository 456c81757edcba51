"""overview, watch and ls say where an OOM fell and why a line is empty in plain words."""

from __future__ import annotations

import json
from pathlib import Path

from memforensics.analysis import build_overview, list_dumps
from memforensics.analysis.folder import ls_text, overview_text
from memforensics.testing import make_sidecar, write_journals

_STEM = "rank6_pid9_20261130-101112-000001"


def _oom_outside_steps(root: Path) -> None:
    """Journals of four healthy ranks, and rank 6's OOM dump taken outside any step."""
    write_journals(root, ranks=4, lines=10, leak_rank=None)
    oom = root / "oom"
    oom.mkdir()
    (oom / f"{_STEM}.pickle").write_bytes(b"not read")
    sidecar = make_sidecar(
        "oom", rank=6, world_size=8, step=None, created_at="2020-01-01T00:00:00Z"
    )
    (oom / f"{_STEM}.json").write_text(json.dumps(sidecar))


def test_an_oom_outside_steps_reads_as_such(tmp_path: Path) -> None:
    """An OOM outside any step is 'outside any step' in overview and ls: never 'at outside a
    step' or 'step None'."""
    _oom_outside_steps(tmp_path)
    text = overview_text(build_overview(tmp_path, workers=1))
    assert "first OOM: rank 6 outside any step, " in text
    listed = ls_text(list_dumps(tmp_path))
    assert listed.startswith("first OOM: rank 6 outside any step at ")
    for words in (text, listed):
        assert "at outside" not in words
        assert "step None" not in words


def test_empty_findings_say_why_without_jargon(tmp_path: Path) -> None:
    """No outlier and no peer to compare with are said in words a reader can check: no
    'median/MAD rule', no 'healthy peer with a line'."""
    _oom_outside_steps(tmp_path)
    text = overview_text(build_overview(tmp_path, workers=1))
    assert "median/MAD" not in text
    assert "stand out: none (no rank's peak reserved or reserved growth is far from" in text
    assert "no healthy peer with a line" not in text
    assert "rank 6 wrote no journal line before its OOM" in text


def test_the_overview_s_cause_wraps_to_the_width_with_every_word(tmp_path: Path) -> None:
    """The cause line of overview and watch is summary's headline, word for word, wrapped to
    the width it is given (80 columns in a pipe), never to a wider one of its own."""
    from memforensics.analysis import explain
    from memforensics.analysis.folder import cause_lines
    from memforensics.testing import exhausted

    diagnosis = explain(exhausted().write(tmp_path / "oom.pickle"), replay=False).diagnosis
    assert diagnosis is not None
    for width in (60, 80):
        lines = cause_lines(diagnosis, width)
        assert all(len(line) <= width for line in lines), lines
        assert " ".join(" ".join(lines).split()) == " ".join(f"cause: {diagnosis.headline}".split())
        assert len(lines) > 1
