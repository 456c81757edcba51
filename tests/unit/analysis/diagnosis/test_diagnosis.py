"""The diagnosis: each cause found on its evidence only, ranked by whether it alone would have
let the request succeed, then by bytes; the headline is the top cause and its fix."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from memforensics.analysis import summarize
from memforensics.analysis.diagnosis import Diagnosis, Evidence, cache_framework, diagnose
from memforensics.analysis.dump import Dump, dump_from_snapshot
from memforensics.analysis.filled import CallNode, KindBytes, KindSite, Moment
from memforensics.analysis.oom import OomMoment, Verdict
from memforensics.analysis.schema import to_json
from memforensics.analysis.story import evidence_files, explain
from memforensics.backends.sim import SimDevice, SimOutOfMemoryError
from memforensics.testing import (
    TRAIN,
    Block,
    GiB,
    MiB,
    Site,
    SnapshotBuilder,
    fragmented,
    make_sidecar,
    unwound_oom,
    write_dump,
)

LEAK = Site("/job/train.py", 57, "keep_metrics")
KV = Site(
    "/venv/lib/python3.12/site-packages/vllm/worker/cache_engine.py", 83, "_allocate_kv_cache"
)
EXHAUSTED = Verdict("exhausted", "Live memory fills the device.", None)
PENDING = "active_pending_free"


def _moment(**figures: Any) -> OomMoment:
    """A judged OOM moment: a 64 MiB request on an 8 GiB device, 8 GiB reserved, 0 B free."""
    values: dict[str, Any] = {
        "source": "final",
        "index": None,
        "requested_bytes": MiB(64),
        "allocation_bytes": MiB(64),
        "device_total_bytes": GiB(8),
        "device_free_bytes": 0,
        "reserved_bytes": GiB(8),
        "allocated_bytes": GiB(8),
        "free_in_reserved_bytes": 0,
        "largest_free_block_bytes": 0,
        "stream": 0,
    }
    values.update(figures)
    return OomMoment(**values)


def _dump(**sidecar: Any) -> Dump:
    """An empty dump with a sidecar (for the release and the world size)."""
    return dump_from_snapshot(
        {"segments": [], "device_traces": [[]]}, sidecar=make_sidecar("oom", **sidecar)
    )


def _kinds(**sizes: int) -> tuple[KindBytes, ...]:
    return tuple(KindBytes(kind, size, 1, 0.9) for kind, size in sizes.items())


def test_growth_alone_frees_the_request_and_heads_the_diagnosis() -> None:
    """A site that kept a block every step is the cause: its rate, its first step, and
    'removing it frees X, the request needed Y', ahead of a bigger cause that would not."""
    leak = [(str(LEAK), MiB(8), step) for step in range(3, 13)]  # 80 MiB over steps 3..12
    evidence = Evidence(
        live=[*leak, (str(TRAIN), GiB(1), None)],
        kinds=_kinds(parameter=GiB(6)),
        device_total_bytes=GiB(8),
        has_history=True,
    )
    found = diagnose(_dump(), moment=_moment(), verdict=EXHAUSTED, evidence=evidence)
    top = found.causes[0]
    assert (top.name, top.bytes, top.rate_bytes_per_step, top.first_step) == (
        "growth", MiB(80), MiB(8), 3,
    )  # fmt: skip
    assert top.sufficient is True
    assert found.needed_bytes == MiB(64)
    assert [cause.name for cause in found.causes] == ["growth", "static"]
    assert found.headline.startswith("growth: train.py:57 keep_metrics holds 80.00 MiB")
    assert "removing it frees 80.00 MiB, the request needed 64.00 MiB" in found.headline


def test_one_step_of_blocks_is_no_growth() -> None:
    """Blocks made in one step (activations of the failing step) are not growth."""
    evidence = Evidence(live=[(str(LEAK), MiB(8), 7)] * 10, has_history=True)
    found = diagnose(_dump(), moment=_moment(), verdict=EXHAUSTED, evidence=evidence)
    assert "growth" not in [cause.name for cause in found.causes]


def test_sufficient_cause_ranks_above_a_bigger_insufficient_one() -> None:
    """Memory outside PyTorch that would have made room ranks above static memory that is
    bigger but whose fixes free too little (one rank: nothing to shard over)."""
    moment = _moment(reserved_bytes=GiB(7), allocated_bytes=GiB(7))  # 1 GiB outside
    evidence = Evidence(kinds=_kinds(parameter=GiB(5)), has_history=True)
    found = diagnose(_dump(), moment=moment, verdict=EXHAUSTED, evidence=evidence)
    assert [cause.name for cause in found.causes] == ["outside", "static"]
    assert found.causes[0].bytes == GiB(1)
    assert found.causes[0].sufficient is True
    assert found.causes[1].sufficient is None  # sharding's bytes are unknown on one rank


def test_static_memory_names_sharding_precision_and_offload_with_bytes() -> None:
    """Optimizer state over 4 ranks: 8-bit state, ZeRO-2 and FSDP each with what they free,
    and the headline takes the least of them that frees enough."""
    evidence = Evidence(
        kinds=_kinds(parameter=GiB(1), gradient=GiB(1), optimizer_state=GiB(2)),
        has_history=True,
    )
    moment = _moment(requested_bytes=GiB(1), allocation_bytes=GiB(1))
    found = diagnose(_dump(world_size=4), moment=moment, verdict=EXHAUSTED, evidence=evidence)
    [static] = found.causes
    freed = {fix.action.split(" (")[0]: fix.bytes for fix in static.fixes}
    assert list(freed.values()) == [GiB(1.5), GiB(2.25), GiB(3), GiB(2)]
    assert static.fix is not None
    assert "8 bits" in static.fix.action
    assert static.fix.sufficient is True
    assert "8 bits" in found.headline


def test_activations_name_batch_sequence_and_checkpointing() -> None:
    """Activations at the OOM: halving the micro-batch frees half of them."""
    evidence = Evidence(kinds=_kinds(activation=GiB(2)), has_history=True)
    found = diagnose(_dump(), moment=_moment(), verdict=EXHAUSTED, evidence=evidence)
    [cause] = found.causes
    assert cause.name == "activations"
    assert [fix.bytes for fix in cause.fixes] == [GiB(1), GiB(1), None]
    assert "micro-batch" in found.headline
    assert "checkpointing" in cause.fixes[2].action


def test_vllm_kv_cache_names_gpu_memory_utilization_and_verl() -> None:
    """A state-only dump whose biggest site is vLLM's _allocate_kv_cache, judged with
    --requested: the cause is the cache, and the fix names the knob that sizes it."""
    builder = SnapshotBuilder()
    builder.segment(Block(GiB(6), site=KV), Block(GiB(1), site=TRAIN))
    snapshot = builder.build()
    snapshot["device_traces"] = [[]]  # state only, as enabled="state" records it
    summary = summarize(dump_from_snapshot(snapshot), requested=MiB(1200))
    assert summary.diagnosis is not None
    top = summary.diagnosis.causes[0]
    assert top.name == "cache"
    assert top.bytes == GiB(6)
    assert top.sufficient is True
    actions = " ".join(fix.action for fix in top.fixes)
    assert "actor_rollout_ref.rollout.gpu_memory_utilization" in actions
    assert "free_cache_engine" in actions
    assert "gpu_memory_utilization" in summary.diagnosis.headline
    assert any("outside PyTorch is unknown" in note for note in summary.diagnosis.missing)


def test_pending_frees_are_named_with_their_sites() -> None:
    """Blocks freed on one stream and awaiting another: active minus allocated, by site."""
    builder = SnapshotBuilder()
    builder.segment(
        Block(MiB(512), site=TRAIN), Block(MiB(96), state=PENDING, site=LEAK),
        Block(MiB(32), state=PENDING, site=TRAIN),
    )  # fmt: skip
    builder.oom(requested=MiB(100), device_free=0)
    oom = {"requested_bytes": MiB(100), "device_free_bytes": 0, "device_total_bytes": MiB(640)}
    summary = summarize(dump_from_snapshot(builder.build(), sidecar=make_sidecar("oom", oom=oom)))
    assert summary.diagnosis is not None
    pending = next(c for c in summary.diagnosis.causes if c.name == "pending_frees")
    assert pending.bytes == MiB(128) == summary.active_bytes - summary.allocated_bytes
    assert pending.sites == (str(LEAK), str(TRAIN))
    assert "record_stream" in pending.evidence


def _fragmented_on_sim(torch_version: str = "2.13.0") -> Dump:
    """A sim OOM: a long-lived 10 MiB tensor splits a cached 30 MiB segment, and a 24 MiB
    request after it finds 20 MiB free in that segment and 8 MiB on the 48 MiB device."""
    total = 48 * MiB(1)
    device = SimDevice(total)
    device.record_memory_history("all", max_entries=10_000)
    device.empty(MiB(30)).free()
    _kept = device.empty(MiB(10))
    with contextlib.suppress(SimOutOfMemoryError):
        device.empty(MiB(24))
    snapshot = device.snapshot()
    oom = next(e for e in reversed(snapshot["device_traces"][0]) if e["action"] == "oom")
    figures = {"requested_bytes": oom["size"], "allocation_bytes": None,
               "device_total_bytes": total, "device_free_bytes": oom["device_free"]}  # fmt: skip
    sidecar = make_sidecar("oom", schema=2, torch_version=torch_version, oom=figures)
    return dump_from_snapshot(snapshot, sidecar=sidecar)


def test_fragmentation_is_a_cause_where_the_replay_serves_the_request() -> None:
    """Free memory in pieces, and the replay under expandable segments serves the request:
    fragmentation is a sufficient cause whose fix is expandable_segments."""
    summary = summarize(_fragmented_on_sim())
    assert summary.verdict.name == "fragmentation"
    assert summary.diagnosis is not None
    frag = next(c for c in summary.diagnosis.causes if c.name == "fragmentation")
    assert frag.sufficient is True
    assert summary.oom is not None
    assert frag.bytes == summary.oom.free_in_reserved_bytes == MiB(20)
    assert "expandable_segments:True" in frag.fixes[0].action
    assert "replayed with expandable_segments the request is served" in frag.evidence


def test_unproven_fragmentation_is_missing_evidence_not_a_cause() -> None:
    """Where the replay refuses (a trace the allocator cannot reproduce), fragmentation is
    named as unproven, with the replay's reason, never advised as the fix."""
    made = fragmented()
    summary = summarize(dump_from_snapshot(made.snapshot, sidecar=made.sidecar))
    assert summary.verdict.name == "fragmentation"
    assert summary.diagnosis is not None
    assert "fragmentation" not in [c.name for c in summary.diagnosis.causes]
    assert any("is unproven (the model reproduced" in m for m in summary.diagnosis.missing)


def test_no_expandable_segments_advice_before_the_release_that_has_it() -> None:
    """A torch 2.0 dump is never told to set expandable_segments: fragmentation is named as
    missing a fix in its release instead of as a cause."""
    summary = summarize(_fragmented_on_sim("2.0.1"))
    assert summary.verdict.name == "fragmentation"
    assert summary.diagnosis is not None
    assert "fragmentation" not in [c.name for c in summary.diagnosis.causes]
    assert "expandable_segments" not in summary.diagnosis.headline
    assert any("predates expandable_segments" in m for m in summary.diagnosis.missing)


def _peak(live: int, position: int, *kinds: KindBytes, sites: tuple[KindSite, ...] = ()) -> Moment:
    """A peak moment of ``live`` bytes at trace ``position``."""
    return Moment("peak", position, None, live, kinds, CallNode("all live memory"), sites=sites)


def test_a_dump_without_an_oom_answers_its_peak() -> None:
    """A window dump without an OOM: the headline is the peak, its biggest part with its sites
    and bytes, and the change that cuts it by about half; parameters follow with their bytes."""
    kinds = (KindBytes("parameter", MiB(300), 8, 0.8), KindBytes("activation", MiB(520), 40, 0.9))
    sites = (
        KindSite("activation", "/job/softmax.py:14 softmax", MiB(293), 10),
        KindSite("activation", "/job/model.py:40 forward", MiB(227), 30),
        KindSite("parameter", "/job/model.py:12 __init__", MiB(300), 8),
    )
    evidence = Evidence(
        kinds=kinds, has_history=True, moment=_peak(MiB(820), 1156, *kinds, sites=sites)
    )
    verdict = Verdict("no-oom", "No out-of-memory error is recorded in this dump.", None)
    found = diagnose(_dump(), moment=None, verdict=verdict, evidence=evidence)
    assert [cause.name for cause in found.causes] == ["activations", "static"]
    assert found.headline.startswith(
        "peak 820.00 MiB at entry 1,156: activations 520.00 MiB, inferred"
        " (softmax.py:14 softmax 293.00 MiB, model.py:40 forward 227.00 MiB)"
    )
    assert found.headline.endswith(
        "→ activation checkpointing or half the micro-batch frees ≈ 260.00 MiB"
    )
    assert found.causes[1].evidence.startswith("parameters 300.00 MiB (model.py:12 __init__)")
    assert found.moment == "peak"


def test_only_an_empty_snapshot_has_none_for_a_headline() -> None:
    """Nothing live and nothing in the trace: ``none: ...``; a traceless dump that holds memory
    says instead that whether anything failed is unknown, and what fills it."""
    verdict = Verdict("no-oom", "No out-of-memory error is recorded in this dump.", None)
    empty = Evidence(moment=_peak(0, 0))
    assert diagnose(_dump(), moment=None, verdict=verdict, evidence=empty).headline.startswith(
        "none: nothing is allocated"
    )
    unknown = Verdict("unknown", "No event.", None, "no history and no sidecar")
    kinds = (KindBytes("parameter", GiB(6), 32, 0.8),)
    at = Moment("snapshot", 0, None, GiB(6), kinds, CallNode("all live memory"))
    held = Evidence(kinds=kinds, moment=at)
    found = diagnose(_dump(), moment=None, verdict=unknown, evidence=held)
    assert found.headline.startswith(
        "whether anything failed is unknown (no history and no sidecar); at the snapshot 6.00 GiB:"
        " parameters 6.00 GiB, inferred"
    )
    assert "nothing failed" not in found.headline


def test_an_unknown_figure_is_left_out_never_zero() -> None:
    """Inferred parameters without gradients or optimizer state: the evidence names the
    parameters and prints no ``0 B`` for the parts nothing showed."""
    evidence = Evidence(kinds=_kinds(parameter=MiB(240)), has_history=True)
    found = diagnose(_dump(), moment=_moment(), verdict=EXHAUSTED, evidence=evidence)
    [static] = found.causes
    assert "0 B" not in static.evidence
    assert "gradients" not in static.evidence
    assert static.inferred


def test_near_oom_growth_says_how_many_steps_of_headroom_are_left() -> None:
    """At risk with 100 MiB of headroom and a site growing 10 MiB a step: about 10 steps."""
    evidence = Evidence(
        live=[(str(LEAK), MiB(10), step) for step in range(5)],
        headroom_bytes=MiB(100),
        at_risk=True,
        has_history=True,
    )
    verdict = Verdict("no-oom", "No out-of-memory error is recorded in this dump.", None)
    found = diagnose(_dump(), moment=None, verdict=verdict, evidence=evidence)
    [growth] = found.causes
    assert growth.steps_left == 10
    assert growth.sufficient is None
    assert "about 10 more steps" in found.headline


def test_near_oom_growth_with_no_headroom_says_so_not_zero_steps() -> None:
    """At risk with 4 MiB of headroom and a site growing 10 MiB a step: the next step does not
    fit, said as less than one step of growth, never as "about 0 more steps"."""
    evidence = Evidence(
        live=[(str(LEAK), MiB(10), step) for step in range(5)],
        headroom_bytes=MiB(4),
        at_risk=True,
        has_history=True,
    )
    verdict = Verdict("no-oom", "No out-of-memory error is recorded in this dump.", None)
    found = diagnose(_dump(), moment=None, verdict=verdict, evidence=evidence)
    [growth] = found.causes
    assert growth.steps_left == 0
    assert "the headroom left is less than one step of it" in found.headline
    assert "0 more steps" not in found.headline


def test_summary_json_carries_the_causes() -> None:
    """summary --json holds the diagnosis as a list of causes with bytes, evidence and fixes."""
    data = to_json(summarize(_fragmented_on_sim()))
    causes = data["diagnosis"]["causes"]
    assert causes
    assert {"name", "bytes", "sufficient", "evidence", "fixes"} <= set(causes[0])
    assert data["diagnosis"]["headline"]
    assert data["verdict"]["name"] == "fragmentation"  # the allocator's category stays


def test_growth_across_the_window_dumps_beside_an_oom_dump(tmp_path: Path) -> None:
    """An OOM dump without step tags: the run folder's windows show a site growing 16 MiB a
    step from step 4, and that is the diagnosis's growth (the leaks fit, not a second one),
    ranked above activations that are bigger and would also have made room."""
    for last in (7, 11, 15):
        builder = SnapshotBuilder()
        builder.segment(Block(MiB(256), site=TRAIN))
        builder.segment(*[Block(MiB(16), site=LEAK, step=step) for step in range(4, last + 1)])
        sidecar = make_sidecar("window", steps=[last - 3, last])
        write_dump(tmp_path / f"steps{last - 3}-{last}" / "rank0_pid1.pickle", builder.build(),
                   sidecar=sidecar)  # fmt: skip
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(256), site=TRAIN), *[Block(MiB(16), site=LEAK)] * 13)
    builder.oom(requested=MiB(64), device_free=0)
    oom = {"requested_bytes": MiB(64), "device_free_bytes": 0, "device_total_bytes": MiB(464)}
    path = tmp_path / "oom" / "rank0_pid1_step16_20261130-101112-000001.pickle"
    write_dump(path, builder.build(), sidecar=make_sidecar("oom", step=16, oom=oom))
    assert len(evidence_files(path)) == 4  # the dump and the 3 windows of its rank
    summary = explain(path)
    assert summary.diagnosis is not None
    growth = summary.diagnosis.causes[0]
    assert (growth.name, growth.rate_bytes_per_step, growth.first_step) == ("growth", MiB(16), 4)
    assert "rose across 3 window dumps" in growth.evidence
    activations = summary.diagnosis.causes[1]
    assert activations.name == "activations"
    assert activations.sufficient
    assert activations.bytes > growth.bytes
    loose = tmp_path / "loose.pickle"
    assert evidence_files(loose) == (loose,)  # no run folder: no windows read


def test_a_kind_guessed_with_low_confidence_is_still_a_cause_marked_inferred() -> None:
    """Parameters inferred at confidence 0.3 are a cause all the same, said to be inferred,
    with their bytes; what is missing names the history."""
    kinds = (KindBytes("parameter", GiB(6), 32, 0.3),)
    found = diagnose(_dump(), moment=_moment(), verdict=EXHAUSTED, evidence=Evidence(kinds=kinds))
    [static] = found.causes
    assert (static.name, static.bytes, static.inferred) == ("static", GiB(6), True)
    assert "parameters 6.00 GiB, inferred" in found.headline
    assert any("no allocator history" in note for note in found.missing)


def test_the_unwound_step_heads_an_oom_taken_after_unwinding() -> None:
    """An OOM dumped after the exception unwound, without a sidecar: the blocks the unwinding
    freed are the failing step's tensors, named with their lines and bytes, and removing them
    frees what the request needed; the site rows are those at the OOM."""
    made = unwound_oom()
    summary = summarize(dump_from_snapshot(made.snapshot))
    assert summary.diagnosis is not None
    top = summary.diagnosis.causes[0]
    assert (top.name, top.bytes, top.sufficient, top.inferred) == (
        "activations", GiB(78), True, False,
    )  # fmt: skip
    headline = summary.diagnosis.headline
    assert "gnn.py:57 update_nodes 30.00 GiB, gnn.py:61 relu 24.00 GiB" in headline
    assert "removing it frees 78.00 GiB, the request needed 1.50 GiB" in headline
    assert summary.oom is not None
    assert {site.site: site.bytes for site in summary.oom.top_sites} == made.truth.oom_site_bytes


def test_a_request_the_state_serves_is_no_failure_to_explain() -> None:
    """--requested 64 MiB against a state with a free 512 MiB block: the headline says the
    state serves it, and no cause claims it would have been needed."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(512), site=LEAK), Block(MiB(512), state="inactive", site=None))
    snapshot = builder.build()
    snapshot["device_traces"] = [[]]
    summary = summarize(dump_from_snapshot(snapshot), requested=MiB(64))
    assert summary.diagnosis is not None
    assert summary.diagnosis.needed_bytes == 0
    assert summary.diagnosis.headline.startswith("this state serves the request")
    assert all(cause.sufficient is None for cause in summary.diagnosis.causes)


def test_a_peak_of_temporaries_is_named_so_and_gets_no_checkpointing() -> None:
    """A peak holding no activation (nothing saved for a backward: an inference forward) names
    its forward tensors as the kinds table does, ``temporaries``, and its fix is half the batch
    or the sequence, with its bytes, or the biggest op in chunks; checkpointing, which frees
    nothing without a backward, is not offered."""
    kinds = (KindBytes("temporary", MiB(228), 13, 0.9),)
    sites = (
        KindSite("temporary", "/job/nn_utils.py:7 softmax", MiB(48), 2),
        KindSite("temporary", "/job/model.py:430 attention", MiB(40), 1),
    )
    evidence = Evidence(
        kinds=kinds, has_history=True, moment=_peak(MiB(728), 249, *kinds, sites=sites)
    )
    verdict = Verdict("no-oom", "No out-of-memory error is recorded in this dump.", None)
    found = diagnose(_dump(), moment=None, verdict=verdict, evidence=evidence)
    [cause] = found.causes
    assert found.headline.startswith(
        "peak 728.00 MiB at entry 249: temporaries 228.00 MiB, inferred (nn_utils.py:7 softmax"
    )
    assert found.headline.endswith("→ half the batch or the sequence frees ≈ 114.00 MiB")
    assert not any("checkpointing" in fix.action for fix in cause.fixes)
    assert [fix.bytes for fix in cause.fixes] == [MiB(114), MiB(114), MiB(24)]
    assert "nn_utils.py:7 softmax in chunks" in cause.fixes[2].action


def test_activations_and_temporaries_are_each_named_with_their_bytes() -> None:
    """A peak of both kinds names each as the kinds table does, biggest first; activations
    (saved for a backward) keep checkpointing among the fixes."""
    kinds = (KindBytes("activation", MiB(512), 4, 0.9), KindBytes("temporary", GiB(2), 6, 0.85))
    evidence = Evidence(kinds=kinds, has_history=True, moment=_peak(GiB(3), 52, *kinds))
    verdict = Verdict("no-oom", "No out-of-memory error is recorded in this dump.", None)
    found = diagnose(_dump(), moment=None, verdict=verdict, evidence=evidence)
    [cause] = found.causes
    assert cause.evidence == "temporaries 2.00 GiB and activations 512.00 MiB, inferred"
    assert "checkpointing" in cause.fixes[2].action
    assert "activation checkpointing or half the micro-batch frees ≈ 1.25 GiB" in found.headline


def test_a_bucket_live_at_the_peak_is_its_cause_and_counted_once() -> None:
    """DeepSpeed's gradient buckets live at the peak but freed by the snapshot: the peak's
    cause is those buffers with the knob that sizes them, ahead of static memory, which no
    longer counts their bytes as gradients a second time."""
    bucket = "/venv/lib/python3.11/site-packages/deepspeed/runtime/zero/stage_1_and_2.py"
    kinds = (
        KindBytes("gradient", MiB(986), 2, 0.9),
        KindBytes("optimizer_state", MiB(256), 2, 0.9),
        KindBytes("parameter", MiB(128), 8, 0.8),
    )
    sites = (
        KindSite("gradient", f"{bucket}:3266 setup_buckets", MiB(954), 1),
        KindSite("gradient", "<no Python frames>", MiB(32), 1),
        KindSite("optimizer_state", f"{bucket}:2983 _optimizer_step", MiB(256), 2),
        KindSite("parameter", "/job/model.py:12 __init__", MiB(128), 8),
    )
    evidence = Evidence(
        kinds=kinds,
        has_history=True,
        moment=_peak(MiB(1370), 1296, *kinds, sites=sites),
        sites=[("/job/model.py:12 __init__", MiB(128))],  # the snapshot's: the bucket is gone
    )
    verdict = Verdict("no-oom", "No out-of-memory error is recorded in this dump.", None)
    found = diagnose(_dump(), moment=None, verdict=verdict, evidence=evidence)
    assert [cause.name for cause in found.causes] == ["cache", "static"]
    cache, static = found.causes
    assert cache.bytes == MiB(954)
    assert "reduce_bucket_size" in cache.fixes[0].action
    assert static.bytes == MiB(32 + 256 + 128)
    assert "reduce_bucket_size" in found.headline


_SP = "/venv/lib/python3.11/site-packages"
_CB = f"{_SP}/transformers/generation/continuous_batching"
_SGLANG_POOL = f"{_SP}/sglang/srt/mem_cache/unified_memory_pool.py"
_VLLM_RUNNER = f"{_SP}/vllm/v1/worker/gpu_model_runner.py"
_PAGED_CACHES = {
    "max_memory_percent": Site(
        f"{_CB}/cache.py", 207, "__init__", inside=(),
        outside=(
            (f"{_CB}/continuous_api.py", 1174, "_create_batch_processor"),
            (f"{_CB}/continuous_api.py", 797, "warmup"),
            (f"{_CB}/continuous_api.py", 1363, "continuous_batching_context_manager"),
            (f"{_CB}/continuous_api.py", 1454, "generate_batch"),
            ("/job/generate.py", 20, "<module>"),
        ),
    ),
    "mem_fraction_static": Site(
        _SGLANG_POOL, 181, "__init__", inside=(),
        outside=(
            (_SGLANG_POOL, 735, "init_unified_mamba_pools"),
            (f"{_SP}/sglang/srt/model_executor/model_runner.py", 1900, "init_memory_pool"),
        ),
    ),
    "gpu_memory_utilization": Site(
        _VLLM_RUNNER, 3762, "_allocate_kv_cache_tensors", inside=(),
        outside=(
            (_VLLM_RUNNER, 3870, "initialize_kv_cache_tensors"),
            (_VLLM_RUNNER, 3950, "initialize_kv_cache"),
            (f"{_SP}/vllm/v1/worker/gpu_worker.py", 400, "initialize_from_config"),
        ),
    ),
}  # fmt: skip
"""Each engine's paged KV cache by its real constructor's frames, with the option that sizes it
(transformers 5.25's ``ContinuousBatchingConfig``, SGLang's and vLLM's server arguments)."""


def _judged(site: Site) -> Diagnosis:
    """The diagnosis of a state-only dump holding 6 GiB at ``site`` and 1 GiB of training,
    judged with a 1,200 MiB request."""
    builder = SnapshotBuilder()
    builder.segment(Block(GiB(6), site=site), Block(GiB(1), site=TRAIN))
    snapshot = builder.build()
    snapshot["device_traces"] = [[]]
    summary = summarize(dump_from_snapshot(snapshot), requested=MiB(1200))
    assert summary.diagnosis is not None
    return summary.diagnosis


@pytest.mark.parametrize("option", sorted(_PAGED_CACHES))
def test_a_paged_cache_s_fix_names_the_option_that_sizes_it(option: str) -> None:
    """A paged KV cache is sized by its engine's configuration, so its fix names that option,
    never halving the batch or the tokens kept."""
    diagnosis = _judged(_PAGED_CACHES[option])
    top = diagnosis.causes[0]
    assert (top.name, top.bytes) == ("cache", GiB(6))
    actions = " ".join(fix.action for fix in top.fixes)
    assert option in actions
    assert option in diagnosis.headline
    assert "halve the batch" not in actions


_FLAGS = {
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "mem_fraction_static": "--mem-fraction-static",
}
"""The command-line spelling of each server's option (vLLM's ``EngineArgs.add_cli_args``,
SGLang's ``ServerArgs.add_cli_args``)."""


@pytest.mark.parametrize("option", sorted(_FLAGS))
def test_a_server_s_cache_fix_names_its_command_line_flag(option: str) -> None:
    """vLLM and SGLang servers are launched from the command line, so their cache's fix names
    the flag a user types beside the Python option."""
    top = _judged(_PAGED_CACHES[option]).causes[0]
    assert top.name == "cache"
    assert _FLAGS[option] in " ".join(fix.action for fix in top.fixes)


_SGLANG_MEMORY_POOL = f"{_SP}/sglang/srt/mem_cache/memory_pool.py"
_SGLANG_DECODE = (f"{_SP}/sglang/srt/model_executor/model_runner.py", 2100, "forward_decode")
_FORWARD_TEMPORARIES = {
    "set_kv_buffer": (
        "mem_fraction_static",
        Site(
            _SGLANG_MEMORY_POOL, 640, "set_kv_buffer", inside=(),
            outside=(
                (f"{_SP}/sglang/srt/layers/attention/flashinfer_backend.py", 700, "forward_decode"),
                (f"{_SP}/sglang/srt/layers/radix_attention.py", 108, "forward"),
                (f"{_SP}/torch/nn/modules/module.py", 1784, "_call_impl"),
                (f"{_SP}/sglang/srt/models/llama.py", 170, "forward"),
                _SGLANG_DECODE,
            ),
        ),
    ),
    "translate_loc_from_full_to_swa": (
        "mem_fraction_static",
        Site(
            _SGLANG_POOL, 898, "translate_loc_from_full_to_swa", inside=(),
            outside=(
                (f"{_SP}/sglang/srt/layers/attention/flashattention_backend.py", 600,
                 "init_forward_metadata"),
                _SGLANG_DECODE,
            ),
        ),
    ),
    "copy": (
        "gpu_memory_utilization",
        Site(
            f"{_SP}/vllm/worker/cache_engine.py", 90, "copy", inside=(),
            outside=(
                (f"{_SP}/vllm/worker/worker.py", 380, "execute_worker"),
                (f"{_SP}/vllm/worker/worker_base.py", 420, "execute_model"),
            ),
        ),
    ),
}  # fmt: skip
"""What each engine's cache files make per forward or per step: SGLang's ``set_kv_buffer``
casting a forward's keys and values to the cache's dtype (``cache_k.to(self.dtype)``), its
unified pool's slot ids translated for the sliding-window layers
(``full_to_swa_index_mapping[kv_indices].to(torch.int32)``), and vLLM's ``CacheEngine.copy``,
whose ``copy_blocks`` copies the block pointers to the device each step."""


@pytest.mark.parametrize("function", sorted(_FORWARD_TEMPORARIES))
def test_an_engine_s_forward_temporaries_are_not_its_cache(function: str) -> None:
    """Only the functions that allocate an engine's KV cache are the cache: a big temporary its
    cache's file makes in a forward or step is no cache to resize with the engine's option."""
    option, site = _FORWARD_TEMPORARIES[function]
    assert cache_framework(str(site)) is None
    diagnosis = _judged(site)
    assert "cache" not in [cause.name for cause in diagnosis.causes]
    assert option not in diagnosis.headline


def test_sglang_s_buffers_are_its_cache() -> None:
    """SGLang's pools allocate their KV buffers in ``_create_buffers`` (and the
    ``_create_buffers_normal`` it dispatches to) and their other state in constructors."""
    for function in ("__init__", "_create_buffers", "_create_buffers_normal"):
        assert cache_framework(f"{_SGLANG_MEMORY_POOL}:300 {function}") == "sglang"


def test_the_paged_cache_s_forward_reads_are_not_the_cache() -> None:
    """Only the paged cache's constructor is the cache: the keys and values the same file's
    ``update`` gathers in each forward are no cache to resize."""
    assert cache_framework(f"{_CB}/cache.py:207 __init__") == "hf_paged"
    assert cache_framework(f"{_CB}/cache.py:448 update") is None
