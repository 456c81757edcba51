"""The observer's figures keep one name from the callback to the journal, sidecar and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import memforensics
from memforensics.analysis.dump.meta import OomRecord
from memforensics.analysis.folder.journals import list_journals, read_process
from memforensics.analysis.summary.summary import merge_oom
from memforensics.backends.sim import SimOutOfMemoryError, reset_device
from memforensics.cli import main

MiB = 1 << 20
NAMES = ("allocation_bytes", "device_total_bytes", "device_free_bytes")


def test_a_sim_oom_carries_the_observer_figures_under_one_name_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The observer's allocation, limit and free bytes reappear, equal and under the same keys,
    in the sidecar's ``oom``, the journal's ``oom`` line and ``summary --json``'s ``oom``."""
    device = reset_device(total_bytes=32 * MiB)
    device.set_per_process_memory_fraction(0.75)  # the limit (24 MiB) is not the total
    seen: list[tuple[int, int, int, int]] = []
    device.attach_out_of_memory_observer(lambda *args: seen.append(args))
    mf = memforensics.install(
        device="sim", out_dir=str(tmp_path), journal_every=1, oom_history="all"
    )
    kept = [device.empty(10 * MiB)]
    with pytest.raises(SimOutOfMemoryError), mf.step(0):
        kept.append(device.empty(15 * MiB + 1))
    mf.close()
    [(_device, allocation, total, free)] = seen
    observed = dict(zip(NAMES, (allocation, total, free), strict=True))
    assert observed["device_total_bytes"] == 24 * MiB

    [dump] = mf.dumps
    sidecar = json.loads(dump.with_suffix(".json").read_text())["oom"]
    [line] = [
        json.loads(text)
        for path in (tmp_path / "journal").iterdir()
        for text in path.read_text().splitlines()
        if json.loads(text)["event"] == "oom"
    ]
    assert main(["summary", str(dump), "--json"]) == 0
    state = json.loads(capsys.readouterr().out)["oom"]

    for figures in (sidecar, line, state):
        assert {name: figures[name] for name in NAMES} == observed
    assert sidecar["requested_bytes"] == state["requested_bytes"] == 15 * MiB + 512


def test_a_journal_written_by_0_1_still_gives_its_device_total(tmp_path: Path) -> None:
    """A 0.1 journal line names the total ``device_limit_bytes``; the reader still finds it."""
    folder = tmp_path / "journal"
    folder.mkdir()
    line = {"time": 1.0, "step": 0, "rank": 0, "event": "step", "allocated_bytes": MiB}
    line |= {"reserved_bytes": 2 * MiB, "active_bytes": MiB, "peak_reserved_bytes": 2 * MiB}
    line |= {"alloc_retries": 0, "ooms": 0, "device_free_bytes": 6 * MiB, "external_bytes": 0}
    line["device_limit_bytes"] = 8 * MiB
    (folder / "rank0_pid1.jsonl").write_text(json.dumps(line) + "\n")
    [journal] = read_process(list_journals(str(folder)))
    assert list(journal.columns["device_total_bytes"]) == [8 * MiB]
    assert journal.bad_lines == 0


def test_the_sidecar_allocation_survives_merging_with_the_trace_oom() -> None:
    """Filling the sidecar's gaps from the trace keeps the sidecar's ``allocation_bytes``."""
    sidecar = OomRecord(None, None, 24 * MiB, "sidecar", allocation_bytes=16 * MiB)
    trace = OomRecord(15 * MiB + 512, 3 * MiB, None, "trace")
    merged = merge_oom(sidecar, trace, "oom")
    assert merged == OomRecord(15 * MiB + 512, 3 * MiB, 24 * MiB, "sidecar", 16 * MiB)
