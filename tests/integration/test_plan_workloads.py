"""``memforensics plan`` on three real scripts whose real GPU snapshots are public: the predicted
snapshot each script writes matches the one it wrote on the GPU.

Each script runs unchanged from a temporary folder (the shared data is read-only), once per
module; the course code it imports comes from the shared folder through PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memforensics._layout import PREDICTED_KEY
from memforensics.allocator import parse_conf, round_size
from memforensics.analysis import summarize
from memforensics.analysis.dump import dump_from_snapshot
from shared_data import PRESENT, REAL_WORKLOADS, REASON

pytestmark = [pytest.mark.integration, pytest.mark.torch]

WORKLOADS = REAL_WORKLOADS
SCRIPTS = {
    "attention-forward-backward": ("trace_peak_memory.py", (), "mem_snapshot.pickle"),
    "small-lm-inference": ("benchmark.py", ("--mode", "forward"), "memory_snapshot.pickle"),
    "small-lm-forward-backward": ("benchmarking_script.py", (), "memory_snapshot.pickle"),
}
SRC = Path(__file__).resolve().parents[2] / "src"


@dataclass(frozen=True)
class Figures:
    """What a snapshot says: peak allocated block bytes over its trace, reserved and segments
    at the snapshot."""

    peak_allocated: int
    reserved: int
    segments: int


def figures(snapshot: dict[str, Any]) -> Figures:
    """The peak of allocated block bytes over the trace (blocks live before it counted), as
    ``max_memory_allocated`` reports it; a block still live counts at its snapshot size."""
    settings = parse_conf(None)
    segments = snapshot["segments"]
    live = {
        b["address"]: b["size"]
        for s in segments
        for b in s["blocks"]
        if b["state"] == "active_allocated"
    }
    trace = snapshot["device_traces"][0]
    last = {e["addr"]: i for i, e in enumerate(trace) if e["action"] == "alloc"}
    held: dict[int, int] = {}
    deltas = []
    for i, event in enumerate(trace):
        if event["action"] == "alloc":
            known = live.get(event["addr"]) if last[event["addr"]] == i else None
            held[event["addr"]] = known or round_size(settings, event["size"])
            deltas.append(held[event["addr"]])
        elif event["action"] == "free_requested":
            deltas.append(-held.pop(event["addr"], round_size(settings, event["size"])))
    current = peak = sum(live.values()) - sum(deltas)
    for delta in deltas:
        current += delta
        peak = max(peak, current)
    reserved = sum(s["total_size"] for s in segments)
    return Figures(peak, reserved, len(segments))


@dataclass(frozen=True)
class Planned:
    """One workload planned: the process, the predicted snapshot and its sidecar."""

    process: subprocess.CompletedProcess[str]
    snapshot: dict[str, Any]
    sidecar: dict[str, Any]
    truth: dict[str, Any]
    real: dict[str, Any]


def _plan(name: str, folder: Path) -> Planned:
    script, args, written = SCRIPTS[name]
    root = WORKLOADS / name
    code = root / "code"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFORENSICS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(code / "cs336-basics"), str(code)])
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    command = [
        sys.executable,
        "-m",
        "memforensics",
        "plan",
        "--device-capability",
        "8.0",
        str(code / "cs336_systems" / script),
        *args,
    ]
    process = subprocess.run(
        command, cwd=folder, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert process.returncode == 0, process.stderr[-3000:]
    snapshot = pickle.loads((folder / written).read_bytes())
    side = folder / written.replace(".pickle", ".json")
    sidecar = json.loads(side.read_text()) if side.exists() else {}
    truth = json.loads((root / "truth.json").read_text())
    real = pickle.loads((root / "snapshot.pickle").read_bytes())
    return Planned(process, snapshot, sidecar, truth, real)


@pytest.fixture(scope="module", params=sorted(SCRIPTS))
def planned(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Planned:
    """Each workload planned once for the module, from its own temporary folder."""
    if not PRESENT:
        pytest.skip(REASON)
    pytest.importorskip("einops")
    name: str = request.param
    return _plan(name, tmp_path_factory.mktemp(name))


def test_the_truth_is_what_the_real_snapshot_says(planned: Planned) -> None:
    """The figures this test compares are the ones truth.json records for the real snapshot."""
    real = figures(planned.real)
    truth = planned.truth["figures"]
    assert real.peak_allocated == truth["peak_allocated_bytes"]
    assert real.reserved == truth["reserved_bytes_at_snapshot"]
    assert real.segments == truth["segments_at_snapshot"]


def test_predicted_peak_allocated_is_within_one_percent(planned: Planned) -> None:
    """The predicted peak of allocated bytes is within 1 % of the real GPU's."""
    real = planned.truth["figures"]["peak_allocated_bytes"]
    assert abs(figures(planned.snapshot).peak_allocated - real) <= 0.01 * real


def test_predicted_reserved_is_within_five_percent(planned: Planned) -> None:
    """The predicted reserved bytes at the script's snapshot are within 5 % of the real ones."""
    real = planned.truth["figures"]["reserved_bytes_at_snapshot"]
    assert abs(figures(planned.snapshot).reserved - real) <= 0.05 * real


def test_predicted_segments_are_within_fifteen_percent(planned: Planned) -> None:
    """The predicted segment count at the script's snapshot is within 15 % of the real one."""
    real = planned.truth["figures"]["segments_at_snapshot"]
    assert abs(figures(planned.snapshot).segments - real) <= 0.15 * real


def test_the_plan_says_it_fits_and_marks_what_it_wrote(planned: Planned) -> None:
    """Each run fits 80 GiB; what the script wrote says it is predicted, on a capability 8.0
    device: the snapshot itself (the attention script pickles ``_snapshot()`` by hand, with no
    sidecar), the sidecar where ``_dump_snapshot`` wrote one, and so the summary of it."""
    assert "Fits:" in planned.process.stdout
    marks = [planned.snapshot[PREDICTED_KEY]]
    if planned.sidecar:
        marks.append(planned.sidecar["predicted"])
    for mark in marks:
        assert mark["capability"] == "8.0"
        assert mark["device_total_bytes"] == 80 << 30
    dump = dump_from_snapshot(planned.snapshot, sidecar=planned.sidecar or None)
    assert summarize(dump).predicted is True
