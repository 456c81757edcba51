"""summary: totals, OOM, verdict, sites and steps match what the synthetic builder put in."""

from __future__ import annotations

from pathlib import Path

import pytest

from memforensics.analysis import load_dump, summarize
from memforensics.analysis.dump import dump_from_snapshot, is_library_file, parse_step, site_of
from memforensics.analysis.schema import to_json
from memforensics.testing import (
    CACHE,
    OPTIMIZER,
    TRAIN,
    Block,
    GiB,
    MiB,
    SnapshotBuilder,
    exhausted,
    fragmented,
    make_sidecar,
)


def _check_truth(summary_dict: dict[str, object], truth: object) -> None:
    for key in (
        "reserved_bytes",
        "allocated_bytes",
        "active_bytes",
        "free_in_reserved_bytes",
        "largest_free_block_bytes",
        "segments",
        "blocks",
    ):
        assert summary_dict[key] == getattr(truth, key), key


@pytest.mark.parametrize("legacy", [False, True])
def test_fragmentation_verdict(tmp_path: Path, legacy: bool) -> None:
    """Half-empty striped segments with a 32 MiB request: fragmentation, with the advice."""
    synthetic = fragmented(legacy=legacy)
    summary = summarize(load_dump(synthetic.write(tmp_path / "oom" / "rank0_pid1.pickle")))
    data = to_json(summary)
    _check_truth(data, synthetic.truth)
    assert data["verdict"]["name"] == synthetic.truth.verdict == "fragmentation"
    oom = data["oom"]
    assert (oom["requested_bytes"], oom["device_free_bytes"]) == (MiB(32), 0)
    assert (oom["device_total_bytes"], oom["origin"]) == (GiB(80), "sidecar")
    assert "expandable_segments:True" in str(data["verdict"]["advice"])
    kinds = data["top_sites"][0].pop("kinds")  # the site's bytes by kind add up to the site's
    assert sum(part["bytes"] for part in kinds) == MiB(256)
    assert sum(part["blocks"] for part in kinds) == 32
    assert kinds[0]["kind"] == data["top_sites"][0]["kind"]
    assert data["top_sites"] == [
        {
            "site": str(TRAIN),
            "caller": str(TRAIN),
            "bytes": MiB(256),
            "requested_bytes": MiB(256),
            "blocks": 32,
            "kind": "unknown",  # forward blocks held past later passes: not parameters by size
        }
    ]


def test_exhausted_verdict_names_biggest_sites() -> None:
    """Live memory filling the device is 'exhausted' and the explanation names the top site."""
    synthetic = exhausted()
    summary = summarize(dump_from_snapshot(synthetic.snapshot, sidecar=synthetic.sidecar))
    _check_truth(to_json(summary), synthetic.truth)
    assert summary.verdict.name == synthetic.truth.verdict == "exhausted"
    assert str(TRAIN) in summary.verdict.explanation
    assert [site.site for site in summary.top_sites] == [str(TRAIN), str(OPTIMIZER), str(CACHE)]


def test_oom_from_trace_without_sidecar() -> None:
    """With no sidecar, the OOM comes from the trace's last oom entry."""
    synthetic = exhausted(with_sidecar=False)
    summary = summarize(dump_from_snapshot(synthetic.snapshot))
    assert summary.oom is not None
    assert summary.oom.origin == "trace"
    assert summary.oom.requested_bytes == GiB(1)
    assert summary.oom.device_free_bytes == MiB(32)
    assert summary.verdict.name == "exhausted"


def test_device_free_counts_toward_fragmentation() -> None:
    """Holes plus free device memory covering the request, no hole big enough: fragmentation."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(20)), Block(MiB(10), state="inactive", site=None), Block(MiB(20)))
    builder.oom(requested=MiB(40), device_free=MiB(30))
    summary = summarize(dump_from_snapshot(builder.build()))
    assert summary.verdict.name == builder.truth().verdict == "fragmentation"


def test_memory_limit_caps_device_free() -> None:
    """A per-process limit (device_total_bytes) caps usable free memory: then it is exhaustion."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(20)), Block(MiB(10), state="inactive", site=None), Block(MiB(20)))
    builder.oom(requested=MiB(40), device_free=MiB(30))
    oom = {"requested_bytes": MiB(40), "device_free_bytes": MiB(30), "device_total_bytes": MiB(50)}
    sidecar = make_sidecar("oom", oom=oom)
    summary = summarize(dump_from_snapshot(builder.build(), sidecar=sidecar))
    assert summary.verdict.name == builder.truth(device_total=MiB(50)).verdict == "exhausted"


def test_no_oom_verdict() -> None:
    """A window dump without any OOM says no-oom and gives no advice."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(4)))
    summary = summarize(dump_from_snapshot(builder.build()))
    assert summary.verdict.name == "no-oom"
    assert summary.verdict.advice is None


@pytest.mark.parametrize("on_blocks", [False, True])
def test_live_bytes_by_step(on_blocks: bool) -> None:
    """Steps come from block metadata (sim) or the block's latest alloc trace entry (PyTorch)."""
    builder = SnapshotBuilder(steps_on_blocks=on_blocks)
    builder.segment(Block(MiB(2), step=3), Block(MiB(4), step=5), Block(MiB(6), step=5))
    builder.segment(Block(MiB(1), step=None), Block(MiB(8), state="inactive", step=4))
    summary = summarize(dump_from_snapshot(builder.build()))
    got = {item.step: item.bytes for item in summary.live_by_step}
    assert got == builder.truth().step_bytes == {3: MiB(2), 5: MiB(10), None: MiB(1)}


def test_truncated_from_sidecar() -> None:
    """truncated repeats the sidecar flag, and is None (unknown) without one."""
    synthetic = fragmented()
    flagged = make_sidecar("window", truncated=True)
    assert summarize(dump_from_snapshot(synthetic.snapshot, sidecar=flagged)).truncated
    assert summarize(dump_from_snapshot(synthetic.snapshot)).truncated is None


def test_site_skips_library_and_native_frames() -> None:
    """The site is the innermost Python frame outside torch, torch_npu and memforensics."""
    frames = [
        {"filename": "??", "line": 0, "name": "malloc"},
        {"filename": "CUDACachingAllocator.cpp", "line": 0, "name": "malloc"},
        {"filename": "/sp/torch/nn/functional.py", "line": 9, "name": "linear"},
        {"filename": "/sp/torch_npu/utils.py", "line": 9, "name": "x"},
        {"filename": "/sp/memforensics/_facade.py", "line": 9, "name": "step"},
        {"filename": "/users/me/train.py", "line": 7, "name": "loop"},
    ]
    assert site_of(frames) == "/users/me/train.py:7 loop"
    assert site_of(frames[:5]) == "<unknown>"
    assert site_of("junk") == "<unknown>"
    assert site_of([1, {"filename": 3}]) == "<unknown>"


def test_tests_folder_of_a_memforensics_checkout_is_user_code() -> None:
    """A checkout named memforensics keeps its tests/ as user code; its src/ stays library."""
    assert not is_library_file("/users/me/memforensics/tests/unit/test_x.py")
    assert is_library_file("/users/me/memforensics/src/memforensics/_oom.py")
    assert is_library_file("/tmp/torchinductor_me/ab/cabxyz.py")
    assert not is_library_file(__file__)


def test_the_examples_of_a_checkout_named_for_its_package_are_user_code() -> None:
    """An editable install from a clone named memforensics: the demo's own lines are the
    user's (the leak it shows must be named), the package beside them stays library."""
    checkout = "/users/me/memforensics/src/memforensics"
    assert not is_library_file(f"{checkout}/examples/demo_train.py")
    assert is_library_file(f"{checkout}/capture/facade.py")
    assert is_library_file(
        "/users/me/memforensics/.nox/tests/lib/python3.11/site-packages/torch/nn/x.py"
    )


def test_parse_step() -> None:
    """step=N is found in user_metadata strings; anything else gives None."""
    assert parse_step("step=12") == 12
    assert parse_step("epoch=1;step=7") == 7
    assert parse_step("mystep=3") is None
    assert parse_step(None) is None
    assert parse_step(5) is None


def test_a_dump_without_an_oom_is_searched_for_one_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """summarize looks for the OOM's moment once, also when there is none (a trace walk each)."""
    import importlib

    from memforensics.analysis import summarize
    from memforensics.analysis.dump import dump_from_snapshot
    from memforensics.testing import Block, MiB, SnapshotBuilder

    builder = SnapshotBuilder()
    builder.segment(Block(MiB(20)), Block(MiB(2), state="inactive", site=None))
    builder.churn(50, size=4096, step=1)
    dump = dump_from_snapshot(builder.build())
    calls: list[int] = []
    for name in ("memforensics.analysis.summary.summary", "memforensics.analysis.oom.verdict"):
        module = importlib.import_module(name)
        real = module.oom_moment

        def counted(*args: object, _real: object = real, **kwargs: object) -> object:
            calls.append(1)
            return _real(*args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(module, "oom_moment", counted)
    summary = summarize(dump)
    assert summary.oom is None
    assert len(calls) == 1
