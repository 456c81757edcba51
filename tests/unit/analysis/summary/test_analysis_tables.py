"""Cut tables say what they hide, diff orders by the size of a change, and summary --json uses
the sidecar's names for the sidecar's facts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import memforensics
from memforensics.analysis import diff_dumps, list_dumps, load_dump, summarize
from memforensics.analysis.compare.text import diff_text
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.schema import to_json
from memforensics.analysis.summary import summary_text
from memforensics.backends.sim import SimOutOfMemoryError, reset_device
from memforensics.testing import Block, MiB, Site, SnapshotBuilder

SITES = [Site(f"/job/layer{index}.py", index + 1, "forward") for index in range(14)]


def _many_sites() -> SnapshotBuilder:
    """14 sites of 1..14 MiB, each allocated in its own step (0..13)."""
    builder = SnapshotBuilder(steps_on_blocks=True)
    builder.segment(*(Block(MiB(i + 1), site=site, step=i) for i, site in enumerate(SITES)))
    return builder


def test_summary_site_table_says_how_many_rows_it_hides() -> None:
    """Top 3 of 14 sites: the text says 11 more sites (66 MiB) are not shown."""
    summary = summarize(dump_from_snapshot(_many_sites().build()), top=3)
    assert summary.site_count == 14
    assert to_json(summary)["site_count"] == 14
    hidden = sum(range(1, 12))
    text = summary_text(summary)
    assert f"… 11 more sites not shown ({hidden}.00 MiB in all)" in text
    assert "--top N or --all" in text


def test_summary_step_table_says_how_many_rows_it_hides() -> None:
    """14 step rows cut to the last 5: the text says 9 earlier steps are hidden, and shows 13."""
    summary = summarize(dump_from_snapshot(_many_sites().build()))
    assert len(summary.live_by_step) == 14
    text = summary_text(summary, rows=5, verbose=True)
    assert "… 9 earlier steps not shown" in text
    step_rows = [line.split() for line in text.splitlines()[-5:]]
    assert [row[0] for row in step_rows] == ["9", "10", "11", "12", "13"]


def test_summary_all_rows_hides_nothing() -> None:
    """top=None and rows=None print every site and step row, with no 'not shown' line."""
    summary = summarize(dump_from_snapshot(_many_sites().build()), top=None)
    text = summary_text(summary, rows=None, verbose=True)
    assert len(summary.top_sites) == 14
    assert all(f"/job/layer{index}.py" in text for index in range(14))
    assert "not shown" not in text


def _diff_pair() -> tuple[Any, Any]:
    """A site grows by 10 MiB, another shrinks by 100 MiB, twelve grow by 1 MiB each."""
    before, after = SnapshotBuilder(), SnapshotBuilder()
    before.segment(Block(MiB(100), site=SITES[0]), Block(MiB(5), site=SITES[1]))
    small = [Block(MiB(1), site=site) for site in SITES[2:]]
    after.segment(Block(MiB(15), site=SITES[1]), *small)
    return dump_from_snapshot(before.build()), dump_from_snapshot(after.build())


def test_diff_orders_by_absolute_change() -> None:
    """The 100 MiB release comes first, before the 10 MiB growth and the 1 MiB ones."""
    result = diff_dumps(*_diff_pair())
    deltas = [growth.delta_bytes for growth in result.growth]
    assert deltas[:2] == [-MiB(100), MiB(10)]
    assert deltas[2:] == [MiB(1)] * 12


def test_diff_text_says_how_many_rows_it_hides() -> None:
    """Cut to 3 rows, the diff says 11 more sites changed, with their net change."""
    text = diff_text(diff_dumps(*_diff_pair()), top=3)
    assert "-100.00 MiB" in text
    assert "+10.00 MiB" in text
    assert "… 11 more sites not shown (net +11.00 MiB)" in text
    assert "not shown" not in diff_text(diff_dumps(*_diff_pair()), top=None)


def _sim_oom_dump(tmp_path: Path) -> Path:
    device = reset_device(total_bytes=32 * MiB(1))
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), steps=1)
    kept = [device.empty(MiB(10)) for _ in range(2)]
    with pytest.raises(SimOutOfMemoryError), mf.step(7):
        kept.append(device.empty(MiB(20)))
    [dump] = [path for path in mf.dumps if path.parent.name == "oom"]
    return dump


def test_summary_json_uses_the_sidecars_names(tmp_path: Path) -> None:
    """Every summary --json key the sidecar also has holds the sidecar's value for it."""
    path = _sim_oom_dump(tmp_path)
    sidecar = json.loads(path.with_suffix(".json").read_text())
    data = to_json(summarize(load_dump(path)))
    shared = data.keys() & sidecar.keys()
    assert {"kind", "rank", "step", "device", "device_index", "truncated"} <= shared
    assert {"trace_entries"} <= shared
    for key in shared - {"oom"}:
        assert data[key] == sidecar[key], key
    assert (data["device"], data["device_index"]) == ("sim", 0)
    for key in data["oom"].keys() & sidecar["oom"].keys():
        assert data["oom"][key] == sidecar["oom"][key], f"oom.{key}"
    assert "source" not in data["oom"]  # the sidecar's source is who saw the OOM, not this


def test_ls_json_uses_the_sidecars_names(tmp_path: Path) -> None:
    """Every ls --json key of a dump that the sidecar also has holds the sidecar's value."""
    path = _sim_oom_dump(tmp_path)
    sidecar = json.loads(path.with_suffix(".json").read_text())
    [entry] = [to_json(e) for e in list_dumps(tmp_path).dumps if e.path == path]
    shared = entry.keys() & sidecar.keys()
    assert "snapshot_bytes" in shared
    for key in shared:
        assert entry[key] == sidecar[key], key
