"""The Python frames a planned trace gives its free events: the ones PyTorch's recorder gives
them (``free`` records ``context ? context : block->context_when_allocated``), the stack at the
free where the history gathers one (``context="all"``), else the stack the block was allocated
under; never the stack of whatever allocation the plan served last."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

CLEARED_WORKSPACES = """
import torch

torch.cuda.memory._record_memory_history(context="CONTEXT")


def take_workspace():
    a = torch.ones(64, 64, device="cuda")
    return a @ a


def release_workspaces():
    torch._C._cuda_clearCublasWorkspaces()


def allocate_last():
    return torch.zeros(10, device="cuda")


product = take_workspace()
kept = allocate_last()
release_workspaces()
torch.cuda.memory._dump_snapshot("snapshot.pickle")
"""
WORKSPACE = 32 << 20
"""cuBLAS's workspace per handle and stream on capability 9.0."""


def _frees(folder: Path, context: str) -> dict[tuple[str, int], list[str]]:
    """Plan the script recording with ``context``; each free event's function names by action
    and size."""
    script(folder, CLEARED_WORKSPACES.replace("CONTEXT", context))
    done = plan(folder, "--device-capability", "9.0", "--out-dir", "out", "train.py")
    assert done.returncode == 0, done.stderr
    with (folder / "snapshot.pickle").open("rb") as f:
        trace: list[dict[str, Any]] = pickle.load(f)["device_traces"][0]
    return {
        (e["action"], e["size"]): [frame["name"] for frame in e["frames"]]
        for e in trace
        if e["action"].startswith("free")
    }


def test_a_cleared_workspace_s_free_names_the_function_that_cleared_it(tmp_path: Path) -> None:
    """Recorded with ``context="all"`` (``_record_memory_history``'s default), both free events
    of the workspace ``_cuda_clearCublasWorkspaces`` frees name the function that called it,
    not the one that made the last allocation before it."""
    frees = _frees(tmp_path, "all")
    for action in ("free_requested", "free_completed"):
        names = frees[(action, WORKSPACE)]
        assert names[0] == "release_workspaces", names
        assert "allocate_last" not in names


def test_a_free_without_free_stacks_names_where_the_block_was_allocated(tmp_path: Path) -> None:
    """Recorded with ``context="alloc"``, a free event carries the stack its block was
    allocated under: the workspace's names cuBLAS's handle under the product's function, and
    the product's operand freed at that function's return names that function too, never the
    allocation served last."""
    frees = _frees(tmp_path, "alloc")
    workspace = frees[("free_requested", WORKSPACE)]
    assert workspace[:3] == [
        "at::cuda::getNewWorkspace()",
        "at::cuda::getCurrentCUDABlasHandle()",
        "take_workspace",
    ], workspace
    operand = frees[("free_requested", 64 * 64 * 4)]
    assert operand[0] == "take_workspace", operand
    assert "allocate_last" not in workspace + operand


EMPTIED = """
import torch

torch.cuda.memory._record_memory_history(context="CONTEXT")
side = torch.cuda.Stream()


def make_cached():
    return torch.empty(8 << 20, dtype=torch.uint8, device="cuda")


def make_used_on_side():
    block = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
    block.record_stream(side)
    return block


def allocate_next():
    return torch.empty(1 << 10, dtype=torch.uint8, device="cuda")


def clear():
    torch.cuda.empty_cache()


cached = make_cached()
del cached
kept = allocate_next()
clear()
used = make_used_on_side()
del used
kept_too = allocate_next()
used = make_used_on_side()
last = allocate_next()
del used
clear()
torch.cuda.memory._dump_snapshot("snapshot.pickle")
"""
LARGE_SEGMENT = 20 << 20
"""PyTorch's segment for a request between 1 and 10 MiB (``kLargeBuffer``)."""


def _events(folder: Path, context: str) -> list[tuple[str, int, list[str]]]:
    """Plan :data:`EMPTIED` recording with ``context``: each event's action, size and the
    names of the script's own functions on its stack, innermost first."""
    script(folder, EMPTIED.replace("CONTEXT", context))
    done = plan(folder, "--out-dir", "out", "train.py")
    assert done.returncode == 0, done.stderr
    with (folder / "snapshot.pickle").open("rb") as f:
        trace: list[dict[str, Any]] = pickle.load(f)["device_traces"][0]
    return [
        (
            e["action"],
            e["size"],
            [f["name"] for f in e["frames"] if f["filename"].endswith("train.py")],
        )
        for e in trace
    ]


@pytest.mark.parametrize(
    ("context", "cleared_by"),
    [("all", ["clear", "<module>"]), ("alloc", None)],
)
def test_what_empty_cache_frees_carries_the_frames_pytorch_records(
    tmp_path: Path, context: str, cleared_by: list[str] | None
) -> None:
    """``emptyCache`` gathers a context only with ``context="all"``: then its ``segment_free``
    and the ``free_completed`` of a block another stream used carry the stack at
    ``empty_cache``; else (``release_block``'s ``context ? context :
    block->context_when_segment_allocated``, ``free_block``'s ``... :
    block->context_when_allocated``) the stack the segment, or block, was allocated under;
    never that of the allocation served last."""
    events = _events(tmp_path, context)
    segment_frees = [names for action, size, names in events if action == "segment_free"]
    made_by = {"make_cached": ["make_cached", "<module>"]}
    made_by["make_used_on_side"] = ["make_used_on_side", "<module>"]
    assert segment_frees == [
        cleared_by or made_by["make_cached"],
        cleared_by or made_by["make_used_on_side"],
    ], events
    completed = [names for action, size, names in events if action == "free_completed"]
    # the first used block completes at the next allocation, the second at empty_cache
    assert completed[-1] == (cleared_by or made_by["make_used_on_side"]), events
    assert all(size == LARGE_SEGMENT for a, size, _ in events if a == "segment_free"), events


def test_a_free_completed_at_a_later_allocation_names_that_allocation(tmp_path: Path) -> None:
    """A block another stream used is freed at the next ``malloc``'s ``process_events``, which
    passes ``malloc``'s context (gathered at ``RecordContext::STATE``, so under any recorded
    context): its ``free_completed`` names the allocation that completed it, as PyTorch's
    trace does, while its ``free_requested`` names the block's own allocation (``alloc``)."""
    events = _events(tmp_path, "alloc")
    sizes = [(action, size) for action, size, _ in events]
    first = sizes.index(("free_requested", 4 << 20))
    requested, completed = events[first], events[sizes.index(("free_completed", 4 << 20))]
    assert requested[2] == ["make_used_on_side", "<module>"], events
    assert completed[2] == ["allocate_next", "<module>"], events
