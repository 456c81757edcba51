"""What ``summary`` says a dump records of the allocator's history is true: one event is not a
history, stacks without a trace are not 'not recorded', an empty snapshot allocated nothing,
and the device line and the time limit say plain things."""

from __future__ import annotations

from typing import Any

from memforensics.analysis import summarize
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.schema import to_json
from memforensics.analysis.summary import summary_text
from memforensics.testing import (
    TRAIN,
    Block,
    MiB,
    SnapshotBuilder,
    as_pytorch_2_0,
    several_devices,
)


def _built() -> dict[str, Any]:
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(8), site=TRAIN), Block(MiB(4), site=TRAIN))
    return builder.build()


def _history_line(text: str) -> str:
    [line] = [line for line in text.splitlines() if line.startswith("  history")]
    return line


def test_a_one_event_trace_rules_out_nothing_and_shows_no_peak() -> None:
    """The legacy _record_memory_history(True) keeps one entry: no NO-OOM verdict, no peak
    read from that entry, and the history line says the trace is too short."""
    snapshot = _built()
    snapshot["device_traces"] = [snapshot["device_traces"][0][-1:]]  # the last alloc alone
    summary = summarize(dump_from_snapshot(snapshot))
    assert summary.verdict.name == "unknown"
    assert summary.verdict.reason == "one-event trace"
    text = summary_text(summary, verbose=True)
    assert "NO-OOM" not in text
    assert "The trace holds one event: too short to rule out an OOM" in text
    assert "1 event: too short to rule out an OOM" in _history_line(text)
    assert "at trace entry 0" not in text
    assert "peak:" not in text
    assert to_json(summary)["peak"]["name"] == "snapshot"


def test_blocks_with_stacks_and_no_trace_say_stacks_recorded() -> None:
    """History recorded as state only (enabled="state"): live blocks carry stacks, the trace
    is empty; that is 'stacks recorded, no trace', never 'history was not recorded'."""
    snapshot = _built()
    snapshot["device_traces"] = [[]]
    summary = summarize(dump_from_snapshot(snapshot))
    text = summary_text(summary, verbose=True)
    assert "history was not recorded" not in text
    assert "stacks recorded, no trace" in _history_line(text)
    assert any(limit.startswith("stacks recorded, no trace") for limit in summary.limits)
    assert to_json(summary)["snapshot_shape"]["history"] == "stacks, no trace"


def test_a_torch_2_0_block_history_counts_as_stacks_recorded() -> None:
    """PyTorch 2.0 keeps each block's stack under ``history``: stacks recorded, no trace."""
    snapshot = as_pytorch_2_0(_built())
    snapshot["device_traces"] = [[]]
    text = summary_text(summarize(dump_from_snapshot(snapshot)), verbose=True)
    assert "history was not recorded" not in text
    assert "stacks recorded, no trace" in _history_line(text)


def test_a_trace_without_time_from_a_newer_shape_names_no_old_release() -> None:
    """A 2.1-shaped dump whose entries lack time_us is not called 'PyTorch before 2.1'."""
    snapshot = _built()
    for entry in snapshot["device_traces"][0]:
        del entry["time_us"]
    text = summary_text(summarize(dump_from_snapshot(snapshot)), verbose=True)
    assert "trace entries carry no time_us: memory over time" in text
    assert "before 2.1" not in text


def test_the_device_line_reads_without_nested_brackets() -> None:
    """Three devices, the OOM on device 1: one plain clause says why that device."""
    built = several_devices(oom_device=1, sidecar_device=None)
    text = summary_text(summarize(dump_from_snapshot(built.snapshot)), verbose=True)
    [line] = [line for line in text.splitlines() if line.startswith("  device ")]
    assert line.startswith("  device       1 of 3, the OOM's device: its trace records the OOM;")
    assert "((" not in line
    assert "))" not in line
