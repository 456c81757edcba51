"""The story of each real snapshot, as a person reading the raw pickle tells it: a dump with no
OOM is answered at its peak (its bytes and trace entry, walked here from the raw events), one
without a trace says whether anything failed is unknown, and none says ``nothing failed``."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from memforensics._units import format_bytes
from memforensics.analysis import load_dump, summarize
from shared_data import (
    REAL_SNAPSHOTS,
    REAL_WORKLOADS,
    needs_shared_data,
    real_params,
    real_snapshots,
)

REAL = REAL_SNAPSHOTS
pytestmark = needs_shared_data


def _raw(path: Path) -> dict[str, Any]:
    with path.open("rb") as file:
        raw: dict[str, Any] = pickle.load(file)
    return raw


def _peak(raw: dict[str, Any]) -> tuple[int, int] | None:
    """(allocated bytes, trace entry) at the highest point of the raw trace, walked back from
    the snapshot's allocated blocks (each event's size rounded up to 512 bytes, as blocks are);
    None without a trace of more than one event."""
    trace = [entry for device in raw["device_traces"] for entry in device]
    if len([e for e in trace if e["action"] == "alloc"]) < 2:
        return None
    live = sum(
        block["size"]
        for segment in raw["segments"]
        for block in segment["blocks"]
        if block["state"] == "active_allocated"
    )
    after = [0] * len(trace)
    for index in range(len(trace) - 1, -1, -1):
        after[index] = live
        entry = trace[index]
        size = -(-entry.get("size", 0) // 512) * 512
        if entry["action"] == "alloc":
            live -= size
        elif entry["action"] == "free_requested":
            live += size
    best = max(after)
    return best, after.index(best)


@pytest.mark.parametrize("path", real_params(real_snapshots()), ids=lambda path: path.stem)
def test_every_real_dump_has_a_story_about_its_peak(path: Path) -> None:
    """No real dump says ``nothing failed`` or ``none``; a traced one heads with its peak, at the
    entry and bytes the raw events give; a traceless one says whether anything failed is
    unknown and what fills its snapshot."""
    raw = _raw(path)
    summary = summarize(load_dump(path))
    assert summary.diagnosis is not None
    headline = summary.diagnosis.headline
    assert "nothing failed" not in headline
    assert not headline.startswith("none")
    peak = _peak(raw)
    if peak is None:
        allocated = sum(
            block["size"]
            for segment in raw["segments"]
            for block in segment["blocks"]
            if block["state"] == "active_allocated"
        )
        assert headline.startswith("whether anything failed is unknown")
        assert f"at the snapshot {format_bytes(allocated)}: " in headline
        return
    size, entry = peak
    assert headline.startswith(f"peak {format_bytes(size)} at entry {entry:,}: ")
    assert "→" in headline
    assert "frees ≈" in headline


def test_the_kept_warmup_graph_step_names_adamw_state() -> None:
    """The training step after a kept warm-up graph: the raw trace shows the optimizer's step
    making held blocks at optimizer.py:74 and :75 under torch/optim (AdamW's two moments);
    the peak's story is that optimizer state, with its line and the 8-bit fix."""
    path = REAL / "cuda-train-step-after-kept-warmup-graph.pickle"
    raw = _raw(path)
    lines = {
        (frame["filename"].rsplit("/", 1)[-1], frame["line"])
        for segment in raw["segments"]
        for block in segment["blocks"]
        for frame in block.get("frames") or []
        if frame["filename"].endswith("cs336_basics/optimizer.py")
    }
    assert ("optimizer.py", 74) in lines
    summary = summarize(load_dump(path))
    assert summary.diagnosis is not None
    headline = summary.diagnosis.headline
    assert ": optimizer state " in headline
    assert "optimizer.py:74 step" in headline
    assert "8 bits" in headline


def test_the_oom_dump_without_history_says_what_cannot_be_known() -> None:
    """Taken at an OOM without history: the headline says whether anything failed is unknown
    (no history, no sidecar) above a verdict that says the same, and no cause claims a
    request it cannot know."""
    summary = summarize(load_dump(REAL / "cuda-llm-at-oom-no-history.pickle"))
    assert summary.diagnosis is not None
    assert summary.diagnosis.headline.startswith(
        "whether anything failed is unknown (no history and no sidecar)"
    )
    assert summary.verdict.name == "unknown"
    assert all(cause.sufficient is None for cause in summary.diagnosis.causes)


def _name(path: Path) -> str:
    """A real dump's name: its file's, or its workload folder's."""
    return path.parent.name if path.stem == "snapshot" else path.stem


_NO_GRAD = [
    REAL / "cuda-mha-lm-inference-from-empty.pickle",
    REAL / "cuda-ring-buffer-10000.pickle",
    REAL_WORKLOADS / "small-lm-inference" / "snapshot.pickle",
]
"""Dumps of forwards under ``torch.no_grad()`` (their READMEs and ``truth.json`` say so)."""


@pytest.mark.parametrize("path", real_params(_NO_GRAD), ids=_name)
def test_a_no_grad_peak_is_its_temporaries_and_no_checkpointing(path: Path) -> None:
    """A no_grad forward's raw trace has no autograd frame (no backward runs): its peak's
    forward tensors are named as the kinds table names them (``temporaries``, with the
    table's bytes), and the fix is a smaller batch or sequence with its bytes, never
    activation checkpointing, which frees nothing without a backward."""
    raw = _raw(path)
    frames = {
        frame["filename"]
        for device in raw["device_traces"]
        for entry in device
        for frame in entry.get("frames") or []
    }
    assert not any("/torch/autograd/" in name for name in frames)
    summary = summarize(load_dump(path))
    assert summary.diagnosis is not None
    assert summary.peak is not None
    kinds = {k.kind: k.bytes for k in summary.peak.kinds}
    assert "activation" not in kinds
    headline = summary.diagnosis.headline
    assert f": temporaries {format_bytes(kinds['temporary'])}" in headline
    assert "checkpointing" not in headline
    assert f"half the batch or the sequence frees ≈ {format_bytes(kinds['temporary'] // 2)}" in (
        headline
    )
    [cause] = [c for c in summary.diagnosis.causes if c.name == "activations"]
    assert not any("checkpointing" in fix.action for fix in cause.fixes)
