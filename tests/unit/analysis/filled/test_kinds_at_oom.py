"""Kinds at an OOM: frees caused by the OOM and blocks held since set-up are not over-read."""

from __future__ import annotations

from pathlib import Path

import pytest
from labelled_workload import TrainingLoop

from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.filled import Allocation
from memforensics.analysis.filled.kinds import classify
from memforensics.analysis.filled.lifetime import lifetimes
from memforensics.backends.sim import SimOutOfMemoryError, reset_device
from memforensics.testing import Block, MiB, Site, SnapshotBuilder

GiB = 1 << 30
SITE_PACKAGES = "/venv/lib/python3.12/site-packages"
KV_CACHE = Site(f"{SITE_PACKAGES}/vllm/worker/cache_engine.py", 96, "_allocate_kv_cache")
MODEL_TO = Site(f"{SITE_PACKAGES}/torch/nn/modules/module.py", 1326, "_apply")
SCRIPT = Site("/job/serve.py", 30, "main")


def test_blocks_freed_by_the_unwinding_are_judged_at_the_oom(tmp_path: Path) -> None:
    """An OOM in forward, then the unwinding frees the step's activations before the snapshot:
    those blocks are the loop's activations, not temporaries, at lower confidence than a
    block whose own free was seen."""
    device = reset_device(4 * GiB)
    device.record_memory_history("all", max_entries=1_000_000)
    train = TrainingLoop(device, tmp_path, seed=4)
    train.build_model()
    for number in range(2):
        train.step(number, device.set_memory_metadata)
    device.set_memory_metadata("step=2")
    kept = train.forward()
    labels = {tensor.address: train.truth.live[tensor.address] for tensor in kept}
    with pytest.raises(SimOutOfMemoryError):
        device.empty(8 * GiB)
    for tensor in kept:  # the exception unwinds: forward's tensors go
        train.free(tensor)
    found = lifetimes(dump_from_snapshot(device.snapshot()))
    classify(found)
    [oom] = found.oom_positions
    unwound = [a for a in found.allocations if a.start < oom < a.end < found.length]
    assert {a.addr for a in unwound} == set(labels)
    assert all(a.kind == labels[a.addr] == "activation" for a in unwound)
    seen = [a for a in found.allocations if a.kind == "activation" and a.end < oom]
    assert max(a.confidence for a in unwound) < min(a.confidence for a in seen)


def _state_only(*segments: tuple[Block, ...], plain: bool = False) -> list[Allocation]:
    """A dump with blocks and their frames but no trace (``oom_history="state"``); ``plain``:
    the script's frame made them directly, with no module's forward inside it."""
    builder = SnapshotBuilder()
    for blocks in segments:
        builder.segment(*blocks)
    snapshot = builder.build()
    snapshot["device_traces"] = [[]]
    if plain:
        for segment in snapshot["segments"]:
            for block in segment["blocks"]:
                block["frames"] = [f for f in block["frames"] if f["name"] != "forward"]
    found = lifetimes(dump_from_snapshot(snapshot))
    classify(found)
    return found.allocations


def test_a_kv_cache_held_since_setup_is_a_kv_cache() -> None:
    """A vLLM KV cache (32 same-sized blocks from cache_engine.py) is a KV cache, not
    parameters, while weights moved by Module._apply stay parameters."""
    allocations = _state_only(
        tuple(Block(MiB(64), site=KV_CACHE) for _ in range(32)),
        tuple(Block(MiB(10), site=MODEL_TO) for _ in range(3)),
    )
    kinds = {(a.size, a.kind) for a in allocations}
    assert kinds == {(MiB(64), "kv_cache"), (MiB(10), "parameter")}


def test_a_cublas_workspace_is_a_workspace() -> None:
    """One block allocated under cuBLASLt's workspace (C++ frames) in a forward is a
    workspace, not a parameter."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(32), site=SCRIPT))
    snapshot = builder.build()
    snapshot["device_traces"] = [[]]
    [block] = snapshot["segments"][0]["blocks"]
    block["frames"].insert(0, {"filename": "??", "line": 0, "name": "getCUDABlasLtWorkspace"})
    found_all = lifetimes(dump_from_snapshot(snapshot))
    classify(found_all)
    [found] = found_all.allocations
    assert found.kind == "workspace"


def test_one_big_block_from_a_script_is_not_confidently_a_parameter() -> None:
    """A single huge block held since set-up, made by a plain script frame, is 'unknown'; many
    same-sized ones are parameters, at lower confidence than with a frame that builds a model."""
    [single] = _state_only((Block(GiB, site=SCRIPT),), plain=True)
    assert single.kind == "unknown"
    layers = _state_only(tuple(Block(MiB(24), site=SCRIPT) for _ in range(8)), plain=True)
    assert {a.kind for a in layers} == {"parameter"}
    [moved] = _state_only((Block(MiB(24), site=MODEL_TO),))
    assert moved.kind == "parameter"
    assert max(a.confidence for a in layers) < moved.confidence


def test_a_block_from_before_recording_freed_by_the_unwinding_stays_certain() -> None:
    """Made before recording and freed after the OOM: 'before_recording' is a fact, not a guess
    the OOM could spoil, so its confidence stays 1."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(8), state="inactive"), Block(MiB(12), state="inactive"))
    snapshot = builder.build()
    trace = snapshot["device_traces"][0]
    trace[:] = [entry for entry in trace if entry["action"] != "alloc" or entry["size"] != MiB(8)]
    trace.insert(1, {"action": "oom", "addr": 0, "size": MiB(64), "stream": 0, "frames": []})
    found = lifetimes(dump_from_snapshot(snapshot))
    classify(found)
    [old] = [a for a in found.allocations if a.requested == MiB(8)]
    assert (old.kind, old.confidence) == ("before_recording", 1.0)


def test_blocks_made_in_a_forward_are_never_parameters() -> None:
    """Eight equal blocks held since before the trace, made under a module's forward (attention
    maps of a UNet, hidden states): not parameters, however many share a size."""
    maps = _state_only(tuple(Block(MiB(24), site=SCRIPT) for _ in range(8)))
    assert {a.kind for a in maps} == {"activation"}
