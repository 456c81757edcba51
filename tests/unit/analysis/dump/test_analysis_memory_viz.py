"""PyTorch's own ``_memory_viz`` reads the same shapes and agrees with memforensics' figures."""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable
from typing import Any

import pytest

from memforensics.analysis import summarize
from memforensics.analysis.dump import ALLOCATED, dump_from_snapshot
from memforensics.testing import (
    as_pytorch_1_13,
    as_pytorch_2_0,
    as_segment_list,
    as_torch_npu,
    exhausted,
    fragmented,
)
from shared_data import REAL_SNAPSHOTS, needs_shared_data

viz = pytest.importorskip("torch.cuda._memory_viz")  # collected, then deselected, without torch

pytestmark = pytest.mark.torch

REAL_NAMES = [
    "cuda-cnn-stacks-all.pickle",
    "cuda-transformer-forward.pickle",
    "cuda-llm-at-oom-no-history.pickle",
]


def _current(snapshot: dict[str, Any]) -> dict[str, Any]:
    return snapshot


CONVERTERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "current": _current,
    "pytorch-1.13": as_pytorch_1_13,
    "pytorch-2.0": as_pytorch_2_0,
    "memory_snapshot-list": as_segment_list,
    "torch_npu": as_torch_npu,
}


def _segsum_totals(snapshot: object) -> dict[str, str]:
    """``total_reserved`` and ``total_allocated`` (requested bytes) as PyTorch's segsum prints."""
    data = {"segments": snapshot} if isinstance(snapshot, list) else snapshot
    text = viz.segsum(data)
    return dict(re.findall(r"^(total_reserved|total_allocated): (\S+)$", text, re.MULTILINE))


def _ours(snapshot: object) -> dict[str, str]:
    dump = dump_from_snapshot(snapshot)
    requested = sum(
        block.requested_size
        for segment in dump.segments
        for block in segment.blocks
        if block.state == ALLOCATED
    )
    return {
        "total_reserved": repr(viz.Bytes(summarize(dump).reserved_bytes)),
        "total_allocated": repr(viz.Bytes(requested)),
    }


@pytest.mark.parametrize("shape", sorted(CONVERTERS))
@pytest.mark.parametrize("scenario", [fragmented, exhausted])
def test_segsum_agrees_on_every_built_shape(shape: str, scenario: Callable[[], Any]) -> None:
    """segsum reads each built shape (so it is PyTorch's real structure) and prints our totals."""
    snapshot = CONVERTERS[shape](scenario().snapshot)
    assert _segsum_totals(snapshot) == _ours(snapshot)


@pytest.mark.parametrize("shape", ["current", "pytorch-1.13", "pytorch-2.0", "torch_npu"])
def test_memory_viz_trace_reads_every_built_trace(shape: str) -> None:
    """PyTorch's ``trace`` formatter walks each built trace, OOM entry included."""
    text = viz.trace(CONVERTERS[shape](fragmented().snapshot))
    assert "raise OutOfMemoryError" in text


@needs_shared_data
@pytest.mark.parametrize("name", REAL_NAMES)
def test_segsum_agrees_on_real_snapshots(name: str) -> None:
    """On real GPU snapshots, reserved and requested totals match PyTorch's segsum."""
    snapshot = pickle.loads((REAL_SNAPSHOTS / name).read_bytes())
    assert _segsum_totals(snapshot) == _ours(snapshot)
