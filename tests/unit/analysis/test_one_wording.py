"""One fact, one wording: a long site, the caller under it and a change of size read the same in
every table that prints them (summary, diff, leaks, overview, the peak's call tree)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memforensics._text import SCREEN_WIDTH
from memforensics._units import format_bytes, format_signed_bytes
from memforensics.analysis import diff_dumps, summarize
from memforensics.analysis.compare import Leaks, leaks_text
from memforensics.analysis.compare.leaks import RankWindows, SiteTrend
from memforensics.analysis.compare.text import diff_text
from memforensics.analysis.dump import dump_from_snapshot, short_site
from memforensics.analysis.filled import KINDS, CallNode
from memforensics.analysis.filled.text import tree_lines
from memforensics.analysis.folder import build_overview, overview_text
from memforensics.analysis.summary import summary_text
from memforensics.testing import Block, MiB, Site, SnapshotBuilder, write_journals

# A Hugging Face line reached from the user's script: longer than a table's site column.
LIBRARY = Site(
    "/venv/lib/python3.12/site-packages/transformers/models/llama/modeling_llama.py", 300, "forward"
)
MARK = "modeling_llama.py:300 forward"


def _texts() -> dict[str, str]:
    """summary, diff and leaks of the same library site."""
    before, after = SnapshotBuilder(), SnapshotBuilder()
    before.segment(Block(MiB(2), site=LIBRARY))
    after.segment(Block(MiB(2), site=LIBRARY), Block(MiB(30), site=LIBRARY))
    old, new = dump_from_snapshot(before.build()), dump_from_snapshot(after.build())
    trend = SiteTrend(0, str(LIBRARY), (1, 3, 5), (MiB(2), MiB(4), MiB(6)), MiB(1), 0, 1.0, True)
    return {
        # the tables, under the diagnosis (whose sentences name the site too)
        "summary": summary_text(summarize(new), verbose=True).split("\n\n", 1)[1],
        "diff": diff_text(diff_dumps(old, new)),
        "leaks": leaks_text(Leaks("run", (RankWindows(0, (1, 3, 5)),), (trend,))),
    }


def test_summary_diff_and_leaks_cut_a_long_site_the_same_way() -> None:
    """Each table names the kind of a site's bytes, then the site's end behind "…" (the file and
    function kept, the prefix dropped), every line in 80 columns."""
    site = str(LIBRARY)
    for name, text in _texts().items():
        assert all(len(line) <= SCREEN_WIDTH for line in text.splitlines()), name
        lines = text.split("call tree")[0].splitlines()  # the tree names the line too, no kind
        at = [i for i, line in enumerate(lines) if line.endswith(MARK) and "caller" not in line]
        assert at, name
        for i in at:
            shown = lines[i][lines[i].rindex("…") :]
            assert site.endswith(shown[1:]), (name, shown)
            assert any(kind in f"{lines[i - 1]} {lines[i]}".split() for kind in KINDS), name
        assert site not in text, name


def test_the_caller_line_reads_the_same_under_summary_and_diff() -> None:
    """The ``← caller`` line under a library site is the same words in summary and diff."""
    texts = _texts()
    callers = {
        name: [line.strip() for line in texts[name].splitlines() if "← caller" in line]
        for name in ("summary", "diff")
    }
    assert callers["summary"]
    assert callers["summary"] == callers["diff"]


def test_the_call_tree_cuts_a_long_frame_as_the_tables_do() -> None:
    """A frame name too long for its indent is cut the way a table cuts a site, the line
    (printed indented by two) in 80 columns."""
    root = CallNode("all", MiB(8), 1, (CallNode(str(LIBRARY) * 2, MiB(8), 1),))
    [line] = tree_lines(root)
    assert line.endswith(short_site(str(LIBRARY) * 2, 66))
    assert len(line) == SCREEN_WIDTH - 2


@pytest.mark.parametrize("count", [-(3 << 30), -1, 0, 1, 1 << 20, (5 << 30) + 7])
def test_a_signed_size_shows_its_direction(count: int) -> None:
    """A change is ``+`` when it grew, ``-`` when it shrank, unsigned at zero, and otherwise
    reads as format_bytes of its size."""
    text = format_signed_bytes(count)
    assert text.startswith("+") == (count > 0)
    assert text.startswith("-") == (count < 0)
    assert text.lstrip("+-") == format_bytes(abs(count))
    assert format_signed_bytes(None) == format_bytes(None)


def test_diff_and_overview_print_a_change_of_size_the_same_way(tmp_path: Path) -> None:
    """The overview's difference to the healthy peer and diff's change use one formatter:
    a grown figure and an unchanged one read as format_signed_bytes says, in both."""
    write_journals(tmp_path, ranks=16, lines=50, leak_rank=5)
    view = build_overview(tmp_path, workers=1)
    assert view.comparison is not None
    grown = view.comparison.differences["allocated_bytes"]
    same = view.comparison.differences["external_bytes"]
    assert grown is not None
    assert grown > 0
    assert same == 0
    text = overview_text(view)
    assert f"allocated {format_signed_bytes(grown)}," in text
    assert f"external {format_signed_bytes(same)}," in text
    builder = SnapshotBuilder()
    builder.segment(Block(MiB(4), site=LIBRARY))
    dump = dump_from_snapshot(builder.build())
    assert f"total change {format_signed_bytes(0)}" in diff_text(diff_dumps(dump, dump))
