"""Every snapshot shape users already have is read with the same figures and says what it lacks."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memforensics import SnapshotLoadError
from memforensics.analysis import list_dumps, load_dump, summarize
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.report import ReportBuilder
from memforensics.analysis.schema import to_json
from memforensics.capture.atomic import write_snapshot
from memforensics.testing import (
    TRAIN,
    MiB,
    as_pytorch_1_13,
    as_pytorch_2_0,
    as_segment_list,
    as_torch_npu,
    as_torch_npu_early,
    exhausted,
    fragmented,
    npu_truth,
    write_dump,
)
from shared_data import REAL_SNAPSHOTS, needs_shared_data, real_snapshots

_FIGURES = (
    "reserved_bytes",
    "allocated_bytes",
    "active_bytes",
    "free_in_reserved_bytes",
    "largest_free_block_bytes",
    "segments",
    "blocks",
)

Convert = Callable[[dict[str, Any]], Any]
# converter, truth adjustment, container, producer, keys it must report missing
SHAPES: dict[str, tuple[Convert, bool, str, str, set[str]]] = {
    "pytorch-1.13": (
        as_pytorch_1_13,
        False,
        "snapshot",
        "PyTorch 1.13 or older",
        {"requested_size", "time_us", "allocator_settings", "external_annotations"},
    ),
    "pytorch-2.0": (
        as_pytorch_2_0,
        False,
        "snapshot",
        "PyTorch 2.0",
        {"time_us", "allocator_settings", "external_annotations"},
    ),
    "memory_snapshot-list": (
        as_segment_list,
        False,
        "segment-list",
        "PyTorch 2.1 or newer",
        {"device_traces", "allocator_settings", "external_annotations"},
    ),
    "torch_npu": (
        as_torch_npu,
        True,
        "snapshot",
        "torch_npu",
        {"time_us", "allocator_settings", "external_annotations"},
    ),
    "torch_npu-early-list": (
        as_torch_npu_early,
        False,
        "segment-list",
        "torch_npu (early: no streams)",
        {"device_traces", "requested_size", "stream", "allocator_settings"},
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_shape_gives_the_truth_figures(tmp_path: Path, shape: str) -> None:
    """Reserved, allocated, free and counts match the builder's truth in every historical shape."""
    convert, is_npu, container, producer, missing = SHAPES[shape]
    synthetic = fragmented()
    truth = npu_truth(synthetic.truth) if is_npu else synthetic.truth
    path = write_dump(tmp_path / "snap.pickle", convert(synthetic.snapshot))
    dump = load_dump(path)
    data = to_json(summarize(dump))
    for key in _FIGURES:
        assert data[key] == getattr(truth, key), key
    assert dump.shape.container == container
    assert dump.shape.producer == producer
    assert missing <= set(dump.shape.missing)


@pytest.mark.parametrize("shape", ["pytorch-1.13", "pytorch-2.0", "torch_npu"])
def test_shapes_with_a_trace_keep_the_oom_and_its_verdict(shape: str) -> None:
    """Without a sidecar, the OOM request comes from the old trace's oom entry (device_free
    instead of addr), and the verdict is the truth's."""
    convert = SHAPES[shape][0]
    synthetic = fragmented()
    summary = summarize(dump_from_snapshot(convert(synthetic.snapshot)))
    assert summary.oom is not None
    assert summary.oom.requested_bytes == MiB(32)
    assert summary.oom.device_free_bytes == 0
    assert summary.verdict.name == "fragmentation"


@pytest.mark.parametrize("shape", ["pytorch-1.13", "pytorch-2.0"])
def test_history_stacks_give_the_sites(shape: str) -> None:
    """Stacks kept under a block's ``history`` (1.13/2.0) give the same sites as ``frames``."""
    synthetic = exhausted()
    summary = summarize(dump_from_snapshot(SHAPES[shape][0](synthetic.snapshot)))
    assert {site.site: site.bytes for site in summary.top_sites} == synthetic.truth.site_bytes


def test_pytorch_1_13_requested_size_comes_from_history() -> None:
    """1.13 writes no requested_size: a live block's request is its history's real_size."""
    snapshot = fragmented().snapshot
    old = as_pytorch_1_13(snapshot)
    old["segments"][0]["blocks"][0]["history"][0]["real_size"] = MiB(8) - 512
    dump = dump_from_snapshot(old)
    assert dump.segments[0].blocks[0].requested_size == MiB(8) - 512
    assert dump.segments[0].blocks[0].size == MiB(8)


def test_segment_list_says_what_it_cannot_tell() -> None:
    """A memory_snapshot() list has no trace: no OOM, no history, and a limit says why."""
    summary = summarize(dump_from_snapshot(as_segment_list(fragmented().snapshot)))
    assert summary.oom is None
    assert summary.trace_entries == 0
    assert summary.live_by_step == ()
    assert any("no allocator history" in limit for limit in summary.limits)
    assert to_json(summary)["snapshot_shape"]["container"] == "segment-list"


def test_early_npu_list_has_no_sites_and_says_so() -> None:
    """Blocks with only size and state: every site is <before recording>, and the limits say it."""
    summary = summarize(dump_from_snapshot(as_torch_npu_early(fragmented().snapshot)))
    assert [site.site for site in summary.top_sites] == ["<before recording>"]
    assert any("every site is <before recording>" in limit for limit in summary.limits)
    assert any("requested sizes are not recorded" in limit for limit in summary.limits)


def test_old_traces_are_plotted_by_event_number() -> None:
    """No time_us (1.13): the report's timeline rows carry no time, so the page plots them by
    event number, and the limits say why."""
    dump = dump_from_snapshot(as_pytorch_1_13(fragmented().snapshot))
    builder = ReportBuilder()
    builder.add(dump)
    sections = builder.document()["dumps"][0]["devices"][0]["sections"]
    timeline = next(section["data"] for section in sections if section["id"] == "timeline")
    rows = [row for level in timeline["levels"] for row in level]
    assert rows
    assert timeline["columns"][1] == "time_us"
    assert all(row[1] is None for row in rows)
    assert timeline["events"] == len(dump.trace)
    assert any("no time_us" in limit for limit in dump.limits)


def test_npu_workspace_segment_is_named() -> None:
    """torch_npu's workspace segment (marked by workspace_snapshot entries) is named, sized."""
    dump = dump_from_snapshot(as_torch_npu(fragmented().snapshot, workspace=MiB(6)))
    notes = [limit for limit in dump.limits if "workspace" in limit]
    assert len(notes) == 1
    assert notes[0].startswith("6.00 MiB in 1 segment(s)")
    bare = dump_from_snapshot(as_torch_npu(fragmented().snapshot, workspace=None))
    assert not any("workspace" in limit for limit in bare.limits)


def test_npu_workspace_is_not_a_free_hole() -> None:
    """A 64 MiB workspace segment is reserved, yet no hole for a 32 MiB tensor: still
    fragmentation, with the workspace out of the free bytes."""
    synthetic = fragmented()
    dump = dump_from_snapshot(as_torch_npu(synthetic.snapshot, workspace=MiB(64)))
    summary = summarize(dump)
    assert summary.reserved_bytes == synthetic.truth.reserved_bytes + MiB(64)
    assert summary.free_in_reserved_bytes == synthetic.truth.free_in_reserved_bytes
    assert summary.largest_free_block_bytes == MiB(8)
    assert summary.verdict.name == "fragmentation"


def test_npu_sidecar_names_the_producer() -> None:
    """A sidecar that says device "npu" marks the file as torch_npu's even without a workspace."""
    synthetic = exhausted()
    sidecar = dict(synthetic.sidecar or {}, device="npu")
    dump = dump_from_snapshot(as_torch_npu(synthetic.snapshot, workspace=None), sidecar=sidecar)
    assert dump.shape.producer == "torch_npu"


def test_current_shape_reports_nothing_missing() -> None:
    """The builder's current shape lacks only external_annotations, and has no limits."""
    dump = dump_from_snapshot(fragmented().snapshot)
    assert dump.shape.producer == "PyTorch 2.1 or newer"
    assert dump.shape.missing == ("external_annotations",)
    assert dump.limits == ()


@pytest.mark.parametrize("name", ["x.pkl", "x.pkl.gz", "x.pickle", "x.pickle.gz"])
def test_pkl_names_load_with_their_sidecar(tmp_path: Path, name: str) -> None:
    """``.pkl`` files (and gzip of them) load with their ``x.json`` sidecar like ``.pickle``."""
    synthetic = fragmented()
    path = write_dump(
        tmp_path / name, synthetic.snapshot, sidecar=synthetic.sidecar, gz=name.endswith(".gz")
    )
    dump = load_dump(path)
    assert dump.meta.has_sidecar
    assert dump.meta.kind == "oom"
    assert summarize(dump).verdict.name == "fragmentation"
    assert [entry.path.name for entry in list_dumps(tmp_path).dumps] == [name]


def test_protocol_5_pickle_reads_like_protocol_4(tmp_path: Path) -> None:
    """A protocol-5 pickle (Python 3.14's default) gives the same summary as protocol 4."""
    synthetic = fragmented()
    four = write_dump(tmp_path / "a" / "x.pickle", synthetic.snapshot, sidecar=synthetic.sidecar)
    five = write_dump(
        tmp_path / "b" / "x.pickle", synthetic.snapshot, sidecar=synthetic.sidecar, protocol=5
    )
    assert five.read_bytes()[:2] == b"\x80\x05"
    left, right = to_json(summarize(load_dump(four))), to_json(summarize(load_dump(five)))
    assert left | {"file": ""} == right | {"file": ""}


def test_memforensics_writes_protocol_4_only(tmp_path: Path) -> None:
    """What memforensics writes is protocol 4 (PyTorch's memory_viz reads it), never 5."""
    path = tmp_path / "w.pickle"
    write_snapshot(path, fragmented().snapshot)
    assert path.read_bytes()[:2] == b"\x80\x04"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_report_renders_every_shape(shape: str) -> None:
    """The HTML report renders each shape without failing and carries its verdict."""
    convert = SHAPES[shape][0]
    builder = ReportBuilder()
    builder.add(dump_from_snapshot(convert(fragmented().snapshot)))
    html = builder.html()
    assert "<!DOCTYPE html>" in html
    assert "no-oom" in html or "fragmentation" in html


@needs_shared_data
@pytest.mark.parametrize(
    ("name", "producer", "limit"),
    [
        ("cuda-cnn-stacks-all.pickle", "PyTorch 2.1 or newer", "allocator settings"),
        ("cuda-transformer-forward.pickle", "PyTorch 2.1 or newer", None),
        ("cuda-llm-at-oom-no-history.pickle", "PyTorch 2.0", "stacks recorded, no trace"),
    ],
)
def test_real_snapshots_name_their_shape(name: str, producer: str, limit: str | None) -> None:
    """Real snapshots are placed in the right release, and their limits are the true ones."""
    dump = load_dump(REAL_SNAPSHOTS / name)
    assert dump.shape.producer == producer
    assert dump.devices[0].reserved_bytes == sum(
        s["total_size"] for s in pickle.loads((REAL_SNAPSHOTS / name).read_bytes())["segments"]
    )
    if limit is None:
        assert dump.limits == ()
    else:
        assert any(limit in text for text in dump.limits)


def test_a_list_of_non_segments_is_still_refused(tmp_path: Path) -> None:
    """A list is read as segments only when its items are segment dicts; else one clear line."""
    path = write_dump(tmp_path / "odd.pkl", [{"blocks": "no"}])
    with pytest.raises(SnapshotLoadError, match=r"segments\[0\]\.blocks is not a list"):
        load_dump(path)


def test_sites_survive_in_the_segment_list() -> None:
    """memory_snapshot() keeps block frames when history is on: the sites are the truth's."""
    synthetic = exhausted()
    summary = summarize(dump_from_snapshot(as_segment_list(synthetic.snapshot)))
    assert {s.site: s.bytes for s in summary.top_sites} == synthetic.truth.site_bytes
    assert summary.top_sites[0].site == str(TRAIN)


@pytest.mark.parametrize(
    ("size", "named"), [(-4096, "negative"), (1 << 70, "a number past 64 bits")]
)
def test_a_size_no_allocator_reports_is_named_for_what_it_is(size: int, named: str) -> None:
    """A negative block size is refused as "negative", a 70-bit one as past 64 bits."""
    snapshot = exhausted().snapshot
    snapshot["segments"][0]["blocks"][0]["size"] = size
    with pytest.raises(SnapshotLoadError, match=rf"blocks\[0\]\.size is {named}\)"):
        dump_from_snapshot(snapshot)


_NO_STACK = "no block carries a stack"


def _without_block_frames(snapshot: dict[str, Any]) -> dict[str, Any]:
    """``snapshot`` with every live block's stack emptied (the trace keeps its own)."""
    segments = [
        {**segment, "blocks": [{**block, "frames": []} for block in segment["blocks"]]}
        for segment in snapshot["segments"]
    ]
    return {**snapshot, "segments": segments}


def test_stacks_in_the_trace_are_stacks() -> None:
    """A trace whose allocations carry frames is never said to have no stacks, even when the
    live blocks carry none; with no frame anywhere, it is."""
    snapshot = _without_block_frames(exhausted().snapshot)
    assert any(entry.get("frames") for trace in snapshot["device_traces"] for entry in trace)
    assert not any(_NO_STACK in limit for limit in dump_from_snapshot(snapshot).limits)
    bare = {
        **snapshot,
        "device_traces": [
            [{**entry, "frames": []} for entry in trace] for trace in snapshot["device_traces"]
        ],
    }
    assert any(_NO_STACK in limit for limit in dump_from_snapshot(bare).limits)


@needs_shared_data
def test_real_snapshots_say_no_stack_only_where_no_frame_is_recorded() -> None:
    """On each real snapshot, "no block carries a stack" is said exactly where neither a live
    block nor a trace event of the raw pickle holds a frame."""
    for path in real_snapshots():
        raw = pickle.loads(path.read_bytes())
        blocks = [b for s in raw["segments"] for b in s.get("blocks", [])]
        framed = any(b.get("frames") for b in blocks) or any(
            (b.get("history") or [{}])[-1].get("frames") for b in blocks
        )
        framed = framed or any(e.get("frames") for t in raw.get("device_traces", []) for e in t)
        said = any(_NO_STACK in limit for limit in load_dump(path).limits)
        assert said == (not framed), path.name
