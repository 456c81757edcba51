"""Both HTML pages embed hostile text (a site, a file name) by one rule, never raw."""

from __future__ import annotations

import json
import re
from pathlib import Path

from memforensics.analysis import build_overview, load_dump, render_overview
from memforensics.analysis.report import ReportBuilder
from memforensics.analysis.report.html import json_in_script
from memforensics.testing import (
    Block,
    MiB,
    Site,
    SnapshotBuilder,
    make_sidecar,
    write_dump,
    write_journals,
)

HOSTILE = "x</script><!--\u2028\u2029&y"
"""Closes the data's script element, opens a comment, breaks a line for old JavaScript."""
ESCAPED = json_in_script(HOSTILE)[1:-1]


def _hostile_dump(root: Path) -> Path:
    """A dump whose path and whose allocation site both carry ``HOSTILE``."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(8), site=Site(f"/w/{HOSTILE}.py", 3, HOSTILE)))
    folder, name = HOSTILE.split("/", 1)  # "/" cannot be in a name: split across a folder
    path = root / folder / f"{name}.pickle"
    return write_dump(path, builder.build(), sidecar=make_sidecar("oom", rank=1, step=40))


def _check(page: str, data_id: str) -> object:
    """The page holds the hostile text only escaped, and its data reads back unchanged."""
    assert "<!--" not in page
    assert "\u2028" not in page
    assert "\u2029" not in page
    assert page.count("</script>") == 2  # the data element's own end and the code's
    assert ESCAPED in page
    found = re.search(rf'<script type="application/json" id="{data_id}">(.*?)</script>', page)
    assert found is not None
    return json.loads(found[1])


def test_report_and_overview_escape_hostile_text_alike(tmp_path: Path) -> None:
    """``</script>``, ``<!--``, ``&`` and U+2028/9 reach both pages escaped the same way, and
    come back whole when the page's script parses its data."""
    dump = _hostile_dump(tmp_path)
    builder = ReportBuilder()
    builder.add(load_dump(dump))
    report = builder.html()
    document = _check(report, "mf-data")
    assert HOSTILE in json.dumps(document, ensure_ascii=False)

    write_journals(tmp_path, ranks=2, lines=3, leak_rank=None)
    overview = render_overview(build_overview(tmp_path, workers=1), link_base=tmp_path)
    data = _check(overview, "overview-data")
    assert isinstance(data, dict)
    assert data["facts"]["1"]["dumps"] == [f"{HOSTILE}.pickle"]


def test_escaping_is_exactly_the_json_escapes() -> None:
    """Each dangerous character becomes its JSON ``\\uXXXX`` escape and nothing else changes."""
    text = json_in_script({"a": "<>&\u2028\u2029é"})
    assert text == '{"a":"\\u003c\\u003e\\u0026\\u2028\\u2029\\u00e9"}'
    assert json.loads(text) == {"a": "<>&\u2028\u2029é"}
