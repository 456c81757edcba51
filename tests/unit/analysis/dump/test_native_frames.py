"""Native frames are never sites: object, assembly and C++ frames of a ``stacks="all"`` dump are
dropped by every reader, and a stack without a Python frame reads ``<no Python frames>``
everywhere."""

from __future__ import annotations

import json
import pickle
import re

import pytest

from memforensics.analysis import diff_dumps, load_dump, summarize
from memforensics.analysis.compare.text import diff_text
from memforensics.analysis.dump import (
    BEFORE_RECORDING,
    NATIVE_ONLY,
    NATIVE_ONLY_MEANING,
    UNKNOWN_SITE,
    dump_from_snapshot,
    is_native_frame,
    site_fast,
    site_of,
)
from memforensics.analysis.filled import what_filled
from memforensics.analysis.filled.kinds import BACKWARD, FORWARD, phase_of
from memforensics.analysis.report import ReportBuilder
from memforensics.analysis.summary import summary_text
from memforensics.testing import AUTOGRAD_THREAD, TRAIN, Block, GiB, SnapshotBuilder
from shared_data import REAL_SNAPSHOTS, needs_shared_data

REAL = REAL_SNAPSHOTS / "cuda-cnn-stacks-all.pickle"
_DATA = re.compile(r'<script type="application/json" id="mf-data">(.*?)</script>', re.S)


def _forward_dump() -> SnapshotBuilder:
    """A forward dump whose biggest block comes from autograd's backward thread."""
    builder = SnapshotBuilder()
    builder.segment(Block(GiB(7.58), site=AUTOGRAD_THREAD), Block(GiB(1), site=TRAIN))
    return builder


@pytest.mark.parametrize(
    ("filename", "name"),
    [
        ("thread48.o", "execute_native_thread_routine"),
        ("clone3.S", "__clone3"),
        ("memcpy.s", "memcpy"),
        ("/lib/x86_64-linux-gnu/libc.so.6", "start_thread"),
        ("libtorch_cuda.so", "cudaMalloc"),
        ("libfoo.a", "foo"),
        ("Blas.cu", "gemm"),
        ("Loops.cuh", "gpu_kernel"),
        ("TensorImpl.h", "data"),
        ("Tensor.hpp", "sizes"),
        ("thread.cc", "execute_native_thread_routine"),
        ("??", "start_thread"),
        ("", "__clone3"),
        ("/usr/include/c++/11/functional", "c10::impl::call"),
        ("/usr/include/c++/11/functional", "at::native::empty_cuda"),
        ("/usr/include/c++/11/functional", "torch::autograd::Engine::thread_main"),
    ],
)
def test_native_frames_are_never_sites(filename: str, name: str) -> None:
    """Object, assembly, library and C/C++/CUDA files, '??', no file, and C++ names are native."""
    assert is_native_frame(filename, name)
    frames = [{"filename": filename, "line": 0, "name": name}]
    assert site_of(frames) == site_fast(frames) == NATIVE_ONLY


@pytest.mark.parametrize(
    "filename", ["/job/model.py", "<stdin>", "<ipython-input-3-1a2b>", "/opt/torch/nn/linear.py"]
)
def test_python_frames_are_not_native(filename: str) -> None:
    """Python files, the console and notebook cells are Python, inside torch or not."""
    assert not is_native_frame(filename, "forward")


def test_autograd_thread_never_tops_a_forward_dump_as_thread48() -> None:
    """summary names the 7.58 GiB backward-thread block '<no Python frames>' and says what it
    is."""
    summary = summarize(dump_from_snapshot(_forward_dump().build()))
    top = summary.top_sites[0]
    assert (top.site, top.caller, top.bytes) == (NATIVE_ONLY, NATIVE_ONLY, GiB(7.58))
    text = summary_text(summary)
    assert "thread48.o" not in text
    assert "clone3.S" not in text
    assert NATIVE_ONLY_MEANING in " ".join(text.split())
    assert "← caller" not in text


def test_a_thread_without_python_is_backward_for_kinds() -> None:
    """A stack of libstdc++ and libc frames only is the engine's thread (backward), not forward."""
    frames = [f for f in AUTOGRAD_THREAD.frames() if "::" not in f["name"]]
    assert [f["filename"] for f in frames] == ["thread48.o", "??", "clone3.S"]
    assert phase_of(frames) == BACKWARD
    assert phase_of(AUTOGRAD_THREAD.frames()) == BACKWARD
    assert phase_of(TRAIN.frames()) == FORWARD


def test_call_tree_has_one_cpp_only_node() -> None:
    """The call tree puts the backward-thread block under one '<no Python frames>' node."""
    filled = what_filled(dump_from_snapshot(_forward_dump().build()))
    names = [child.name for child in filled.peak.tree.sorted_children()]
    assert names[0] == NATIVE_ONLY
    assert not any("thread48.o" in name or "clone3.S" in name for name in names)


def test_diff_names_the_no_python_row_and_says_what_it_is() -> None:
    """diff's growth row for the backward thread is '<no Python frames>', explained under the
    table."""
    before, after = SnapshotBuilder(), _forward_dump()
    before.segment(Block(GiB(1), site=TRAIN))
    result = diff_dumps(dump_from_snapshot(before.build()), dump_from_snapshot(after.build()))
    assert result.growth[0].site == NATIVE_ONLY
    text = diff_text(result)
    assert "thread48.o" not in text
    assert f"{NATIVE_ONLY}: {NATIVE_ONLY_MEANING}" in " ".join(text.split())


def test_report_sites_and_tree_say_the_same_label() -> None:
    """The report's sites table and call tree name '<no Python frames>' and explain it."""
    builder = ReportBuilder()
    builder.add(dump_from_snapshot(_forward_dump().build()))
    found = _DATA.search(builder.html())
    assert found is not None
    document = json.loads(found[1])
    sections = {part["id"]: part for part in document["dumps"][0]["devices"][0]["sections"]}
    sites = sections["sites"]["data"]
    assert sites["rows"][0][0] == NATIVE_ONLY
    assert NATIVE_ONLY_MEANING in sites["note"]
    tree = sections["tree"]["data"]
    assert tree["root"]["children"][0]["name"] == NATIVE_ONLY
    assert NATIVE_ONLY_MEANING in tree["moment"]
    assert "thread48.o:0" not in json.dumps(sections["sites"]) + json.dumps(sections["tree"])


def test_python_frames_inside_torch_only_stay_unknown() -> None:
    """A stack whose Python frames are all torch's is '<unknown>', not '<no Python frames>'."""
    frames = [
        {"filename": "??", "line": 0, "name": "c10::cuda::CUDACachingAllocator::malloc"},
        {"filename": "/venv/site-packages/torch/nn/modules/linear.py", "line": 1, "name": "f"},
    ]
    assert site_of(frames) == site_fast(frames) == UNKNOWN_SITE
    assert site_of([]) == site_fast([]) == site_of(None) == BEFORE_RECORDING


@needs_shared_data
def test_real_stacks_all_dump_has_no_native_site() -> None:
    """On a real stacks='all' dump every site is a Python line or a label, and the sites that are
    no Python frames are exactly the live blocks whose frames hold no Python file."""
    raw = pickle.loads(REAL.read_bytes())
    native_bytes = sum(
        block["size"]
        for segment in raw["segments"]
        for block in segment["blocks"]
        if block["state"] == "active_allocated"
        and block.get("frames")
        and not any(frame["filename"].endswith(".py") for frame in block["frames"])
    )
    summary = summarize(load_dump(REAL), top=None)
    for row in summary.top_sites:
        assert row.site.startswith("<") or ".py:" in row.site
    assert native_bytes > 0
    assert sum(t.bytes for t in summary.top_sites if t.site == NATIVE_ONLY) == native_bytes
