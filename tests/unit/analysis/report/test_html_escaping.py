"""Both HTML pages embed hostile text (a site, a file name) by one rule, never raw."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from urllib.parse import quote

import pytest

from memforensics._text import printable
from memforensics.analysis import build_overview, load_dump
from memforensics.analysis.report import ReportBuilder, render_overview
from memforensics.analysis.report.page import json_in_script
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
SHOWN = printable(HOSTILE)
"""What a page shows of it: the line separators spelled out like every control character."""
ESCAPED = json_in_script(SHOWN)[1:-1]


def _hostile_dump(root: Path) -> Path:
    """A dump whose path and whose allocation site both carry ``HOSTILE``."""
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(8), site=Site(f"/w/{HOSTILE}.py", 3, HOSTILE)))
    folder, name = HOSTILE.split("/", 1)  # "/" cannot be in a name: split across a folder
    path = root / folder / f"{name}.pickle"
    return write_dump(path, builder.build(), sidecar=make_sidecar("oom", rank=1, step=40))


def _check(page: str, data_id: str, escaped: str | None = ESCAPED) -> object:
    """The page holds the hostile text only escaped, and its data reads back unchanged."""
    assert "<!--" not in page
    assert "\u2028" not in page
    assert "\u2029" not in page
    assert page.count("</script>") == 2  # the data element's own end and the code's
    if escaped is not None:
        assert escaped in page
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
    assert json.dumps(SHOWN)[1:-1] in json.dumps(document)

    write_journals(tmp_path, ranks=2, lines=3, leak_rank=None)
    overview = render_overview(build_overview(tmp_path, workers=1), link_base=tmp_path)
    data = _check(overview, "overview-data", escaped=None)
    assert isinstance(data, dict)
    assert data["facts"]["1"]["dumps"] == [quote(f"{HOSTILE}.pickle", safe="/")]


def test_escaping_is_exactly_the_json_escapes() -> None:
    """Each dangerous character becomes its JSON ``\\uXXXX`` escape and nothing else changes."""
    text = json_in_script({"a": "<>&\u2028\u2029é"})
    assert text == '{"a":"\\u003c\\u003e\\u0026\\u2028\\u2029\\u00e9"}'
    assert json.loads(text) == {"a": "<>&\u2028\u2029é"}


def _overview_page(root: Path, folder: str) -> str:
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(8), site=Site("/w/train.py", 3, "step")))
    write_dump(
        root / folder / "rank1_pid3.pickle", builder.build(), sidecar=make_sidecar("oom", rank=1)
    )
    write_journals(root, ranks=2, lines=3, leak_rank=None)
    return render_overview(build_overview(root, workers=1), link_base=root)


@pytest.mark.parametrize("folder", ["javascript:alert(7)", "data:text", "https:x"])
def test_overview_links_are_relative_encoded_paths(tmp_path: Path, folder: str) -> None:
    """A folder named like a URL scheme is linked as a relative path, never as that scheme."""
    page = _overview_page(tmp_path, folder)
    found = re.search(r'<script type="application/json" id="overview-data">(.*?)</script>', page)
    assert found is not None
    (link,) = json.loads(found[1])["facts"]["1"]["dumps"]
    assert ":" not in link
    assert link == quote(f"{folder}/rank1_pid3.pickle", safe="/")


def _csp_of(page: str) -> str:
    found = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', page)
    assert found is not None
    return found[1]


def _sha(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_both_pages_allow_only_their_own_script_and_style(tmp_path: Path) -> None:
    """Each page's CSP names the hash of its one inline script and style, and no
    'unsafe-inline': a script or style slipped into the page would not run."""
    builder = ReportBuilder()
    builder.add(load_dump(_hostile_dump(tmp_path)))
    for page in (builder.html(), _overview_page(tmp_path / "run", "oom")):
        policy = _csp_of(page)
        assert "unsafe-inline" not in policy
        assert "default-src 'none'" in policy
        script = re.findall(r"<script>(.*?)</script>", page, re.S)
        style = re.findall(r"<style>(.*?)</style>", page, re.S)
        assert len(script) == 1
        assert len(style) == 1
        assert f"script-src {_sha(script[0])};" in policy
        assert f"style-src {_sha(style[0])};" in policy
