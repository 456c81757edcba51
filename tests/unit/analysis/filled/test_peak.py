"""The peak: its live bytes, kinds and call tree match what a labelled training loop held."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from labelled_workload import TrainingLoop

import memforensics
from memforensics.analysis import list_dumps, load_dump, summarize
from memforensics.analysis.dump import BEFORE_RECORDING, dump_from_snapshot
from memforensics.analysis.filled import CallNode, what_filled
from memforensics.analysis.schema import to_json
from memforensics.analysis.summary import summary_text
from memforensics.backends.sim import SimOutOfMemoryError, reset_device
from memforensics.testing import Block, MiB, SnapshotBuilder

GiB = 1 << 30


def _leaves(node: CallNode) -> list[CallNode]:
    if not node.children:
        return [node]
    return [leaf for child in node.children for leaf in _leaves(child)]


def _names(node: CallNode) -> list[str]:
    return [node.name] + [name for child in node.children for name in _names(child)]


def test_peak_bytes_kinds_and_tree_match_the_truth(tmp_path: Path) -> None:
    """Live bytes at the peak are block bytes: at least the loop's most requested bytes, at
    most its most block bytes (a freed block handed over unsplit is counted at its rounded
    request); the call tree's root and leaves add up to them, and the snapshot's kinds equal
    the blocks the loop holds, byte for byte."""
    device = reset_device(4 * GiB)
    device.record_memory_history("all", max_entries=1_000_000)
    train = TrainingLoop(device, tmp_path, micro_batches=2, seed=11)
    train.build_model()
    for number in range(3):
        train.step(number, device.set_memory_metadata)
    filled = what_filled(dump_from_snapshot(device.snapshot()))
    peak = filled.peak
    assert peak.name == "peak"
    assert train.truth.peak_requested < peak.live_bytes <= train.truth.peak_bytes
    assert {k.kind for k in peak.kinds} == set(train.truth.peak_kinds)
    now: dict[str, int] = {}
    for address, label in train.truth.live.items():
        now[label] = now.get(label, 0) + train.truth.sizes[address]
    assert {k.kind: k.bytes for k in filled.kinds} == now
    assert peak.tree.bytes == peak.live_bytes
    assert sum(leaf.bytes for leaf in _leaves(peak.tree)) == peak.live_bytes
    assert any(" forward" in name and "labelled_workload.py" in name for name in _names(peak.tree))
    assert filled.oom is None


def test_summary_shows_kinds_and_tree_and_json_has_all(tmp_path: Path) -> None:
    """summary text has the kinds table and the tree's top; --json the whole tree."""
    device = reset_device(32 * MiB(1))
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), steps=1)
    kept = []

    def fill() -> None:
        for _ in range(5):
            kept.append(device.empty(MiB(10)))

    with pytest.raises(SimOutOfMemoryError), mf.step(0):
        fill()
    mf.close()
    oom = list_dumps(tmp_path).first_oom
    assert oom is not None
    summary = summarize(load_dump(oom.path))
    text = summary_text(summary, verbose=True)
    assert "live memory by kind" in text
    assert "call tree at the peak" in text
    data = json.loads(json.dumps(to_json(summary)))
    assert data["peak"]["live_bytes"] == MiB(30)
    assert data["oom"]["live_bytes"] == MiB(30)
    assert [k["kind"] for k in data["kinds"]] == ["activation"]  # live at an OOM in forward

    def depth(node: dict[str, object]) -> int:
        children = node["children"]
        assert isinstance(children, list)
        return 1 + max((depth(child) for child in children), default=0)

    assert depth(data["peak"]["tree"]) >= 3  # the whole tree, not its top


def test_without_history_the_snapshot_is_the_moment() -> None:
    """No trace: the moment is the snapshot itself, blocks without frames under their own node."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(6), site=None), Block(MiB(2)))
    snapshot = builder.build()
    snapshot["device_traces"] = [[]]
    filled = what_filled(dump_from_snapshot(snapshot))
    assert filled.peak.name == "snapshot"
    assert filled.peak.live_bytes == MiB(8)
    top = filled.peak.tree.sorted_children()[0]
    assert (top.name, top.bytes) == (BEFORE_RECORDING, MiB(6))


_SITE = "/venv/lib/python3.12/site-packages"


def _frame(filename: str, line: int, name: str) -> dict[str, object]:
    return {"filename": filename, "line": line, "name": name}


def test_framework_frames_are_never_a_level_between_user_lines() -> None:
    """A stack as `memforensics run` leaves it (runpy and memforensics' CLI outside, torch's
    module call between two user lines, a torch op inside): the tree is the user's path, then
    one leaf named by the op, and no `_wrapped_call_impl` or runpy level."""
    module = f"{_SITE}/torch/nn/modules/module.py"
    frames = [  # innermost first, as PyTorch records them
        _frame("??", 0, "c10::cuda::CUDACachingAllocator::malloc"),
        _frame(f"{_SITE}/torch/nn/functional.py", 2482, "batch_norm"),
        _frame(f"{_SITE}/torch/nn/modules/batchnorm.py", 193, "forward"),
        _frame(module, 1750, "_call_impl"),
        _frame(module, 1739, "_wrapped_call_impl"),
        _frame("/job/model.py", 40, "forward"),
        _frame(module, 1750, "_call_impl"),
        _frame(module, 1739, "_wrapped_call_impl"),
        _frame("/job/train.py", 12, "step"),
        _frame("<frozen runpy>", 88, "_run_code"),
        _frame(f"{_SITE}/memforensics/cli/target.py", 80, "run_target"),
        _frame(f"{_SITE}/memforensics/cli/commands/run.py", 70, "run"),
        _frame(f"{_SITE}/memforensics/cli/_main.py", 60, "main"),
        _frame("/venv/bin/memforensics", 8, "<module>"),
        _frame("/usr/lib/python3.12/runpy.py", 198, "_run_module_as_main"),
    ]
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(8)))
    snapshot = builder.build()
    for entry in snapshot["device_traces"][0]:
        entry["frames"] = frames
    for block in snapshot["segments"][0]["blocks"]:
        block["frames"] = frames
    tree = what_filled(dump_from_snapshot(snapshot)).peak.tree
    names = _names(tree)[1:]
    assert names == [
        "/job/train.py:12 step",
        "/job/model.py:40 forward",
        f"{_SITE}/torch/nn/functional.py:2482 batch_norm (+3 library frames)",
    ]


def test_a_stack_of_framework_frames_only_is_one_node_named_by_the_innermost() -> None:
    """With no user frame at all, the stack is one node: its innermost framework frame."""
    frames = [
        _frame(f"{_SITE}/torch/optim/adam.py", 111, "_init_group"),
        _frame(f"{_SITE}/torch/optim/optimizer.py", 480, "wrapper"),
        _frame("<frozen runpy>", 88, "_run_code"),
    ]
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(8)))
    snapshot = builder.build()
    for entry in snapshot["device_traces"][0]:
        entry["frames"] = frames
    tree = what_filled(dump_from_snapshot(snapshot)).peak.tree
    assert _names(tree)[1:] == [f"{_SITE}/torch/optim/adam.py:111 _init_group (+2 library frames)"]
