"""A request that alone exceeds what PyTorch could get with nothing else live (the limit less the
memory outside PyTorch) is its own cause: named first, with its size, what it exceeds and the
site that made it, fixed by a smaller request (or a higher per-process limit); no other cause
is called enough, and the verdict never says live memory fills the device. A request that fits
an empty device but not beside what is live keeps the causes that free room."""

from __future__ import annotations

from typing import Any

from memforensics.analysis import summarize
from memforensics.analysis.diagnosis import Diagnosis
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.schema import to_json
from memforensics.analysis.summary import Summary, summary_text
from memforensics.testing import (
    TRAIN,
    Block,
    GiB,
    MiB,
    SnapshotBuilder,
    make_sidecar,
)

INACTIVE = "inactive"
HOLD_LESS = "Hold less at the peak"


def _oom(live: int, requested: int, *, limit: int, device_free: int, hole: int = 0) -> Summary:
    """An OOM dump: ``live`` bytes made at model.py:40 (``hole`` free beside them) when
    ``requested`` failed (the trace's ``oom`` entry made at model.py:40 too), with the
    observer's limit and device free in the sidecar."""
    builder = SnapshotBuilder()
    blocks = [Block(live, site=TRAIN)]
    if hole:
        blocks.append(Block(hole, state=INACTIVE, site=None))
    builder.segment(*blocks)
    builder.oom(requested=requested, device_free=device_free)
    figures = {
        "requested_bytes": requested,
        "allocation_bytes": requested,
        "device_total_bytes": limit,
        "device_free_bytes": device_free,
    }
    sidecar = make_sidecar("oom", schema=2, oom=figures)
    return summarize(dump_from_snapshot(builder.build(), sidecar=sidecar))


def _diagnosis(summary: Summary) -> Diagnosis:
    assert summary.diagnosis is not None
    return summary.diagnosis


def _words(text: str) -> str:
    return " ".join(text.split())


def _no_other_cause_is_enough(found: Diagnosis) -> None:
    for cause in found.causes[1:]:
        assert cause.sufficient is not True, cause
        assert not any(fix.sufficient for fix in cause.fixes), cause


def test_a_request_over_the_device_with_little_live_is_the_cause() -> None:
    """20 GiB asked on a 16 GiB device holding 1 GiB live and 512 MiB outside PyTorch: the
    request alone exceeds the 15.50 GiB PyTorch could get, so it heads the diagnosis with its
    site and a smaller request as the fix; the verdict says the request exceeds it, not that
    live memory fills the device, and advises no holding less."""
    summary = _oom(GiB(1), GiB(20), limit=GiB(16), device_free=GiB(14.5))
    found = _diagnosis(summary)
    top = found.causes[0]
    assert (top.name, top.bytes, top.sites) == ("request", GiB(20), (str(TRAIN),))
    assert top.sufficient is True
    assert top.evidence.startswith(
        "20.00 GiB asked at model.py:40 forward exceeds the 15.50 GiB PyTorch could get with"
        " nothing else live (the 16.00 GiB limit less 512.00 MiB outside PyTorch)"
    )
    [fix] = top.fixes
    assert fix.sufficient is True
    assert fix.action.startswith("make that one allocation smaller, under the 14.50 GiB left")
    assert found.headline.startswith("the request alone: 20.00 GiB asked at model.py:40")
    assert "→ make that one allocation smaller" in found.headline
    assert "set_per_process_memory_fraction" not in found.headline  # no per-process limit here
    _no_other_cause_is_enough(found)
    verdict = summary.verdict
    assert (verdict.name, verdict.reason) == ("exhausted", "request over the limit")
    assert "fills the device" not in verdict.explanation
    assert verdict.explanation.startswith(
        "The 20.00 GiB request alone exceeds the 15.50 GiB PyTorch could get with nothing else live"
    )
    assert "1.00 GiB was live beside it" in verdict.explanation
    assert HOLD_LESS not in (verdict.advice or "")
    assert (verdict.advice or "").startswith("Make that one allocation smaller")


def test_text_and_json_tell_the_same_story() -> None:
    """summary's text and its JSON carry the one headline and verdict: the cause line is the
    headline, and the JSON's first cause is the request with its fix marked enough."""
    summary = _oom(GiB(1), GiB(20), limit=GiB(16), device_free=GiB(14.5))
    found = _diagnosis(summary)
    said = _words(summary_text(summary, width=80))
    assert f"cause {_words(found.headline)}" in said
    assert "fills the device" not in said
    data: dict[str, Any] = to_json(summary)
    [first, *_rest] = data["diagnosis"]["causes"]
    assert first["name"] == "request"
    assert first["fixes"][0]["sufficient"] is True
    assert data["diagnosis"]["headline"] == found.headline
    assert data["verdict"]["reason"] == "request over the limit"


def test_a_request_over_a_per_process_limit_names_the_limit_and_raising_it() -> None:
    """A 2 GiB request under set_per_process_memory_fraction(0.01) of an 80 GiB device
    (819.20 MiB allowed, 79 GiB free on the device): the per-process limit is what it exceeds,
    and raising it is a fix beside a smaller request, in the cause and the verdict's advice."""
    limit = int(GiB(80) * 0.01)
    summary = _oom(MiB(4), GiB(2), limit=limit, device_free=GiB(79), hole=MiB(16))
    found = _diagnosis(summary)
    top = found.causes[0]
    assert top.name == "request"
    assert "exceeds the 819.20 MiB per-process limit" in top.evidence
    actions = [fix.action for fix in top.fixes]
    assert actions[0].startswith("make that one allocation smaller, under the 799.20 MiB")
    assert actions[1] == "raise set_per_process_memory_fraction so the limit holds the request"
    assert all(fix.sufficient for fix in top.fixes)
    assert "; or raise set_per_process_memory_fraction" in found.headline
    verdict = summary.verdict
    assert verdict.reason == "request over the limit"
    assert "819.20 MiB per-process limit" in verdict.explanation
    assert "fills the device" not in verdict.explanation
    assert "raise set_per_process_memory_fraction" in (verdict.advice or "")


def test_raising_a_per_process_limit_is_no_fix_when_the_device_is_too_small() -> None:
    """A 100 GiB request under the same limit: the device itself has only 79 GiB free, so
    raising the limit would not serve it and is not offered; a smaller request is."""
    limit = int(GiB(80) * 0.01)
    summary = _oom(MiB(4), GiB(100), limit=limit, device_free=GiB(79), hole=MiB(16))
    top = _diagnosis(summary).causes[0]
    assert top.name == "request"
    assert [fix.action.split(",")[0] for fix in top.fixes] == ["make that one allocation smaller"]
    assert "set_per_process_memory_fraction so" not in (summary.verdict.advice or "")


def test_a_request_that_fits_an_empty_device_keeps_the_causes_that_free_room() -> None:
    """6 GiB asked on a 16 GiB device beside 12 GiB live: it would fit with nothing else live,
    so it is no cause of its own; the step's tensors are, enough to free the 2.50 GiB it
    lacked, and the verdict is live memory filling the device (proven: 12 + 6 + 0.5 GiB)."""
    summary = _oom(GiB(12), GiB(6), limit=GiB(16), device_free=GiB(3.5))
    found = _diagnosis(summary)
    names = [cause.name for cause in found.causes]
    assert "request" not in names
    assert found.needed_bytes == GiB(2.5)
    assert (found.causes[0].name, found.causes[0].sufficient) == ("activations", True)
    assert "the request alone" not in found.headline
    verdict = summary.verdict
    assert (verdict.name, verdict.reason) == ("exhausted", "proven")
    assert "fills the device" in verdict.explanation


def test_memory_outside_pytorch_that_would_make_room_stays_the_cause() -> None:
    """8 GiB asked on a 16 GiB device where something outside PyTorch holds 10 GiB: the
    request exceeds the 6 GiB PyTorch could get beside that memory, but without it the request
    fits, so that memory is the cause and the verdict, not the request's size."""
    summary = _oom(GiB(1), GiB(8), limit=GiB(16), device_free=GiB(5))
    found = _diagnosis(summary)
    assert found.causes[0].name == "outside"
    assert found.causes[0].sufficient is True
    assert "request" not in [cause.name for cause in found.causes]
    assert summary.verdict.name == "external"


def test_a_given_request_over_a_given_device_is_the_cause() -> None:
    """A raw snapshot asked about 20 GiB (--requested) on a 16 GiB device (--device-memory):
    it does not fit, and the request alone is why, with nothing freed able to make room; no
    site is named where nothing records one."""
    builder = SnapshotBuilder()
    builder.segment(Block(GiB(2), site=TRAIN))
    summary = summarize(
        dump_from_snapshot(builder.build()), requested=GiB(20), device_memory=GiB(16)
    )
    found = _diagnosis(summary)
    assert found.causes[0].name == "request"
    assert "the request alone: 20.00 GiB" in found.headline
    assert "exceeds the 16.00 GiB limit" in found.headline
    assert found.causes[0].sites == ()
    assert "a smaller batch or sequence where it is made" in found.headline
    _no_other_cause_is_enough(found)
    assert summary.verdict.reason == "request over the limit"
