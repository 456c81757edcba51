"""The call tree names the user's line: the torch op inside it is folded into it, in the text
and in the report, while the JSON tree keeps the op as a marked leaf."""

from __future__ import annotations

import json
import re
from typing import Any

from memforensics.analysis import explain
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.report import ReportBuilder
from memforensics.analysis.schema import to_json
from memforensics.analysis.summary import summary_text
from memforensics.testing import Block, MiB, Site, SnapshotBuilder

_TORCH = "/venv/lib/python3.12/site-packages/torch"
_CALLERS = (
    ("/job/model.py", 230, "forward"),
    (f"{_TORCH}/nn/modules/module.py", 1747, "_call_impl"),
    ("/job/train.py", 50, "main"),
    ("/job/train.py", 90, "<module>"),
)
CONV = Site(  # the user's conv line, inside it nn.Conv2d's forward and the op it calls
    "/job/model.py",
    198,
    "forward",
    inside=(
        (f"{_TORCH}/nn/modules/conv.py", 549, "_conv_forward"),
        (f"{_TORCH}/nn/modules/conv.py", 554, "forward"),
        (f"{_TORCH}/nn/modules/module.py", 1747, "_call_impl"),
    ),
    outside=_CALLERS,
)
RELU = Site(
    "/job/model.py",
    200,
    "forward",
    inside=((f"{_TORCH}/nn/functional.py", 1704, "relu"),),
    outside=_CALLERS,
)
LOADER = Site("/job/data.py", 12, "load", outside=(("/job/train.py", 40, "main"),))


def _snapshot() -> dict[str, Any]:
    """480 of 600 MiB (80 %) made by lines 198 and 200, each through a torch op."""
    builder = SnapshotBuilder()
    builder.segment(
        Block(MiB(300), site=CONV), Block(MiB(180), site=RELU), Block(MiB(120), site=LOADER)
    )
    return builder.build()


def test_the_text_tree_names_the_users_lines_not_the_torch_ops() -> None:
    """summary's call tree has a row for each of lines 198 and 200 with its bytes, and no row
    names conv.py or functional.py, the ops those lines called."""
    text = summary_text(explain(dump_from_snapshot(_snapshot())))
    tree = text.split("call tree")[1].splitlines()[1:]
    rows = {re.sub(r"^[\s…]+", "", row.split(" MiB ", 1)[1]): row.split()[0] for row in tree}
    assert rows["/job/model.py:198 forward"] == "300.00"
    assert rows["/job/model.py:200 forward"] == "180.00"
    assert rows["/job/data.py:12 load"] == "120.00"
    assert not any("conv.py" in row or "functional.py" in row for row in tree)


def test_the_json_tree_keeps_the_op_as_a_leaf_marked_library() -> None:
    """--json's tree holds the user's line with the op under it, marked ``library``: the op is
    not lost, and a reader can fold it as the text does."""
    tree = to_json(explain(dump_from_snapshot(_snapshot())))["peak"]["tree"]
    nodes: list[dict[str, Any]] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node["children"])
    [line] = [node for node in nodes if node["name"] == "/job/model.py:198 forward"]
    [op] = line["children"]
    assert op["library"] is True
    assert op["name"] == f"{_TORCH}/nn/modules/conv.py:549 _conv_forward (+2 library frames)"
    assert op["bytes"] == line["bytes"] == MiB(300)
    assert not any(node["library"] for node in nodes if node["name"].startswith("/job/"))


def test_the_report_icicle_draws_the_users_lines_holding_the_ops() -> None:
    """The report's tree has a box for each user's line and none for a torch op: the op is
    named in the line's ``calls`` (its tooltip) instead."""
    builder = ReportBuilder()
    builder.add(dump_from_snapshot(_snapshot()))
    html = builder.html()
    found = re.search(r'id="mf-data">(.*?)</script>', html, re.S)
    assert found is not None
    sections = json.loads(found.group(1))["dumps"][0]["devices"][0]["sections"]
    [tree] = [section for section in sections if section["id"].endswith("tree")]
    boxes: list[dict[str, Any]] = []
    stack = [tree["data"]["root"]]
    while stack:
        box = stack.pop()
        boxes.append(box)
        stack.extend(box["children"])
    names = {box["name"]: box for box in boxes}
    assert names["/job/model.py:198 forward"]["children"] == []
    assert names["/job/model.py:198 forward"]["calls"] == [
        f"{_TORCH}/nn/modules/conv.py:549 _conv_forward (+2 library frames)"
    ]
    assert names["/job/model.py:200 forward"]["calls"] == [f"{_TORCH}/nn/functional.py:1704 relu"]
    assert names["/job/model.py:200 forward"]["bytes"] == MiB(180)
    assert not any(name.startswith(_TORCH) for name in names)
