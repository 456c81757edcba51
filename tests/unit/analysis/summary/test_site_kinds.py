"""A site whose blocks are of several kinds says each kind's bytes, in text, JSON and report,
and never gives one kind the site's total."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memforensics._units import format_bytes as fmt
from memforensics.analysis import load_dump, summarize
from memforensics.analysis.schema import from_json, to_json
from memforensics.analysis.summary import SiteBytes, Summary, summary_text
from memforensics.testing import Block, MiB, SnapshotBuilder, make_sidecar, write_dump
from memforensics.testing._synthetic import Site
from shared_data import REAL_SNAPSHOTS, needs_shared_data, real_params, real_snapshots

FLAT = Site("/job/flat.py", 7, "flat_buffers")  # one line makes the weight and its gradient
OTHER = Site("/job/model.py", 40, "forward")


def _mixed(tmp_path: Path) -> Summary:
    """A window dump whose sidecar labels a 96 MiB parameter and a 32 MiB gradient, both made
    at :data:`FLAT`, beside 64 MiB made at :data:`OTHER`."""
    builder = SnapshotBuilder()
    weight = builder.segment(Block(MiB(96), site=FLAT))
    grad = builder.segment(Block(MiB(32), site=FLAT))
    builder.segment(Block(MiB(64), site=OTHER))
    tensors = [
        {"address": weight, "offset": 0, "bytes": MiB(96), "kind": "parameter", "name": "w"},
        {"address": grad, "offset": 0, "bytes": MiB(32), "kind": "gradient", "name": "w.grad"},
    ]
    sidecar = make_sidecar("window", tensors=tensors)
    path = write_dump(tmp_path / "steps0-1" / "rank0_pid1.pickle", builder.build(), sidecar=sidecar)
    return summarize(load_dump(path))


_ROW = re.compile(r"\s+([\d.]+ [KMGT]?i?B)\s+[\d,]+\s+(\d+ kinds|\S+)\s")
"""A site-table row: ``live bytes  blocks  kind  site`` (a call-tree line has no blocks)."""


def _rows_of(text: str, site: str) -> list[tuple[str, str]]:
    """The bytes and kind column of each site-table row that names ``site``."""
    return [
        (found.group(1), found.group(2))
        for line in text.splitlines()
        if line.rstrip().endswith(site) and (found := _ROW.match(line))
    ]


def test_json_gives_each_kind_s_bytes_and_the_main_kind(tmp_path: Path) -> None:
    """``top_sites[].kinds`` holds parameter 96 MiB and gradient 32 MiB for the one site, the
    biggest first; ``kind`` stays the main kind; the site's own bytes are their sum."""
    summary = _mixed(tmp_path)
    data = to_json(summary)
    for rows in (data["top_sites"], data["peak_sites"]):
        [row] = [row for row in rows if row["site"] == str(FLAT)]
        assert row["bytes"] == MiB(128)
        assert row["kind"] == "parameter"
        assert row["kinds"] == [
            {"kind": "parameter", "bytes": MiB(96), "blocks": 1},
            {"kind": "gradient", "bytes": MiB(32), "blocks": 1},
        ]
        [other] = [row for row in rows if row["site"] == str(OTHER)]
        assert [part["bytes"] for part in other["kinds"]] == [MiB(64)]


@pytest.mark.parametrize("verbose", [False, True])
def test_text_gives_each_kind_its_own_bytes(tmp_path: Path, verbose: bool) -> None:
    """Default and verbose text: the site's rows say 96 MiB parameter and 32 MiB gradient;
    no row puts the site's 128 MiB beside a kind."""
    text = summary_text(_mixed(tmp_path), verbose=verbose)
    claims = _rows_of(text, str(FLAT))
    assert ("96.00 MiB", "parameter") in claims
    assert ("32.00 MiB", "gradient") in claims
    assert not [kind for size, kind in claims if size == "128.00 MiB"]


def test_a_summary_read_back_from_json_keeps_the_kinds(tmp_path: Path) -> None:
    """The cache keeps the summary's JSON: read back, its site rows and text are the same."""
    summary = _mixed(tmp_path)
    back = from_json(Summary, json.loads(json.dumps(to_json(summary))))
    assert back.top_sites == summary.top_sites
    assert summary_text(back) == summary_text(summary)


def test_the_report_gives_a_row_per_kind(tmp_path: Path) -> None:
    """The report's site table has the site once per kind, with that kind's bytes."""
    from memforensics.analysis.report import ReportBuilder

    _mixed(tmp_path)
    builder = ReportBuilder()
    builder.add(load_dump(tmp_path / "steps0-1" / "rank0_pid1.pickle"))
    document = json.loads(builder.html().split('id="mf-data">', 1)[1].split("</script>", 1)[0])
    sections = document["dumps"][0]["devices"][0]["sections"]
    [sites] = [part for part in sections if part.get("id") == "sites"]
    rows = [row for row in sites["data"]["rows"] if row[0] == str(FLAT)]
    assert sorted((row[1], row[3]) for row in rows) == [
        (MiB(32), "gradient"),
        (MiB(96), "parameter"),
    ]
    assert not [row for row in rows if row[1] == MiB(128)]


@needs_shared_data
def test_the_cnn_s_no_python_site_is_three_kinds() -> None:
    """On the real CNN dump the peak's ``<no Python frames>`` site holds temporaries 22.50 MiB,
    a workspace 8.12 MiB and a gradient 7.50 MiB (the kinds line's temporaries are these
    22.50 MiB): no row of the default or verbose text calls its 38.13 MiB temporary."""
    summary = summarize(load_dump(REAL_SNAPSHOTS / "cuda-cnn-stacks-all.pickle"))
    [native] = [row for row in summary.peak_sites if row.site == "<no Python frames>"]
    assert [(part.kind, part.bytes) for part in native.kinds] == [
        ("temporary", MiB(22.5) + 512),  # four blocks, printed 22.50 MiB
        ("workspace", 8519680),  # cuBLAS's default workspace
        ("gradient", MiB(7.5)),
    ]
    assert native.bytes == sum(part.bytes for part in native.kinds)
    assert summary.peak is not None
    peak_kinds = {kind.kind: kind.bytes for kind in summary.peak.kinds}
    assert fmt(peak_kinds["temporary"]) == fmt(native.kinds[0].bytes) == "22.50 MiB"
    for verbose in (False, True):
        text = summary_text(summary, width=80, verbose=verbose)
        claims = _rows_of(text, "<no Python frames>")
        assert claims, text
        assert ("38.13 MiB", "temporary") not in claims
        assert all(size != "38.13 MiB" or kind == "3 kinds" for size, kind in claims), claims
    verbose = summary_text(summary, width=80, verbose=True)
    assert ("22.50 MiB", "temporary") in _rows_of(verbose, "<no Python frames>")


@needs_shared_data
@pytest.mark.parametrize("path", real_params(real_snapshots()), ids=lambda p: getattr(p, "stem", p))
def test_site_kinds_add_up_to_the_kinds_table(path: Path) -> None:
    """On every real snapshot, every site's kinds add up to its bytes and blocks, and over all
    sites each kind's bytes are the kinds table's (at the peak and at the snapshot)."""
    summary = summarize(load_dump(path), top=None, replay=False)
    tables: list[tuple[tuple[SiteBytes, ...], dict[str, int]]] = [
        (summary.top_sites, {kind.kind: kind.bytes for kind in summary.kinds})
    ]
    if summary.peak_sites and summary.peak is not None:
        tables.append((summary.peak_sites, {kind.kind: kind.bytes for kind in summary.peak.kinds}))
    for rows, kinds in tables:
        by_kind: dict[str, int] = {}
        for row in rows:
            assert sum(part.bytes for part in row.kinds) == row.bytes, row
            assert sum(part.blocks for part in row.kinds) == row.blocks, row
            assert row.kind == row.kinds[0].kind, row
            assert [part.bytes for part in row.kinds] == sorted(
                (part.bytes for part in row.kinds), reverse=True
            ), row
            for part in row.kinds:
                by_kind[part.kind] = by_kind.get(part.kind, 0) + part.bytes
        assert by_kind == {kind: size for kind, size in kinds.items() if size}
