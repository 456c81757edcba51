"""Loading a dump: the cyclic collector held off and resumed as it was; bytes read counted."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from memforensics.analysis.dump.load import paused_gc, read_snapshot_file
from memforensics.testing import exhausted, write_dump


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_the_collector_is_off_inside_and_on_after() -> None:
    """Inside paused_gc the collector is disabled; leaving it enables it again."""
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_nesting_resumes_only_at_the_outermost() -> None:
    """An inner pause does not resume the collector the outer one still holds off."""
    with paused_gc():
        with paused_gc():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_disabled_by_the_caller_stays_disabled() -> None:
    """A caller who turned the collector off finds it off afterwards, even after an error."""
    gc.disable()
    with pytest.raises(ValueError, match="inside"), paused_gc():
        raise ValueError("inside")
    assert not gc.isenabled()


def test_loading_a_dump_unpickles_with_the_collector_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """read_snapshot_file runs the unpickler with the collector held off."""
    seen: list[bool] = []
    real_loads = read_snapshot_file.__globals__["_RestrictedUnpickler"].load

    def load(self: object) -> object:
        seen.append(gc.isenabled())
        return real_loads(self)

    monkeypatch.setattr(read_snapshot_file.__globals__["_RestrictedUnpickler"], "load", load)
    path = tmp_path / "d.pickle"
    write_dump(path, exhausted().snapshot)
    read_snapshot_file(path)
    assert seen == [False]
    assert gc.isenabled()


def test_the_bytes_read_while_loading_are_counted_up_to_the_file_size(tmp_path: Path) -> None:
    """read_snapshot_file reports a running count of bytes read that ends at the file's size."""
    path = tmp_path / "d.pickle"
    write_dump(path, exhausted().snapshot)
    seen: list[int] = []
    read_snapshot_file(path, seen.append)
    assert seen
    assert seen == sorted(seen)
    assert seen[-1] == path.stat().st_size
