"""The run folder's names: every name capture writes parses back, in every reader, to its facts."""

from __future__ import annotations

import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from memforensics import _layout
from memforensics.analysis import list_dumps
from memforensics.analysis.dump.meta import dump_meta
from memforensics.analysis.folder.journals import list_journals
from memforensics.analysis.folder.ls import scan_run
from memforensics.capture import atomic
from memforensics.capture.journal import Journal
from memforensics.capture.window import Window

ids = st.integers(min_value=0, max_value=10**7)
steps = st.integers(min_value=0, max_value=10**9)
moments = st.datetimes(
    min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(timezone.utc)
)
OUT = Path("/run")


@given(rank=ids, pid=ids, first=steps, length=st.integers(min_value=0, max_value=1000))
def test_window_names_parse_back(rank: int, pid: int, first: int, length: int) -> None:
    """A window dump's path, as the writer builds it, reads back as that window, rank and pid."""
    window = Window(0, first, first + length)
    paths = atomic.window_paths(OUT, window.name, rank, pid)
    meta = dump_meta(paths.snapshot, None)
    assert (meta.kind, meta.rank, meta.steps, meta.step) == (
        "window",
        rank,
        (first, first + length),
        None,
    )
    named = _layout.parse_stem(_layout.snapshot_stem(paths.snapshot.name) or "")
    assert (named.rank, named.pid, named.created_at) == (rank, pid, None)
    assert paths.sidecar == _layout.sidecar_path(paths.snapshot)
    assert paths.inflight == OUT / ".inflight" / f"rank{rank}"


@given(
    kind=st.sampled_from(_layout.EVENT_KINDS),
    rank=ids,
    pid=ids,
    step=st.none() | steps,
    now=moments,
)
def test_event_names_parse_back(
    kind: str, rank: int, pid: int, step: int | None, now: datetime
) -> None:
    """An OOM or manual dump's path reads back as its kind, rank, pid, step and moment."""
    paths = atomic.event_paths(OUT, kind, rank, pid, step, now)
    meta = dump_meta(paths.snapshot, None)
    assert (meta.kind, meta.rank, meta.step, meta.steps) == (kind, rank, step, None)
    assert meta.created_at == now.isoformat()
    named = _layout.parse_stem(_layout.snapshot_stem(paths.snapshot.name) or "")
    assert (named.rank, named.pid, named.step, named.created_at) == (rank, pid, step, now)
    assert paths.sidecar.name == paths.snapshot.name.replace(".pickle", ".json")


@given(rank=ids, pid=ids, generation=st.integers(min_value=0, max_value=9))
def test_journal_names_parse_back(rank: int, pid: int, generation: int) -> None:
    """Every journal file name, rotated or not, reads back as its rank, pid and generation."""
    name = _layout.journal_name(rank, pid, generation)
    assert _layout.parse_journal_name(name) == (rank, pid, generation)
    assert _layout.snapshot_stem(name) is None  # a journal is never taken for a dump


@given(first=steps, last=steps)
def test_window_folder_is_never_an_event_folder(first: int, last: int) -> None:
    """Window folders and event folders never share a name, so the folder alone says the kind."""
    name = _layout.window_folder(first, last)
    assert _layout.folder_kind(name) == "window"
    assert name not in (*_layout.EVENT_KINDS, _layout.JOURNAL_FOLDER)


@settings(max_examples=25, deadline=None)
@given(rank=st.integers(0, 4096), step=st.none() | steps, now=moments)
def test_every_reader_agrees_on_what_the_writer_wrote(
    rank: int, step: int | None, now: datetime
) -> None:
    """Files written by the real writer and journal are found and placed alike by ``ls``, the
    overview's folder scan and the journal listing, without any sidecar."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        pid = os.getpid()
        window = atomic.window_paths(out, Window(0, 4, 7).name, rank, pid)
        event = atomic.event_paths(out, "oom", rank, pid, step, now)
        for paths in (window, event):
            atomic.write_snapshot(paths.snapshot, {"segments": []}, paths.inflight)
        journal = Journal(out, rank, dict)
        journal.write("step", 0)
        journal.close()

        listed = {entry.path.relative_to(out): entry for entry in list_dumps(out).dumps}
        scanned = {Path(record.path): record for record in scan_run(str(out)).dumps}
        for paths, kind, at in ((window, "window", None), (event, "oom", step)):
            where = paths.snapshot.relative_to(out)
            assert (listed[where].kind, listed[where].rank, listed[where].step) == (kind, rank, at)
            record = scanned[where]
            assert (record.kind, record.rank, record.step) == (kind, rank, at)
        assert listed[window.snapshot.relative_to(out)].steps == (4, 7)
        assert listed[event.snapshot.relative_to(out)].created_at == now.isoformat()
        found = list_journals(os.fspath(_layout.journal_folder(out)))
        assert [(item.rank, item.pid, item.generation) for item in found] == [(rank, pid, 0)]
        assert not (out / _layout.INFLIGHT_FOLDER).exists()  # gone once the writes are done


def test_hand_named_dumps_are_read_leniently() -> None:
    """A dump named by hand still gives what its name holds; other names give nothing."""
    named = _layout.parse_stem("snapshot_rank3_step9")
    assert (named.rank, named.pid, named.step) == (3, None, 9)
    assert _layout.parse_stem("model") == _layout.StemFacts()
    assert _layout.parse_timestamp("20261399-000000-000000") is None
    assert _layout.folder_kind("steps4") == "window"
    assert _layout.folder_kind("logs") is None
    assert _layout.sidecar_path(Path("d/x.pkl.gz")) == Path("d/x.json")
