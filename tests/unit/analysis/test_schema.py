"""Results as data: JSON derived from dataclass fields, read back exactly, checked."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from memforensics.analysis.schema import (
    NOT_IN_JSON,
    SchemaError,
    document,
    from_json,
    json_key,
    json_keys,
    to_json,
)


@dataclass(frozen=True)
class _Site:
    site: str
    bytes: int


@dataclass(frozen=True)
class _Node:
    name: str
    children: tuple[_Node, ...] = ()


@dataclass(frozen=True)
class _Result:
    file: str
    rank: int | None
    steps: tuple[int, int] | None
    share: float
    sites: tuple[_Site, ...]
    by_rank: dict[int, _Site]
    tree: _Node | None
    kind: str = field(default="oom", metadata=json_key("dump_kind"))
    scratch: object = field(default=None, metadata=NOT_IN_JSON)


def _result() -> _Result:
    return _Result(
        file="a.pickle",
        rank=3,
        steps=(4, 7),
        share=0.5,
        sites=(_Site("x.py:1", 1024), _Site("y.py:2", 2048)),
        by_rank={0: _Site("z.py:3", 1)},
        tree=_Node("root", (_Node("leaf"),)),
        scratch=object(),
    )


def test_json_round_trip_gives_the_same_value_through_real_json_text() -> None:
    """A result written as JSON text and read back equals the result (less its non-JSON fields)."""
    value = _result()
    back = from_json(_Result, json.loads(json.dumps(to_json(value))))
    assert back == _Result(**{**value.__dict__, "scratch": None})


def test_keys_are_field_names_unless_metadata_renames_or_omits_them() -> None:
    """Keys follow the fields in order; metadata renames one and leaves another out."""
    body = to_json(_result())
    assert list(body) == ["file", "rank", "steps", "share", "sites", "by_rank", "tree", "dump_kind"]
    assert body["by_rank"] == {"0": {"site": "z.py:3", "bytes": 1}}


def test_document_puts_the_schema_first() -> None:
    """Every JSON answer starts with its schema number."""
    assert list(document(_result(), 3))[:2] == ["schema", "file"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda body: body.pop("rank"),
        lambda body: body.update(rank="3"),
        lambda body: body.update(steps=[1, 2, 3]),
        lambda body: body["sites"].append({"site": 1, "bytes": 2}),
        lambda body: body.update(share=True),
        lambda body: body.update(by_rank={"x": {"site": "a", "bytes": 1}}),
    ],
)
def test_a_body_of_the_wrong_shape_is_refused(damage: object) -> None:
    """Missing keys, wrong types and wrong lengths raise SchemaError instead of passing through."""
    body = to_json(_result())
    damage(body)  # type: ignore[operator]
    with pytest.raises(SchemaError):
        from_json(_Result, body)


def test_json_keys_list_nested_paths_once_for_recursive_types() -> None:
    """The docs' key list reaches into lists and objects and names a recursive node once."""
    keys = dict(json_keys(_Result))
    assert keys["sites[].bytes"] == "integer"
    assert keys["rank"] == "integer or null"
    assert keys["by_rank{}.site"] == "string"
    assert keys["tree.children"] == "list of object"
    assert "tree.name" in keys
    assert not any(path.startswith("tree.children[].") for path in keys)
    assert "scratch" not in keys
