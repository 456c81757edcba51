"""Kinds of memory from lifetimes, checked byte for byte against a labelled sim training loop."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import pytest
from labelled_workload import InferenceLoop, TrainingLoop, engine_thread_frames

import memforensics
from memforensics.analysis import list_dumps, load_dump
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.filled import BEFORE, Allocation
from memforensics.analysis.filled.kinds import classify
from memforensics.analysis.filled.lifetime import lifetimes
from memforensics.backends.sim import reset_device
from memforensics.testing import Block, MiB, SnapshotBuilder
from shared_data import REAL_SNAPSHOTS, needs_shared_data

GiB = 1 << 30


def _run(
    tmp_path: Path, *, steps: int = 4, stacks: Literal["python", "all"] = "python", **loop: Any
) -> tuple[dict[str, Any], TrainingLoop]:
    device = reset_device(4 * GiB)
    device.record_memory_history("all", max_entries=1_000_000, stacks=stacks)
    train = TrainingLoop(device, tmp_path, **loop)
    train.build_model()
    for number in range(steps):
        train.step(number, device.set_memory_metadata)
    return device.snapshot(), train


def _traced(snapshot: dict[str, Any]) -> list[Allocation]:
    found = lifetimes(dump_from_snapshot(snapshot))
    classify(found)
    return sorted((a for a in found.allocations if a.start != BEFORE), key=lambda a: a.start)


def _accuracy(allocations: list[Allocation], labels: list[str]) -> tuple[float, Counter[str]]:
    assert len(allocations) == len(labels)
    right = total = 0
    wrong: Counter[str] = Counter()
    for found, label in zip(allocations, labels, strict=True):
        total += found.size
        if found.kind == label:
            right += found.size
        else:
            wrong[f"{label} as {found.kind}"] += found.size
    return right / total, wrong


@pytest.mark.parametrize(
    ("micro_batches", "zero_grad_at_end"), [(1, False), (4, False), (2, True), (1, True)]
)
@pytest.mark.parametrize("engine_thread", [False, True])
def test_kinds_match_the_labelled_training_loop(
    tmp_path: Path, micro_batches: int, zero_grad_at_end: bool, engine_thread: bool
) -> None:
    """Byte-weighted accuracy ≥ 95 % over every traced allocation, with and without
    backward's Python frames, with gradient accumulation and either zero_grad placement."""
    snapshot, train = _run(
        tmp_path, micro_batches=micro_batches, zero_grad_at_end=zero_grad_at_end, seed=3
    )
    if engine_thread:
        snapshot = engine_thread_frames(snapshot)
    accuracy, wrong = _accuracy(_traced(snapshot), train.truth.labels)
    assert accuracy >= 0.95, wrong.most_common(4)
    assert set(train.truth.labels) == {
        "parameter",
        "activation",
        "temporary",
        "gradient",
        "optimizer_state",
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kinds_match_the_labelled_inference_loop(tmp_path: Path, seed: int) -> None:
    """Serving a model (module constructors, a vLLM KV cache, cuBLAS's workspace, decode steps,
    a last forward under way at the dump, no backward): byte-weighted accuracy ≥ 95 % over
    every traced allocation, and each of those kinds is found."""
    device = reset_device(4 * GiB)
    device.record_memory_history("all", max_entries=1_000_000)
    serve = InferenceLoop(device, tmp_path, seed=seed)
    serve.build()
    for _ in range(4):
        serve.forward()
    serve.forward(last=True)
    allocations = _traced(device.snapshot())
    accuracy, wrong = _accuracy(allocations, serve.truth.labels)
    assert accuracy >= 0.95, wrong.most_common(4)
    assert {a.kind for a in allocations} >= {"parameter", "kv_cache", "workspace", "activation"}


def test_window_dump_kinds_are_the_live_truth(tmp_path: Path) -> None:
    """Through install(steps=2): the window's live memory by kind matches what the loop holds,
    parameters and Adam state (made before the window) included."""
    device = reset_device(4 * GiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path / "run"), steps=2, skip_first=2)
    train = TrainingLoop(device, tmp_path, seed=5)
    train.build_model()
    for number in range(4):
        with mf.step(number):
            train.step(number, lambda _text: None)  # the facade tags steps itself
    mf.close()
    [window] = [entry for entry in list_dumps(tmp_path / "run").dumps if entry.kind == "window"]
    found = lifetimes(load_dump(window.path))
    classify(found)
    live = {a.addr: a for a in found.at_snapshot()}
    assert set(live) == set(train.truth.live)
    total = sum(a.size for a in live.values())
    right = sum(a.size for a in live.values() if a.kind == train.truth.live[a.addr])
    assert right / total >= 0.95
    assert {train.truth.live[a] for a in live} == {"parameter", "optimizer_state", "gradient"}


def test_blocks_without_frames_are_before_recording() -> None:
    """A live block the trace never saw and that has no frames was made before recording."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(8), site=None), Block(MiB(2)))
    snapshot = builder.build()
    trace = snapshot["device_traces"][0]
    trace[:] = [entry for entry in trace if entry["size"] != MiB(8)]  # made before recording
    [old, traced] = sorted(_all(snapshot), key=lambda a: a.size, reverse=True)
    assert old.kind == "before_recording"
    assert old.confidence == 1.0
    assert traced.kind != "before_recording"


def _all(snapshot: dict[str, Any]) -> list[Allocation]:
    found = lifetimes(dump_from_snapshot(snapshot))
    classify(found)
    return found.allocations


def test_no_frames_anywhere_falls_back_on_the_peak(tmp_path: Path) -> None:
    """With every frame stripped, forward/backward split at each step's peak still finds
    activations and gradients, at a lower confidence than with frames."""
    snapshot, train = _run(tmp_path, seed=7)
    bare = copy.deepcopy(snapshot)
    for entry in bare["device_traces"][0]:
        entry.pop("frames", None)
    allocations = _traced(bare)
    accuracy, _wrong = _accuracy(allocations, train.truth.labels)
    assert accuracy >= 0.6, _wrong.most_common(5)
    kinds = {a.kind for a in allocations}
    assert {"activation", "gradient"} <= kinds
    with_frames = _traced(snapshot)
    guessed = [(a, b) for a, b in zip(allocations, with_frames, strict=True) if a.frames is None]
    assert len(guessed) > len(allocations) // 2  # the freed ones: no block frames to fall back on
    assert all(a.confidence < b.confidence for a, b in guessed)


def test_a_tensor_kept_from_an_earlier_step_is_not_a_parameter(tmp_path: Path) -> None:
    """In a window dump, a forward tensor tagged with an earlier step (a kept metric: the
    demo's leak) is 'unknown', while the untagged one a model made before training is a
    parameter."""
    device = reset_device(GiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), steps=1, every=3)

    class Model:
        def __init__(self) -> None:
            self.weights = device.empty(MiB(8))

    weights = Model().weights
    kept = []
    for number in range(4):
        with mf.step(number):
            kept.append(device.empty(MiB(1)))
    mf.close()
    [window] = [e for e in list_dumps(tmp_path).dumps if e.steps == (3, 3)]
    found = lifetimes(load_dump(window.path))
    classify(found)
    kinds = {a.addr: a.kind for a in found.at_snapshot()}
    assert kinds[weights.address] == "parameter"
    assert [kinds[t.address] for t in kept[:3]] == ["unknown"] * 3


def test_cpp_frames_do_not_confuse_the_phases(tmp_path: Path) -> None:
    """With C++ frames recorded too (stacks="all") and backward on the engine thread, the
    byte-weighted accuracy still reaches 95 %."""
    snapshot, train = _run(tmp_path, stacks="all", micro_batches=2, seed=9)
    trace = snapshot["device_traces"][0]
    assert any(frame["filename"] == "??" for frame in trace[0]["frames"])
    accuracy, wrong = _accuracy(_traced(engine_thread_frames(snapshot)), train.truth.labels)
    assert accuracy >= 0.95, wrong.most_common(4)


@needs_shared_data
def test_real_cnn_snapshot_kinds_agree_with_its_own_frames() -> None:
    """On the real CNN snapshot: live blocks without frames and without an alloc entry are
    exactly the 'before_recording' bytes; what is called optimizer state was allocated under
    torch/optim; and backward's frame-less allocations are never called activations (its
    cuBLAS workspace is a workspace, the rest gradients or temporaries)."""
    dump = load_dump(REAL_SNAPSHOTS / "cuda-cnn-stacks-all.pickle")
    found = lifetimes(dump)
    classify(found)
    traced = {a["addr"] for a in dump.trace if a.get("action") == "alloc"}
    untraced_bare = sum(
        block.size
        for segment in dump.segments
        for block in segment.blocks
        if block.state == "active_allocated" and not block.frames and block.address not in traced
    )
    live = found.at_snapshot()
    assert untraced_bare > 0
    assert sum(a.size for a in live if a.kind == "before_recording") == untraced_bare
    optimizer = [a for a in found.allocations if a.kind == "optimizer_state"]
    assert optimizer
    assert all(any("/torch/optim/" in f["filename"] for f in a.frames) for a in optimizer)
    bare = [a for a in found.allocations if a.start != BEFORE and a.frames is not None]
    engine = [a for a in bare if not any(f["filename"].endswith(".py") for f in a.frames)]
    assert engine
    assert all(a.kind in ("gradient", "temporary", "workspace") for a in engine)


def test_a_bare_segment_list_is_a_low_confidence_guess() -> None:
    """Without a trace or step tags (memory_snapshot()'s list) kinds are guesses, and say so."""
    from memforensics.analysis import summarize
    from memforensics.testing import as_segment_list, fragmented

    listed = summarize(dump_from_snapshot(as_segment_list(fragmented().snapshot)))
    assert listed.filled is not None
    assert listed.filled.kinds
    assert all(kind.confidence < 0.5 for kind in listed.filled.kinds)
