"""Sites and callers: blocks without a stack are named, and the user's own line shows beside a
library site."""

from __future__ import annotations

import pickle

import pytest

from memforensics.analysis import diff_dumps, load_dump, summarize
from memforensics.analysis.compare.diff import diff_side
from memforensics.analysis.compare.text import diff_text
from memforensics.analysis.dump import (
    BEFORE_RECORDING,
    NATIVE_ONLY,
    UNKNOWN_SITE,
    dump_from_snapshot,
    site_of,
)
from memforensics.analysis.dump.frames import caller_of, is_installed_file
from memforensics.analysis.filled import BEFORE, kind_sites, live_at, what_filled
from memforensics.analysis.filled.peak import call_tree
from memforensics.analysis.schema import to_json
from memforensics.analysis.summary import summary_text
from memforensics.testing import TRAIN, Block, MiB, Site, SnapshotBuilder
from shared_data import REAL_SNAPSHOTS, REAL_WORKLOADS, needs_shared_data

# A Hugging Face model line, reached from the user's script (Site.frames() puts
# /job/train.py:1 <module> outside it, and a torch frame inside it).
LIBRARY = Site(
    "/venv/lib/python3.12/site-packages/transformers/models/llama/modeling_llama.py", 300, "forward"
)

ENTRY = "/job/train.py:1 <module>"


def _unrecorded_pair() -> SnapshotBuilder:
    builder = SnapshotBuilder()
    builder.segment(
        Block(MiB(6), site=None, recorded=False),
        Block(MiB(2), site=TRAIN),
        Block(MiB(4), site=None, recorded=False),
    )
    builder.segment(Block(MiB(8), state="inactive", site=None))
    return builder


def _backward_and_unrecorded() -> SnapshotBuilder:
    """A block live before recording and two the trace shows allocated without frames (the
    backward thread under ``stacks="python"``), beside one with a Python stack."""
    builder = SnapshotBuilder()
    builder.segment(
        Block(MiB(6), site=None, recorded=False),
        Block(MiB(2), site=TRAIN),
        Block(MiB(4), site=None),
        Block(MiB(12), site=None),
    )
    return builder


def test_blocks_without_frames_are_before_recording() -> None:
    """Live blocks with no stack are one '<before recording>' row, with their count and bytes."""
    builder = _unrecorded_pair()
    summary = summarize(dump_from_snapshot(builder.build()))
    rows = {site.site: (site.bytes, site.blocks) for site in summary.top_sites}
    assert rows[BEFORE_RECORDING] == (builder.truth().site_bytes[BEFORE_RECORDING], 2)
    assert (summary.before_recording_bytes, summary.before_recording_blocks) == (MiB(10), 2)
    data = to_json(summary)
    assert (data["before_recording_bytes"], data["before_recording_blocks"]) == (MiB(10), 2)
    assert UNKNOWN_SITE not in rows


def test_text_explains_before_recording_and_how_to_capture() -> None:
    """The verbose summary text says what the row is and to start recording earlier."""
    text = summary_text(summarize(dump_from_snapshot(_unrecorded_pair().build())), verbose=True)
    assert "<before recording>: 2 live blocks (10.00 MiB) have no stack" in text
    assert "start recording earlier" in " ".join(text.split())
    assert "memforensics.install()" in text


def test_no_note_when_every_block_has_a_stack() -> None:
    """A dump whose live blocks all have stacks prints no before-recording note."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(2), site=TRAIN))
    summary = summarize(dump_from_snapshot(builder.build()))
    assert summary.before_recording_blocks == 0
    assert BEFORE_RECORDING not in summary_text(summary)


def test_no_python_frames_means_frames_without_a_python_frame() -> None:
    """'<no Python frames>' names stacks that hold no Python frame, and an empty stack the
    history recorded; an empty stack nothing recorded is '<before recording>'."""
    cpp_only = [
        {"filename": "??", "line": 0, "name": "torch::autograd::Engine::thread_main"},
        {"filename": "CUDACachingAllocator.cpp", "line": 0, "name": "malloc"},
    ]
    assert site_of(cpp_only) == site_of(cpp_only, recorded=True) == NATIVE_ONLY
    assert site_of([]) == site_of(None) == BEFORE_RECORDING
    assert site_of([], recorded=True) == caller_of([], recorded=True) == NATIVE_ONLY


def test_frameless_blocks_the_trace_recorded_are_not_before_recording() -> None:
    """Frameless blocks the trace shows allocated are '<no Python frames>' in summary's sites,
    its peak sites and its cause; only the block live before recording is '<before recording>'."""
    builder = _backward_and_unrecorded()
    truth = builder.truth()
    summary = summarize(dump_from_snapshot(builder.build()), top=None)
    rows = {site.site: (site.bytes, site.blocks) for site in summary.top_sites}
    assert rows[NATIVE_ONLY] == (truth.site_bytes[NATIVE_ONLY], 2) == (MiB(16), 2)
    assert rows[BEFORE_RECORDING] == (truth.site_bytes[BEFORE_RECORDING], 1) == (MiB(6), 1)
    assert (summary.before_recording_bytes, summary.before_recording_blocks) == (MiB(6), 1)
    peak = {site.site: site.bytes for site in summary.peak_sites}
    assert (peak[NATIVE_ONLY], peak[BEFORE_RECORDING]) == (MiB(16), MiB(6))
    text = " ".join(summary_text(summary, verbose=True).split())
    assert f"({NATIVE_ONLY})" in text.split("verdict")[0]  # the cause names the recorded ones
    assert "<before recording>: 1 live blocks (6.00 MiB) have no stack" in text


def test_frameless_blocks_of_a_trace_without_stacks_stay_before_recording() -> None:
    """In a trace recorded without stacks no entry has frames: an empty stack says nothing, so
    every block reads '<before recording>' as before."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(4), site=None), Block(MiB(2), site=None, recorded=False))
    summary = summarize(dump_from_snapshot(builder.build()))
    assert [(s.site, s.bytes) for s in summary.top_sites] == [(BEFORE_RECORDING, MiB(6))]
    assert builder.truth().site_bytes == {BEFORE_RECORDING: MiB(6)}


def test_diff_and_call_tree_name_recorded_frameless_blocks_alike() -> None:
    """diff's rows and the peak's call tree say '<no Python frames>' for the same blocks."""
    dump = dump_from_snapshot(_backward_and_unrecorded().build())
    side = diff_side(dump)
    rows = {row.size: row.site for row in side.live}
    assert (rows[MiB(4)], rows[MiB(12)], rows[MiB(6)]) == (
        NATIVE_ONLY,
        NATIVE_ONLY,
        BEFORE_RECORDING,
    )
    assert side.peak is not None
    assert {row.site: row.bytes for row in side.peak.sites}[NATIVE_ONLY] == MiB(16)
    summary = summarize(dump)
    assert summary.peak is not None
    names = {child.name: child.bytes for child in summary.peak.tree.children}
    assert (names[NATIVE_ONLY], names[BEFORE_RECORDING]) == (MiB(16), MiB(6))


@needs_shared_data
def test_real_transformer_snapshot_names_its_unrecorded_blocks() -> None:
    """On the real transformer snapshot the 12.82 GiB without frames is '<before recording>'."""
    path = REAL_SNAPSHOTS / "cuda-transformer-forward.pickle"
    raw = pickle.loads(path.read_bytes())
    blocks = [
        block
        for segment in raw["segments"]
        for block in segment["blocks"]
        if block["state"] == "active_allocated" and not block.get("frames")
    ]
    summary = summarize(load_dump(path))
    assert summary.before_recording_blocks == len(blocks) == 324
    assert summary.before_recording_bytes == sum(block["size"] for block in blocks)
    assert summary.top_sites[0].site == BEFORE_RECORDING
    assert all(site.site != UNKNOWN_SITE for site in summary.top_sites)


@pytest.mark.parametrize(
    "filename",
    [
        "/usr/lib/python3.11/runpy.py",
        "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py",
        "/usr/lib/python3/dist-packages/numpy/core.py",
        "/users/me/.venv/lib64/python3.12/threading.py",
        "<frozen runpy>",
        "C:\\Python311\\Lib\\site-packages\\accelerate\\launch.py",
        "C:\\Python311\\Lib\\runpy.py",
    ],
)
def test_installed_and_stdlib_files(filename: str) -> None:
    """Installed packages and the standard library are not the user's own code."""
    assert is_installed_file(filename)


@pytest.mark.parametrize(
    "filename",
    [
        "/users/me/train.py",
        "/tmp/ipykernel_4242/3391612290.py",
        "/users/me/lib/models/mlp.py",
        "/scratch/run/python3.11/notes.py",
        "<ipython-input-3-1a2b3c>",
    ],
)
def test_user_files_are_not_installed(filename: str) -> None:
    """Scripts, notebook cells and a user's own lib/ folder are user code."""
    assert not is_installed_file(filename)


def test_caller_is_the_users_line_below_a_library_site() -> None:
    """A site inside transformers gets the user's line as its caller, in the data and JSON."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(64), site=LIBRARY), Block(MiB(16), site=TRAIN))
    summary = summarize(dump_from_snapshot(builder.build()))
    first, second = summary.top_sites
    assert (first.site, first.caller, first.bytes) == (str(LIBRARY), ENTRY, MiB(64))
    assert (second.site, second.caller) == (str(TRAIN), str(TRAIN))
    assert to_json(summary)["top_sites"][0]["caller"] == ENTRY
    assert caller_of(LIBRARY.frames()) == ENTRY


def test_text_shows_the_caller_under_a_library_site() -> None:
    """The verbose summary table prints '← caller' under a library site only."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(64), site=LIBRARY), Block(MiB(16), site=TRAIN))
    lines = summary_text(summarize(dump_from_snapshot(builder.build())), verbose=True).splitlines()
    rows = [i for i, line in enumerate(lines) if "modeling_llama.py:300" in line]
    at = next(i for i in rows if lines[i].split()[:2] == ["64.00", "MiB"])  # the site row
    assert lines[at + 1].strip() == f"← caller {ENTRY}"
    assert sum("← caller" in line for line in lines) == 1


def test_caller_unknown_when_every_frame_is_installed() -> None:
    """A stack that never leaves installed packages has a site but an '<unknown>' caller."""
    frames = [
        {"filename": "/sp/lib/python3.11/site-packages/torch/nn/linear.py", "line": 1, "name": "f"},
        {"filename": "/sp/lib/python3.11/site-packages/vllm/worker.py", "line": 9, "name": "run"},
        {"filename": "/sp/lib/python3.11/runpy.py", "line": 88, "name": "_run_code"},
    ]
    assert site_of(frames) == "/sp/lib/python3.11/site-packages/vllm/worker.py:9 run"
    assert caller_of(frames) == UNKNOWN_SITE


def test_the_memforensics_console_script_is_never_a_caller() -> None:
    """An installed script run by `memforensics run` or the demo: the console script below it is
    memforensics' own frame, not the user's line, so it is never named as the caller."""
    sp = "/venv/lib/python3.12/site-packages"
    frames = [
        {"filename": f"{sp}/memforensics/examples/demo_train.py", "line": 57, "name": "keep"},
        {"filename": f"{sp}/memforensics/cli/_main.py", "line": 60, "name": "main"},
        {"filename": "/venv/bin/memforensics", "line": 8, "name": "<module>"},
    ]
    assert site_of(frames) == f"{sp}/memforensics/examples/demo_train.py:57 keep"
    assert caller_of(frames) == UNKNOWN_SITE


def test_diff_rows_carry_the_caller() -> None:
    """diff's growth rows name the caller too, in JSON and under the site in text."""
    before, after = SnapshotBuilder(), SnapshotBuilder()
    before.segment(Block(MiB(2), site=LIBRARY))
    after.segment(Block(MiB(2), site=LIBRARY), Block(MiB(30), site=LIBRARY))
    result = diff_dumps(dump_from_snapshot(before.build()), dump_from_snapshot(after.build()))
    [growth] = result.growth
    assert (growth.site, growth.caller, growth.delta_bytes) == (str(LIBRARY), ENTRY, MiB(30))
    assert to_json(result)["growth"][0]["caller"] == ENTRY
    assert f"← caller {ENTRY}" in diff_text(result)


@needs_shared_data
def test_real_backward_allocations_are_no_python_frames() -> None:
    """On the real forward-backward dump the 1,066 frameless allocs of the trace (the backward
    thread's temporaries) are '<no Python frames>' in the call tree and the kinds' sites, and
    only the 1.05 GB live before recording is '<before recording>'."""
    path = REAL_WORKLOADS / "small-lm-forward-backward" / "snapshot.pickle"
    raw = pickle.loads(path.read_bytes())
    frameless = [e for e in raw["device_traces"][0] if e["action"] == "alloc" and not e["frames"]]
    filled = what_filled(load_dump(path))
    lt = filled.lifetimes
    traced = [found for found in lt.allocations if found.start != BEFORE and not found.frames]
    assert len(traced) == len(frameless) == 1066
    assert all(found.recorded for found in traced)
    assert not any(found.recorded for found in lt.allocations if found.start == BEFORE)
    moment = max(traced, key=lambda found: found.size).start
    live = live_at(lt, moment)
    tree = {child.name: child.bytes for child in call_tree(live).children}
    unrecorded = sum(found.size for found in live if found.start == BEFORE)
    assert tree[BEFORE_RECORDING] == unrecorded > 1_000_000_000
    ids = {id(found) for found in traced}
    no_python = sum(found.size for found in live if id(found) in ids)
    assert tree[NATIVE_ONLY] == no_python > 0
    sites = {(row.kind, row.site): row.bytes for row in kind_sites(live, per_kind=100)}
    assert sites[("temporary", NATIVE_ONLY)] == no_python
