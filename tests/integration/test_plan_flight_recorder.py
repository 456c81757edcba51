"""The snapshot ``memforensics plan`` writes when the script dumps none keeps the last
``--max-entries`` allocator events, as ``_record_memory_history(max_entries=N)`` keeps them;
the figures it prints come from the allocator's own statistics, so a run that makes more events
than that is planned to the byte all the same, and the user is told the trace was cut."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

BOUND = 1_000
ALLOCATIONS = """
import torch

kept = []
for i in range(BOUND):
    block = torch.empty(512 + (i % 7) * 512, device="cuda")
    if i % 10 == 0:
        kept.append(block)
"""
"""Three times the bound in allocations, each made and most freed: about eight events each."""
FIGURES = (
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "peak_segments",
    "segments",
    "fits",
    "needed_bytes",
)


def _planned(folder: Path, max_entries: int) -> tuple[dict[str, Any], list[Any], str]:
    """Plan the script keeping ``max_entries`` events: its JSON answer, the final snapshot's
    trace as ``(action, address, size)`` triples, and what it said on stderr."""
    folder.mkdir()
    script(folder, ALLOCATIONS.replace("BOUND", str(3 * BOUND)))
    options = ("--device-capability", "9.0", "--json", "--max-entries", str(max_entries))
    done = plan(folder, *options, "train.py")
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    with (folder / "memforensics-plan" / "planned.pickle").open("rb") as f:
        trace = pickle.load(f)["device_traces"][0]
    return answer, [(e["action"], e["addr"], e["size"]) for e in trace], done.stderr


def test_a_run_past_the_bound_keeps_its_figures_and_the_last_events(tmp_path: Path) -> None:
    """A script making three times ``--max-entries`` in allocations is planned with the same
    peak, reserved, segments and fit as with room for every event; its snapshot's trace is
    the last ``--max-entries`` events of the whole one, and stderr says it was cut."""
    cut, cut_trace, cut_said = _planned(tmp_path / "cut", BOUND)
    whole, whole_trace, whole_said = _planned(tmp_path / "whole", 100 * BOUND)
    assert {k: cut[k] for k in FIGURES} == {k: whole[k] for k in FIGURES}
    assert len(whole_trace) > 3 * BOUND
    assert cut_trace == whole_trace[-BOUND:]
    assert f"keeps the last {BOUND:,} of the run's {len(whole_trace):,}" in cut_said
    assert "keeps the last" not in whole_said
