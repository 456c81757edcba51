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
