"""summary's default text fits one screen on real dumps; --verbose keeps everything."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from memforensics.analysis import load_dump, summarize
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.summary import summary_text
from memforensics.testing import several_devices
from shared_data import REAL_SNAPSHOTS, needs_shared_data, real_params, real_snapshots


@needs_shared_data
def test_the_real_snapshots_are_there() -> None:
    """The shared real snapshots are read in place; none may silently go missing."""
    assert len(real_snapshots()) >= 3


@pytest.mark.parametrize("path", real_params(real_snapshots()), ids=lambda path: path.name)
@pytest.mark.parametrize("requested", [None, 2 << 30])
def test_default_text_fits_25_lines_at_100_columns(path: Path, requested: int | None) -> None:
    """Every real snapshot (and judged with --requested) prints at most 25 lines, each
    paragraph wrapped to 100 columns, one kind table and one call tree."""
    summary = summarize(load_dump(path), requested=requested)
    text = summary_text(summary, width=100)
    lines = text.splitlines()
    assert len(lines) <= 25, text
    assert sum("call tree" in line for line in lines) <= 1
    assert sum(line.lstrip().startswith("kind ") for line in lines) <= 1
    assert sum("<no Python frames>:" in line for line in lines) <= 1
    wrapped = [line for line in lines if line.startswith(("  cause", "  also", " " * 15))]
    assert all(len(line) <= 100 for line in wrapped), text


@needs_shared_data
def test_verbose_prints_what_the_screen_leaves_out() -> None:
    """--verbose keeps the per-moment kind tables and each cause's fixes."""
    summary = summarize(load_dump(REAL_SNAPSHOTS / "cuda-cnn-stacks-all.pickle"))
    short, full = summary_text(summary, width=100), summary_text(summary, width=100, verbose=True)
    assert len(full.splitlines()) > len(short.splitlines())
    assert "live memory by kind, adding up to allocated" in full
    assert "live memory by kind, adding up to allocated" not in short


def test_a_file_of_several_devices_fits_the_screen() -> None:
    """Three devices and no OOM: the first device in full, the others one line each."""
    made = several_devices(oom_device=None)
    views = dump_from_snapshot(made.snapshot, sidecar=made.sidecar).device_views()
    first, *others = (summarize(view) for view in views)
    summary = replace(first, other_devices=tuple(others))  # as the command puts them together
    assert len(summary.other_devices) == 2
    lines = summary_text(summary, width=100).splitlines()
    assert len(lines) <= 25
    assert sum(line.startswith("  device ") and "explains it" in line for line in lines) == 2
