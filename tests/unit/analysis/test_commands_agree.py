"""Two commands asked one question about one run print one answer: the console commands, run on
synthetic run folders, each read the fact from the one place that computes it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memforensics.cli import main
from memforensics.testing import (
    TRAIN,
    Block,
    MiB,
    Site,
    SnapshotBuilder,
    make_sidecar,
    write_dump,
)
from shared_data import REAL_WORKLOADS, real_params, real_snapshots

LEAK = Site("/job/train.py", 57, "keep_metrics")


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    """What ``memforensics ARGV --json`` prints, parsed (exit status 0)."""
    assert main([*argv, "--json", "--no-cache", "-q"]) == 0
    found: dict[str, object] = json.loads(capsys.readouterr().out)
    return found


def _leaking_run(root: Path, start: int = 4) -> Path:
    """Window dumps at steps 7, 11 and 15 where a site keeps one 16 MiB block a step from step
    ``start`` (the windows' fit: 16 MiB a step), then an OOM dump whose step tags show it
    keeping one from step 4 and two at step 16 (tags alone: 224 MiB over 13 steps, 17.23 MiB a
    step)."""
    for last in (7, 11, 15):
        builder = SnapshotBuilder()
        builder.segment(Block(MiB(256), site=TRAIN))
        leaked = [Block(MiB(16), site=LEAK, step=step) for step in range(start, last + 1)]
        builder.segment(*leaked)
        sidecar = make_sidecar("window", steps=[last - 3, last])
        write_dump(root / f"steps{last - 3}-{last}" / "rank0_pid1.pickle", builder.build(),
                   sidecar=sidecar)  # fmt: skip
    builder = SnapshotBuilder()
    leaked = [Block(MiB(16), site=LEAK, step=step) for step in (*range(4, 17), 16)]
    builder.segment(Block(MiB(256), site=TRAIN), *leaked)
    builder.oom(requested=MiB(64), device_free=0)
    oom = {"requested_bytes": MiB(64), "device_free_bytes": 0, "device_total_bytes": MiB(544)}
    path = root / "oom" / "rank0_pid1_step16_20261130-101112-000001.pickle"
    write_dump(path, builder.build(), sidecar=make_sidecar("oom", step=16, oom=oom))
    return path


def test_summary_and_leaks_give_a_growing_site_one_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """summary's growth cause and leaks name the same site: both print the windows' 16 MiB a
    step from step 4, not a second rate from the OOM dump's own step tags."""
    oom = _leaking_run(tmp_path)
    leaks = _json(capsys, "leaks", str(tmp_path), "--jobs", "1")
    [trend] = [site for site in leaks["sites"] if site["suspect"]]  # type: ignore[attr-defined]
    summary = _json(capsys, "summary", str(oom), "--jobs", "1")
    growth = summary["diagnosis"]["causes"][0]  # type: ignore[index]
    assert trend["site"] == "/job/train.py:57 keep_metrics"
    assert trend["growth_per_step_bytes"] == pytest.approx(MiB(16))
    assert growth["name"] == "growth"
    assert growth["rate_bytes_per_step"] == int(trend["growth_per_step_bytes"])
    assert growth["first_step"] == trend["first_step"] == 4
    assert "growing 16.00 MiB a step since step 4" in growth["evidence"]


def test_an_early_window_names_what_the_growing_site_holds_in_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """summary of the first window dump (steps 4-7, the site's blocks of steps 6 and 7, too few
    steps to tell growth from its own tags): its growth cause, from the windows, says the site
    holds the 32 MiB its sites table shows there, not the 160 MiB of the last window."""
    _leaking_run(tmp_path, start=6)
    window = tmp_path / "steps4-7" / "rank0_pid1.pickle"
    summary = _json(capsys, "summary", str(window), "--jobs", "1")
    [row] = [site for site in summary["top_sites"] if site["site"] == str(LEAK)]  # type: ignore[attr-defined]
    growth = summary["diagnosis"]["causes"][0]  # type: ignore[index]
    assert growth["name"] == "growth"
    assert "rose across 3 window dumps" in growth["evidence"]
    assert growth["bytes"] == row["bytes"] == MiB(32)
    assert "holds 32.00 MiB" in growth["evidence"]


def test_summary_help_says_what_its_json_prints_for_several_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """summary --help describes the JSON that several files print: one object whose "dumps"
    holds one object per file, not a bare list."""
    paths = []
    for name in ("a", "b"):
        builder = SnapshotBuilder()
        builder.segment(Block(MiB(8), site=TRAIN))
        paths.append(tmp_path / f"{name}.pickle")
        write_dump(paths[-1], builder.build())
    printed = _json(capsys, "summary", *map(str, paths), "--jobs", "1")
    with pytest.raises(SystemExit):
        main(["summary", "--help"])
    words = " ".join(capsys.readouterr().out.split())
    assert isinstance(printed, dict)
    assert [dump["file"] for dump in printed["dumps"]] == list(map(str, paths))  # type: ignore[attr-defined]
    assert '"dumps"' in words
    assert "a list of objects" not in words
    assert "a list for several" not in words


_DATA = re.compile(r'<script type="application/json" id="mf-data">(.*?)</script>', re.S)
_REAL = [*real_snapshots(), *sorted(REAL_WORKLOADS.glob("*/snapshot.pickle"))]


@pytest.mark.parametrize(
    "path",
    real_params(_REAL),
    ids=lambda p: p.parent.name if p.name == "snapshot.pickle" else p.stem,
)
def test_report_and_summary_give_each_kind_one_confidence_at_each_moment(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On each real snapshot, the report's kinds table holds, at the peak and at the snapshot,
    the bytes and confidence of each kind that summary --json prints for that moment."""
    summary = _json(capsys, "summary", str(path), "--jobs", "1")
    page = tmp_path / "report.html"
    assert main(["report", "-q", "--jobs", "1", "-o", str(page), str(path)]) == 0
    found = _DATA.search(page.read_text())
    assert found is not None
    [device] = json.loads(found[1])["dumps"][0]["devices"]
    [kinds] = [part for part in device["sections"] if part["id"] == "kinds"]
    labels = [column["label"] for column in kinds["data"]["columns"]]
    rows = {row[0]: dict(zip(labels, row, strict=True)) for row in kinds["data"]["rows"]}
    for moment, told in (
        ("at the peak", summary["peak"]["kinds"]),
        ("at the snapshot", summary["kinds"]),
    ):  # type: ignore[index]
        for kind in told:
            row = rows[kind["kind"]]
            assert row[moment] == kind["bytes"]
            assert row[f"confidence {moment}"] == round(kind["confidence"], 2)
