"""ls, overview and watch results read back from their printed JSON render the same text."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from memforensics.analysis.folder import (
    LS_SCHEMA,
    OVERVIEW_SCHEMA,
    WATCH_SCHEMA,
    JournalWatch,
    Overview,
    RunListing,
    WatchView,
    build_overview,
    list_dumps,
    ls_text,
    overview_text,
    watch_text,
)
from memforensics.analysis.report.overview_page import overview_data
from memforensics.analysis.schema import document, from_json
from memforensics.testing import write_journals, write_run_folder
from shared_data import REAL_SNAPSHOTS, needs_shared_data


def _printed(result: object, schema: int) -> dict[str, Any]:
    """The JSON a command prints for ``result``, parsed again; its first key is the schema."""
    data = json.loads(json.dumps(document(result, schema), indent=2))
    assert next(iter(data)) == "schema"
    assert data["schema"] == schema
    return data


def _ls_round_trip(root: Path) -> RunListing:
    listing = list_dumps(root)
    back = from_json(RunListing, _printed(listing, LS_SCHEMA))
    assert ls_text(back) == ls_text(listing)
    return listing


def _overview_round_trip(root: Path) -> Overview:
    view = build_overview(root, workers=1)
    back = from_json(Overview, _printed(view, OVERVIEW_SCHEMA))
    for all_ranks in (False, True):
        assert overview_text(back, all_ranks=all_ranks) == overview_text(view, all_ranks=all_ranks)
    return view


@pytest.mark.parametrize("world_size", [4, 8])
def test_ls_of_a_run_folder_round_trips(world_size: int, tmp_path: Path) -> None:
    """A run folder with OOM, window, gz, sidecar-less and broken-sidecar dumps reads back."""
    write_run_folder(tmp_path, world_size=world_size)
    listing = _ls_round_trip(tmp_path)
    assert listing.first_oom is not None


@needs_shared_data
def test_ls_of_the_real_snapshots_round_trips() -> None:
    """The real snapshots folder, read in place (no sidecars), reads back the same."""
    listing = _ls_round_trip(REAL_SNAPSHOTS)
    assert listing.dumps


def test_overview_of_a_damaged_run_round_trips(tmp_path: Path) -> None:
    """Missing ranks, torn lines and restarts (the problems) read back, restarts by rank."""
    write_journals(
        tmp_path, ranks=16, lines=30, missing=[9], torn=[2], restarted=[4], same_pid_restart=[6]
    )
    view = _overview_round_trip(tmp_path)
    assert view.problems.restarts
    assert view.comparison is not None


def test_overview_of_a_run_with_sidecars_and_a_forecast_round_trips(tmp_path: Path) -> None:
    """A drifting rank (a forecast) beside a run folder's dumps reads back the same."""
    write_run_folder(tmp_path, world_size=4)
    write_journals(tmp_path, ranks=4, lines=40, every=10, leak_rank=0, leak_fails=False)
    view = _overview_round_trip(tmp_path)  # rank 0 drifts; ranks 1-3 have OOM dumps
    assert view.forecasts


def test_overview_of_an_empty_run_round_trips(tmp_path: Path) -> None:
    """No journal and no dump: no OOM, no steps, and the same text back."""
    _overview_round_trip(tmp_path)


def test_the_page_data_holds_every_rank_key_its_script_reads(tmp_path: Path) -> None:
    """Each ``facts.<key>`` overview.js reads is a key of every rank in the page's data."""
    write_journals(tmp_path, ranks=4, lines=40, every=10, leak_rank=1, leak_per_line=64 << 20)
    script = (resources.files("memforensics.analysis.report") / "assets" / "overview.js").read_text(
        encoding="utf-8"
    )
    read = set(re.findall(r"\bfacts\.(\w+)", script)) - {"length"}
    assert {"oom", "forecast", "pids", "lines", "dumps"} <= read
    facts = overview_data(build_overview(tmp_path, workers=1))["facts"]
    assert facts
    for rank in facts.values():
        assert read <= rank.keys()
        if rank["forecast"] is not None:
            assert {"step", "growth_per_step", "confidence"} <= rank["forecast"].keys()


@pytest.mark.parametrize("leak_fails", [True, False])
def test_watch_round_trips(leak_fails: bool, tmp_path: Path) -> None:
    """A watch of a failed (or still drifting) job reads back with the same table."""
    write_journals(
        tmp_path, ranks=6, lines=40, every=10, leak_rank=2, leak_fails=leak_fails, torn=[4]
    )
    watch = JournalWatch(tmp_path)
    watch.poll()
    view = watch.view()
    back = from_json(WatchView, _printed(view, WATCH_SCHEMA))
    assert watch_text(back) == watch_text(view)
    assert (view.first_oom is not None) == leak_fails
