"""Safe loading: plain data in, a one-line SnapshotLoadError for anything else."""

from __future__ import annotations

import gzip
import os
import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memforensics import SnapshotLoadError
from memforensics._layout import sidecar_path
from memforensics.analysis import load_dump, summarize
from memforensics.analysis.dump import dump_from_snapshot, read_snapshot_file
from memforensics.analysis.schema import to_json
from memforensics.testing import exhausted, fragmented, write_dump
from shared_data import REAL_SNAPSHOTS, needs_shared_data


class _Hostile:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_hostile_reduce_is_refused_without_running(tmp_path: Path) -> None:
    """A pickle that reduces to os.system is refused, and the command never runs."""
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps({"segments": [_Hostile(marker)]}, protocol=4))
    with pytest.raises(SnapshotLoadError, match=r"evil\.pickle: refused.*(posix|os)\.system"):
        load_dump(path)
    assert not marker.exists()


def test_any_class_is_refused(tmp_path: Path) -> None:
    """Even a harmless class (a set builtin via GLOBAL) is refused: snapshots never need one."""
    path = tmp_path / "cls.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "x": Path("/")}, protocol=4))
    with pytest.raises(SnapshotLoadError, match="refused"):
        read_snapshot_file(path)


@pytest.mark.parametrize("keep", [0, 1, 10, 100, 1000])
def test_truncated_file_is_one_line_error(tmp_path: Path, keep: int) -> None:
    """Cutting a valid snapshot anywhere gives SnapshotLoadError naming the file, in one line."""
    whole = pickle.dumps(fragmented().snapshot, protocol=4)
    path = tmp_path / "cut.pickle"
    path.write_bytes(whole[:keep])
    with pytest.raises(SnapshotLoadError) as info:
        load_dump(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_truncated_gzip_is_one_line_error(tmp_path: Path) -> None:
    """A gzip file cut short is reported as truncated or corrupt."""
    data = gzip.compress(pickle.dumps(fragmented().snapshot, protocol=4))
    path = tmp_path / "cut.pickle.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SnapshotLoadError, match="truncated or corrupt"):
        load_dump(path)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_escape(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    """Arbitrary bytes either fail with SnapshotLoadError or are a (trivially) valid snapshot."""
    path = tmp_path_factory.mktemp("rand") / "r.pickle"
    path.write_bytes(data)
    message = ""
    try:
        summarize(load_dump(path))
    except SnapshotLoadError as exc:
        message = str(exc)
    assert "\n" not in message


def test_missing_file_and_folder(tmp_path: Path) -> None:
    """A missing path and a folder both give a clear SnapshotLoadError."""
    with pytest.raises(SnapshotLoadError, match="no such file"):
        load_dump(tmp_path / "nope.pickle")
    with pytest.raises(SnapshotLoadError, match="folder"):
        load_dump(tmp_path)


@pytest.mark.parametrize(
    ("snapshot", "why"),
    [
        ([1, 2], r"segments\[0\] is not a dict"),
        ("text", "top level is a str"),
        ({"device_traces": []}, "no 'segments' list"),
        ({"segments": [1]}, r"segments\[0\] is not a dict"),
        ({"segments": [{"blocks": {}}]}, "blocks is not a list"),
        ({"segments": [{"blocks": [{"size": -1, "state": "inactive"}]}]}, "size"),
        ({"segments": [{"blocks": [{"size": 1}]}]}, "state is missing"),
        ({"segments": [], "device_traces": {"a": 1}}, "device_traces"),
    ],
)
def test_wrong_shape_is_named(tmp_path: Path, snapshot: object, why: str) -> None:
    """A pickle of the wrong shape says what is wrong, with the file name."""
    path = write_dump(tmp_path / "odd.pickle", snapshot)
    with pytest.raises(SnapshotLoadError, match=why):
        load_dump(path)


def test_gzip_and_plain_load_the_same(tmp_path: Path) -> None:
    """A .pickle.gz gives the same summary as the same snapshot uncompressed."""
    dump = fragmented()
    plain = summarize(load_dump(dump.write(tmp_path / "a" / "x.pickle")))
    packed = summarize(load_dump(dump.write(tmp_path / "b" / "x.pickle.gz", gz=True)))
    assert to_json(packed) | {"file": ""} == to_json(plain) | {"file": ""}
    assert packed.oom is not None
    assert packed.oom.origin == "sidecar"


def test_sidecar_path_rules() -> None:
    """x.pickle and x.pickle.gz share the sidecar x.json."""
    assert sidecar_path(Path("d/rank0_pid1.pickle")) == Path("d/rank0_pid1.json")
    assert sidecar_path(Path("d/rank0_pid1.pickle.gz")) == Path("d/rank0_pid1.json")


def test_broken_sidecar_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    """An unreadable sidecar is ignored with a warning; the snapshot is still analysed."""
    path = fragmented().write(tmp_path / "x.pickle")
    sidecar_path(path).write_text("{oops")
    dump = load_dump(path)
    assert dump.meta.has_sidecar is False
    assert any("not valid JSON" in warning for warning in dump.warnings)


@needs_shared_data
@pytest.mark.parametrize(
    "name",
    [
        "cuda-cnn-stacks-all.pickle",
        "cuda-transformer-forward.pickle",
        "cuda-llm-at-oom-no-history.pickle",
    ],
)
def test_real_snapshots_load_and_add_up(name: str) -> None:
    """Real PyTorch snapshots (three formats) load; block totals match the segments' own fields."""
    path = REAL_SNAPSHOTS / name
    raw = pickle.loads(path.read_bytes())
    summary = summarize(load_dump(path))
    assert summary.reserved_bytes == sum(s["total_size"] for s in raw["segments"])
    assert summary.allocated_bytes == sum(s["allocated_size"] for s in raw["segments"])
    assert summary.active_bytes == sum(s["active_size"] for s in raw["segments"])
    assert summary.segments == len(raw["segments"])
    # with history a trace without an oom entry proves no OOM; without history nothing says
    expected = "unknown" if "no-history" in name else "no-oom"
    assert summary.verdict.name == expected
    assert summary.trace_entries == len(raw["device_traces"][0])
    assert all("/torch/" not in site.site and "??" not in site.site for site in summary.top_sites)


@pytest.mark.parametrize(
    ("oom", "user_request", "allocation"),
    [
        ({"requested_bytes": 20 << 20}, None, 20 << 20),  # schema 1: that was the allocation
        ({"requested_bytes": None, "allocation_bytes": 20 << 20}, None, 20 << 20),
        ({"requested_bytes": 5 << 20, "allocation_bytes": 20 << 20}, 5 << 20, 20 << 20),
    ],
)
def test_sidecar_request_and_allocation_are_never_mixed_up(
    oom: dict[str, int | None], user_request: int | None, allocation: int
) -> None:
    """The allocator's 20 MiB allocation is never shown as the user's request."""
    sidecar = {"schema": 2 if "allocation_bytes" in oom else 1, "kind": "oom", "oom": oom}
    record = dump_from_snapshot(exhausted().snapshot, sidecar=sidecar).meta.oom
    assert record is not None
    assert (record.requested_bytes, record.allocation_bytes) == (user_request, allocation)
