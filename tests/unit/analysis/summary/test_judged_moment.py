"""Which moment a verdict is judged at, and what the allocator model says that state can serve."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from memforensics.analysis import Dump, load_dump, replay_dump, summarize
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.replay import replay_text
from memforensics.analysis.report import ReportBuilder
from memforensics.analysis.schema import to_json
from memforensics.analysis.summary import summary_text
from memforensics.testing import (
    CACHE,
    TRAIN,
    Block,
    GiB,
    MiB,
    SnapshotBuilder,
    exhausted,
    make_sidecar,
    unwound_oom,
)
from shared_data import REAL_SNAPSHOTS, needs_shared_data

NO_HISTORY = REAL_SNAPSHOTS / "cuda-llm-at-oom-no-history.pickle"
_DATA = re.compile(r'<script type="application/json" id="mf-data">(.*?)</script>', re.S)
INACTIVE = "inactive"


def _kv_cache_state(
    *, max_split_mb: int | None = None, free_stream: int = 0
) -> tuple[dict[str, Any], int]:
    """A state-only dump shaped like a KV cache: 644 MiB free in three holes, the largest
    260 MiB (on ``free_stream``), no history and no OOM; and the largest hole's size."""
    builder = SnapshotBuilder()
    builder.segment(Block(GiB(1), site=CACHE), Block(MiB(260), state=INACTIVE, site=None))
    builder.segment(Block(MiB(512), site=CACHE), Block(MiB(192), state=INACTIVE, site=None))
    builder.segment(Block(MiB(512), site=TRAIN), Block(MiB(192), state=INACTIVE, site=None))
    snapshot = builder.build()
    snapshot["device_traces"] = [[]]
    snapshot["segments"][0]["stream"] = free_stream
    if max_split_mb is not None:
        snapshot["allocator_settings"]["max_split_size"] = max_split_mb << 20
        snapshot["allocator_settings"]["PYTORCH_CUDA_ALLOC_CONF"] = (
            f"max_split_size_mb:{max_split_mb}"
        )
    return snapshot, MiB(260)


def _html(dump: Dump) -> dict[str, Any]:
    builder = ReportBuilder()
    builder.add(dump)
    found = _DATA.search(builder.html())
    assert found is not None
    document: dict[str, Any] = json.loads(found[1])
    return document


def test_request_the_recorded_state_serves_is_not_an_oom_verdict() -> None:
    """A 200 MiB request against a state whose 260 MiB hole serves it is no OOM verdict."""
    snapshot, largest = _kv_cache_state()
    summary = summarize(dump_from_snapshot(snapshot), requested=MiB(200))
    assert summary.largest_free_block_bytes == largest >= MiB(200)
    assert summary.verdict.name == "could-serve"
    assert "this state could serve the request: the oom happened at another moment" in (
        summary.verdict.explanation.lower()
    )
    assert to_json(summary)["oom"]["could_serve"] is True
    assert "EXHAUSTED" not in summary_text(summary)


def test_oversize_hole_does_not_serve_a_request_under_max_split_size() -> None:
    """Under max_split_size_mb:128 a 100 MiB request cannot take a hole of 128 MiB or more,
    as PyTorch's get_free_block refuses it: with the device full, the bytes are free but
    unusable, fragmentation."""
    snapshot, largest = _kv_cache_state(max_split_mb=128)
    reserved = sum(segment["total_size"] for segment in snapshot["segments"])
    full = make_sidecar(
        "oom", schema=2, oom={"device_free_bytes": 0, "device_total_bytes": reserved}
    )
    summary = summarize(dump_from_snapshot(snapshot, sidecar=full), requested=MiB(100))
    assert largest >= MiB(100)
    assert summary.verdict.name == "fragmentation"
    assert to_json(summary)["oom"]["could_serve"] is False


def test_hole_on_another_stream_does_not_serve_the_request() -> None:
    """A free block cached for another stream does not serve a request on the default one."""
    snapshot, _largest = _kv_cache_state(free_stream=7)
    summary = summarize(dump_from_snapshot(snapshot), requested=MiB(200))
    assert summary.verdict.name != "could-serve"
    assert to_json(summary)["oom"]["could_serve"] is False


def test_requested_over_a_recorded_history_warns_and_names_the_moment() -> None:
    """--requested on a dump whose history holds no OOM warns and says the final state is judged."""
    builder = SnapshotBuilder()
    builder.segment(Block(GiB(1), site=TRAIN), Block(MiB(64), state=INACTIVE, site=None))
    builder.churn(30)
    summary = summarize(dump_from_snapshot(builder.build()), requested=MiB(300))
    warnings = to_json(summary)["warnings"]
    assert any("--requested" in w and "final state" in w for w in warnings)
    words = " ".join(summary_text(summary).split())  # the note is wrapped to the screen
    assert "warning" in words
    assert "final state" in words


def test_requested_over_a_recorded_oom_says_what_it_replaces() -> None:
    """--requested on a dump that records its OOM says which recorded request it replaces."""
    dump = exhausted()
    summary = summarize(dump_from_snapshot(dump.snapshot, sidecar=dump.sidecar), requested=MiB(3))
    assert any("replaces" in w for w in to_json(summary)["warnings"])


def test_unknown_device_free_reads_in_words(tmp_path: Path) -> None:
    """With device free unknown no sentence or row prints a number or a dash for it."""
    snapshot, _largest = _kv_cache_state()
    dump = dump_from_snapshot(snapshot)
    summary = summarize(dump, requested=GiB(1))
    text = summary_text(summary)
    replayed = replay_text(replay_dump(dump, requested=GiB(1)))
    for words in (text, replayed, summary.verdict.explanation):
        assert "device free unknown" in words
        assert "+0 B free" not in words
        assert "- free on the device" not in words
        assert "device free -" not in words
    sidecar = make_sidecar("oom")
    report = _html(dump_from_snapshot(snapshot, sidecar=sidecar))
    sections = report["dumps"][0]["devices"][0]["sections"]
    rows = [row for part in sections if part["id"] == "facts" for row in part["data"]["rows"]]
    device_free = [row for row in rows if row[0] == "device free at OOM"]
    assert device_free
    assert "device free unknown" in device_free[0][1][1]


def test_oom_moment_heads_a_dump_taken_after_unwinding() -> None:
    """An OOM dump taken after the unwinding is headed by what was live at the OOM, the
    snapshot second, labelled with what the unwinding freed."""
    made = unwound_oom()
    truth = made.truth
    summary = summarize(dump_from_snapshot(made.snapshot, sidecar=made.sidecar))
    data = to_json(summary)
    assert truth.oom_allocated_bytes is not None
    assert data["oom"]["state"] == "trace"  # the headline is the OOM's moment
    assert data["oom"]["allocated_bytes"] == truth.oom_allocated_bytes
    assert data["allocated_bytes"] == truth.allocated_bytes
    assert data["unwound_bytes"] == truth.oom_allocated_bytes - truth.allocated_bytes
    found = {row["site"]: row["bytes"] for row in data["oom"]["top_sites"]}
    assert found == truth.oom_site_bytes
    biggest = max(truth.oom_site_bytes, key=truth.oom_site_bytes.__getitem__)
    smallest = min(truth.oom_site_bytes, key=truth.oom_site_bytes.__getitem__)
    sites = summary.verdict.explanation.split("Biggest sites:")[1]
    assert biggest in sites
    assert smallest not in sites
    assert summary.verdict.name == truth.verdict
    assert "unwinding freed" in summary_text(summary)
    text = summary_text(summary, verbose=True)
    assert text.index("site (live at the OOM)") < text.index("site (after the OOM")
    assert "unwinding freed" in text


def test_report_heads_an_unwound_dump_with_the_oom_moment() -> None:
    """The report's facts and sites show the OOM's moment first, the snapshot as after it."""
    made = unwound_oom()
    report = _html(dump_from_snapshot(made.snapshot, sidecar=made.sidecar))
    sections = {p["id"]: p for p in report["dumps"][0]["devices"][0]["sections"]}
    rows = {row[0]: row[1] for row in sections["facts"]["data"]["rows"]}
    assert rows["allocated at the OOM"] == ["bytes", made.truth.oom_allocated_bytes]
    assert any(label.startswith("allocated after the OOM (unwinding freed") for label in rows)
    assert "at the OOM" in sections["sites"]["title"]
    assert sections["sites"]["data"]["rows"][0][1] == max(made.truth.oom_site_bytes.values())
    assert "sites_after_oom" in sections
    assert "unwinding freed" in sections["verdict"]["data"]["moment"]


def test_replay_bounds_against_capacity_without_a_limit() -> None:
    """Without a recorded limit the replay's bound is against reserved + device free at the
    OOM, says so, and its verdict word is summary's."""
    made = exhausted()
    dump = dump_from_snapshot(made.snapshot, sidecar=made.sidecar)
    result = replay_dump(dump)
    summary = summarize(dump)
    bound = result.lower_bound
    assert bound is not None
    assert made.truth.device_free_bytes is not None
    assert bound.limit_bytes == made.truth.reserved_bytes + made.truth.device_free_bytes
    assert to_json(result)["lower_bound"]["limit_source"] == "capacity"
    assert to_json(result)["verdict"]["name"] == summary.verdict.name == made.truth.verdict
    text = replay_text(result)
    assert "capacity" in text
    assert "no limit recorded" in text
    assert summary.verdict.label.upper() in text


@needs_shared_data
def test_replay_gives_summarys_verdict_on_a_real_oom_without_history() -> None:
    """On a real OOM snapshot without history or limit, replay says summary's verdict word."""
    dump = load_dump(NO_HISTORY)
    result = replay_dump(dump, requested=MiB(200))
    summary = summarize(dump, requested=MiB(200))
    assert to_json(result)["verdict"]["name"] == summary.verdict.name
    assert summary.verdict.label.upper() in replay_text(result)
