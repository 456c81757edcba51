"""The reasons a verdict gives are true: the route a could-serve took and what it assumes, no
exhaustion from nothing reserved or with device free unknown, only the request's own pool
counted, no advice the release or the dump cannot take, and the request never counted as
live."""

from __future__ import annotations

from typing import Any

from memforensics.analysis import load_dump, summarize
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.replay import replay_dump, replay_text
from memforensics.analysis.schema import to_json
from memforensics.analysis.summary import summary_text
from memforensics.backends.sim import SimDevice
from memforensics.testing import (
    TRAIN,
    Block,
    GiB,
    MiB,
    SnapshotBuilder,
    make_sidecar,
)
from shared_data import REAL_SNAPSHOTS, needs_shared_data

INACTIVE = "inactive"
REAL_LLM = REAL_SNAPSHOTS / "cuda-llm-at-oom-no-history.pickle"


def _pending_cross_stream() -> dict[str, Any]:
    """A 100 MiB segment whose only block was freed on stream 0 while stream 1 still used it,
    and a 30 MiB block live: no cached block holds 90 MiB."""
    device = SimDevice(GiB(1))
    kept = device.empty(MiB(30))
    held = device.empty(MiB(100))
    held.record_stream(1)
    held.free()
    snapshot = device.snapshot()
    del kept
    return snapshot


def test_could_serve_names_the_route_and_what_it_assumes() -> None:
    """Served only by waiting for the pending free, releasing its segment and a new
    cudaMalloc: the words say so, never 'from a cached block'."""
    summary = summarize(dump_from_snapshot(_pending_cross_stream()), requested=MiB(90))
    assert summary.verdict.name == "could-serve"
    words = summary.verdict.explanation
    assert "from a cached block" not in words
    assert "waiting for 100.00 MiB of pending cross-stream frees" in words
    assert "releasing 1 cached segment (100.00 MiB)" in words
    assert "a new cudaMalloc of 90.00 MiB" in words
    assert "This rests on that the other streams' events complete" in words


def test_could_serve_from_a_cached_block_says_so() -> None:
    """A request a free cached block holds is served from it, with nothing assumed."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(8), site=TRAIN), Block(MiB(40), state=INACTIVE, site=None))
    summary = summarize(dump_from_snapshot(builder.build()), requested=MiB(32))
    assert summary.verdict.name == "could-serve"
    assert "32.00 MiB from a cached block of its pool and stream" in summary.verdict.explanation
    assert "rests on" not in summary.verdict.explanation


def test_nothing_reserved_is_never_exhaustion() -> None:
    """An empty snapshot asked for 2 GiB: PyTorch held nothing, so the cause is outside it or
    a device or limit smaller than the request; never 'fills the device'."""
    dump = dump_from_snapshot({"segments": [], "device_traces": [[]]})
    summary = summarize(dump, requested=GiB(2))
    assert summary.verdict.name != "exhausted"
    assert summary.verdict.reason == "nothing reserved"
    words = summary.verdict.explanation
    assert "fills the device" not in words
    assert "memory outside PyTorch" in words
    assert "smaller than the request" in words
    assert "Hold less at the peak" not in (summary.verdict.advice or "")


def test_small_pool_free_never_counts_toward_a_large_request() -> None:
    """2 MiB free in the large pool and 1 MiB in the small one meet a 3 MiB request with the
    device full: exhaustion, not fragmentation."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(18), site=TRAIN), Block(MiB(2), state=INACTIVE, site=None))
    builder.segment(
        Block(MiB(1), site=TRAIN), Block(MiB(1), state=INACTIVE, site=None), segment_type="small"
    )
    builder.oom(requested=MiB(3), device_free=0)
    oom = {"requested_bytes": MiB(3), "device_free_bytes": 0, "device_total_bytes": MiB(22)}
    dump = dump_from_snapshot(builder.build(), sidecar=make_sidecar("oom", schema=2, oom=oom))
    verdict = summarize(dump).verdict
    assert verdict.name == "exhausted"
    assert "2.00 MiB free in reserved segments of its pool" in verdict.explanation


def test_device_free_unknown_establishes_no_exhaustion() -> None:
    """A --requested no cached block serves, with device free unknown: not 'fills the
    device', and not exhausted."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(40), site=TRAIN), Block(MiB(8), state=INACTIVE, site=None))
    summary = summarize(dump_from_snapshot(builder.build()), requested=MiB(64))
    assert summary.verdict.name == "unknown"
    assert summary.verdict.reason == "device free unknown"
    assert "fills the device" not in summary.verdict.explanation


@needs_shared_data
def test_a_torch_2_0_dump_is_not_told_to_use_what_it_lacks() -> None:
    """The torch 2.0 LLM OOM asked for 2 MiB: only the large pool's 3.23 MiB is counted, no
    cached block serves it, and with device free unknown neither fragmentation nor exhaustion
    is claimed; no advice prescribes expandable segments or points at a replay that refuses
    this dump."""
    summary = summarize(load_dump(REAL_LLM), requested=MiB(2))
    verdict = summary.verdict
    assert (verdict.name, verdict.reason) == ("unknown", "device free unknown")
    assert "3.23 MiB free there, largest block 1.98 MiB" in verdict.explanation
    assert "4.34 MiB" not in verdict.explanation
    advice = verdict.advice or ""
    assert "expandable_segments" not in advice
    assert "replay" not in advice


def _exhausted_with_limit() -> Any:
    """3.5 GiB live, a 1 GiB request, 32 MiB free on a 3.6 GiB device: proven exhausted."""
    builder = SnapshotBuilder()
    builder.segment(Block(GiB(2), site=TRAIN), Block(MiB(32), state=INACTIVE, site=None))
    builder.segment(Block(GiB(1.5), site=TRAIN))
    builder.oom(requested=GiB(1), device_free=MiB(32))
    oom = {"requested_bytes": GiB(1), "device_free_bytes": MiB(32),
           "device_total_bytes": GiB(3.6)}  # fmt: skip
    return dump_from_snapshot(builder.build(), sidecar=make_sidecar("oom", schema=2, oom=oom))


def test_live_at_once_never_counts_the_request() -> None:
    """The proof says 'X live + the Y request = Z needed'; JSON's peak_live_bytes is live
    bytes alone, the request apart."""
    dump = _exhausted_with_limit()
    summary = summarize(dump)
    assert summary.verdict.label == "exhausted (proven)"
    bound = summary.lower_bound
    assert bound is not None
    assert bound.peak_live_bytes == GiB(3.5)
    assert bound.request_bytes == GiB(1)
    words = summary.verdict.explanation
    assert (
        "3.50 GiB live + the 1.00 GiB request + 38.40 MiB outside PyTorch = 4.54 GiB needed"
        in words
    )
    replayed = replay_text(replay_dump(dump))
    assert "peak live 4.5" not in replayed
    assert "3.50 GiB live + the 1.00 GiB request" in replayed
    document = to_json(summary)["lower_bound"]
    assert document["peak_live_bytes"] + document["request_bytes"] <= document["needed_bytes"]


def test_no_outside_figure_where_outside_is_unknown() -> None:
    """Without a recorded limit the bound is against capacity and names no outside figure."""
    builder = SnapshotBuilder()
    builder.segment(Block(GiB(2), site=TRAIN), Block(MiB(32), state=INACTIVE, site=None))
    builder.oom(requested=GiB(1), device_free=MiB(32))
    dump = dump_from_snapshot(builder.build(), sidecar=make_sidecar("oom", schema=2))
    summary = summarize(dump)
    assert summary.verdict.label == "exhausted (proven)"
    assert "outside PyTorch" not in summary.verdict.explanation
    assert "+ outside" not in replay_text(replay_dump(dump))


def test_a_sum_under_a_per_process_limit_leaves_out_its_0_b_terms() -> None:
    """600 MiB live and a 300 MiB request under set_per_process_memory_fraction(0.01) of an
    80 GiB device (79 GiB free): the proof adds live and request alone, no "+ 0 B outside
    PyTorch"; what is full is the per-process limit, and the room it left is said as that, not
    as free device memory; the JSON keeps the 0 B outside PyTorch."""
    limit = int(GiB(80) * 0.01)
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(600), site=TRAIN))
    builder.oom(requested=MiB(300), device_free=GiB(79))
    oom = {"requested_bytes": MiB(300), "device_free_bytes": GiB(79),
           "device_total_bytes": limit}  # fmt: skip
    dump = dump_from_snapshot(builder.build(), sidecar=make_sidecar("oom", schema=2, oom=oom))
    summary = summarize(dump)
    assert summary.verdict.label == "exhausted (proven)"
    words = summary.verdict.explanation
    assert "600.00 MiB live + the 300.00 MiB request = 900.00 MiB needed" in words
    assert "0 B" not in words
    assert "fills the 819.20 MiB per-process limit" in words
    assert "exceeds the 219.20 MiB left under the per-process limit." in words
    assert "free on the device" not in words
    assert "600.00 MiB live + the 300.00 MiB request = 900.00 MiB" in replay_text(replay_dump(dump))
    document = to_json(summary)
    assert document["lower_bound"]["external_bytes"] == 0
    assert document["lower_bound"]["needed_bytes"] == MiB(900)


def test_the_allocation_follows_pytorch_rules_when_not_recorded() -> None:
    """No observer figure: the allocation is what PyTorch's rounding gives the request (a
    3 MiB request gets a 20 MiB segment), shown where it printed '-'."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(18), site=TRAIN), Block(MiB(2), state=INACTIVE, site=None))
    builder.oom(requested=MiB(3), device_free=0)
    dump = dump_from_snapshot(builder.build(), sidecar=make_sidecar("oom", schema=2))
    summary = summarize(dump)
    assert summary.oom is not None
    assert summary.oom.allocation_bytes == MiB(20)
    assert "allocation 20.00 MiB" in summary_text(summary)


def test_unknown_outside_memory_reads_unknown() -> None:
    """No limit recorded: 'outside PyTorch unknown' in summary and replay, never a dash."""
    builder = SnapshotBuilder()
    builder.segment(Block(GiB(2), site=TRAIN), Block(MiB(32), state=INACTIVE, site=None))
    builder.oom(requested=GiB(1), device_free=MiB(32))
    dump = dump_from_snapshot(builder.build(), sidecar=make_sidecar("oom", schema=2))
    for text in (summary_text(summarize(dump), verbose=True), replay_text(replay_dump(dump))):
        assert "outside PyTorch unknown" in text
        assert "outside PyTorch -" not in text


def test_no_replay_pointer_for_a_trace_replay_refuses() -> None:
    """A one-event trace judged fragmented with --requested: the advice does not send the
    user to a replay that refuses such a trace."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(8), site=TRAIN), Block(MiB(2), state=INACTIVE, site=None))
    builder.segment(Block(MiB(8), site=TRAIN), Block(MiB(2), state=INACTIVE, site=None))
    snapshot = builder.build()
    snapshot["device_traces"] = [snapshot["device_traces"][0][-1:]]
    full = make_sidecar(
        "oom", schema=2, oom={"device_free_bytes": 0, "device_total_bytes": MiB(20)}
    )
    verdict = summarize(dump_from_snapshot(snapshot, sidecar=full), requested=MiB(3)).verdict
    assert verdict.name == "fragmentation"
    assert "replay" not in (verdict.advice or "")


def test_a_request_over_the_limit_with_nothing_reserved_says_so() -> None:
    """Nothing reserved and a request over the recorded limit: the request alone does not fit,
    said without 'live memory fills the device'."""
    oom = {"requested_bytes": GiB(2), "device_free_bytes": GiB(1), "device_total_bytes": GiB(1)}
    dump = dump_from_snapshot(
        {"segments": [], "device_traces": [[]]}, sidecar=make_sidecar("oom", schema=2, oom=oom)
    )
    verdict = summarize(dump).verdict
    assert verdict.reason == "request over the limit"
    assert "alone exceeds the 1.00 GiB limit" in verdict.explanation
    assert "fills the device" not in verdict.explanation
