"""Answers as data: a result's JSON comes from its dataclass fields, and reads back into it.

Every command's answer is a frozen dataclass. Its JSON object is built here from the fields, in
their order, never typed by hand: a field's key is its attribute name unless its metadata says
otherwise (``field(metadata=json_key("other"))``), and a field marked ``metadata=NOT_IN_JSON``
(an object only the text needs, such as a whole call tree's internals) is left out and takes its
default when read back. :func:`from_json` is the exact inverse, checked against the field types,
so the CLI's cache can keep an answer as plain JSON and hand back the same typed value, and a
damaged or foreign entry is refused (:class:`SchemaError`) rather than trusted.

:func:`document` puts the answer's ``"schema": N`` first; :func:`json_keys` lists every key a
result can hold, for docs/json.md.

The ``schema`` rule: adding keys keeps N; renaming or removing a key bumps it.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import PurePath
from typing import Any, Literal, TypeVar, Union

__all__ = [
    "NOT_IN_JSON",
    "SchemaError",
    "document",
    "from_json",
    "json_key",
    "json_keys",
    "to_json",
]

_KEY = "json"
NOT_IN_JSON: Mapping[str, Any] = types.MappingProxyType({_KEY: None})
"""Field metadata: the field is not part of the JSON (it must have a default)."""

T = TypeVar("T")


class SchemaError(ValueError):
    """JSON that does not have the shape of the type it is read as."""


def json_key(name: str) -> Mapping[str, Any]:
    """Field metadata: the field's JSON key is ``name``, not its attribute name."""
    return types.MappingProxyType({_KEY: name})


def to_json(value: Any) -> Any:
    """``value`` as JSON-ready data: a dataclass becomes an object of its fields (keys as the
    metadata says), a tuple or list a list, an enum its value, a path its text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {key: to_json(getattr(value, name)) for name, key, _ in _fields(type(value))}
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Mapping):
        return {_json_name(key): to_json(item) for key, item in value.items()}
    if isinstance(value, (tuple, list, frozenset, set)):
        return [to_json(item) for item in value]
    raise TypeError(f"{type(value).__name__} has no JSON form")


def document(result: Any, schema: int) -> dict[str, Any]:
    """The JSON object a command prints for ``result``: ``"schema": schema`` first, then the
    result's fields."""
    body = to_json(result)
    if not isinstance(body, dict):
        raise TypeError("a command's result must be a dataclass")
    return {"schema": schema, **body}


def from_json(kind: type[T], data: Any) -> T:
    """The ``kind`` value whose :func:`to_json` is ``data`` (SchemaError where it is not)."""
    return typing.cast(T, _read(kind, data, kind.__name__))


def json_keys(kind: type) -> list[tuple[str, str]]:
    """Every key path a ``kind`` object can hold (``oom.stack[]``, ``top_sites[].bytes``) with
    its type in words, in field order, for the docs."""
    found: list[tuple[str, str]] = []
    _walk(kind, "", found, frozenset())
    return found


@cache
def _fields(kind: type) -> tuple[tuple[str, str, Any], ...]:
    """``(attribute, JSON key, resolved type)`` of each JSON field of the dataclass ``kind``."""
    hints = typing.get_type_hints(kind)
    rows = []
    for spec in dataclasses.fields(kind):
        key = spec.metadata.get(_KEY, spec.name)
        if key is not None:
            rows.append((spec.name, key, hints[spec.name]))
    return tuple(rows)


def _json_name(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key)
    raise TypeError(f"a JSON key must be a string or an integer, not {type(key).__name__}")


def _read(kind: Any, data: Any, where: str) -> Any:
    """``data`` read as ``kind``; ``where`` names the place for the error."""
    if kind is Any or kind is object:
        return data
    origin = typing.get_origin(kind)
    if origin is Union or origin is types.UnionType:
        return _read_union(typing.get_args(kind), data, where)
    if origin is Literal:
        if data not in typing.get_args(kind):
            raise SchemaError(f"{where}: {data!r} is not one of {typing.get_args(kind)}")
        return data
    if origin is tuple:
        return _read_tuple(typing.get_args(kind), data, where)
    if origin in (list, Sequence):
        (item,) = typing.get_args(kind) or (Any,)
        return [_read(item, value, f"{where}[]") for value in _list(data, where)]
    if origin in (dict, Mapping):
        key_kind, value_kind = typing.get_args(kind) or (str, Any)
        if not isinstance(data, dict):
            raise SchemaError(f"{where}: expected an object")
        return {
            _read_key(key_kind, key, where): _read(value_kind, value, f"{where}.{key}")
            for key, value in data.items()
        }
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        return _read_dataclass(kind, data, where)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        try:
            return kind(data)
        except ValueError:
            raise SchemaError(f"{where}: {data!r} is not a {kind.__name__}") from None
    return _read_scalar(kind, data, where)


def _read_union(choices: tuple[Any, ...], data: Any, where: str) -> Any:
    if data is None and type(None) in choices:
        return None
    errors = []
    for choice in choices:
        if choice is type(None):
            continue
        try:
            return _read(choice, data, where)
        except SchemaError as exc:
            errors.append(str(exc))
    raise SchemaError("; ".join(errors) or f"{where}: unexpected null")


def _read_tuple(items: tuple[Any, ...], data: Any, where: str) -> tuple[Any, ...]:
    values = _list(data, where)
    if len(items) == 2 and items[1] is Ellipsis:
        return tuple(_read(items[0], value, f"{where}[]") for value in values)
    if len(values) != len(items):
        raise SchemaError(f"{where}: expected {len(items)} items, found {len(values)}")
    return tuple(
        _read(item, value, f"{where}[]") for item, value in zip(items, values, strict=True)
    )


def _read_dataclass(kind: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise SchemaError(f"{where}: expected an object")
    values = {}
    for name, key, hint in _fields(kind):
        if key not in data:
            raise SchemaError(f"{where}: no key {key!r}")
        values[name] = _read(hint, data[key], f"{where}.{key}")
    return kind(**values)


def _read_key(kind: Any, key: str, where: str) -> Any:
    if kind is int:
        try:
            return int(key)
        except ValueError:
            raise SchemaError(f"{where}: key {key!r} is not an integer") from None
    return key


def _read_scalar(kind: Any, data: Any, where: str) -> Any:
    if kind is type(None) or kind is None:
        ok = data is None
    elif kind is float:
        ok = isinstance(data, (int, float)) and not isinstance(data, bool)
        data = float(data) if ok else data
    elif kind is int:
        ok = isinstance(data, int) and not isinstance(data, bool)
    elif kind in (str, bool):
        ok = isinstance(data, kind)
    elif isinstance(kind, type) and issubclass(kind, PurePath):
        ok = isinstance(data, str)
        data = kind(data) if ok else data
    else:
        raise SchemaError(f"{where}: no JSON reading for {kind!r}")
    if not ok:
        raise SchemaError(f"{where}: expected {getattr(kind, '__name__', kind)}, found {data!r}")
    return data


def _list(data: Any, where: str) -> list[Any]:
    if not isinstance(data, list):
        raise SchemaError(f"{where}: expected a list")
    return data


def _walk(kind: Any, prefix: str, found: list[tuple[str, str]], seen: frozenset[type]) -> None:
    """Add the keys of the dataclass ``kind`` under ``prefix`` (a type met again inside
    itself, as a tree's node, is named once)."""
    for _, key, hint in _fields(kind):
        path = f"{prefix}{key}"
        found.append((path, _describe(hint)))
        for inner, suffix in _nested(hint):
            if inner in seen or inner is kind:
                continue
            _walk(inner, f"{path}{suffix}.", found, seen | {kind})


def _nested(hint: Any) -> list[tuple[type, str]]:
    """The dataclasses inside ``hint``, with the suffix that reaches them (``[]`` through a
    list, ``{}`` through an object's values)."""
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return [(hint, "")]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (tuple, list, Sequence):
        return [(inner, "[]" + suffix) for arg in args for inner, suffix in _nested(arg)]
    if origin in (dict, Mapping) and args:
        return [(inner, "{}" + suffix) for inner, suffix in _nested(args[1])]
    if origin is Union or origin is types.UnionType:
        return [found for arg in args for found in _nested(arg)]
    return []


def _describe(hint: Any) -> str:
    """A type in JSON's words: ``integer or null``, ``list of object``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Union or origin is types.UnionType:
        return " or ".join(_describe(arg) for arg in args)
    if origin is Literal:
        return " | ".join(repr(arg) for arg in args).replace("'", '"')
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"list of {_describe(args[0])}"
        return f"[{', '.join(_describe(arg) for arg in args)}]"
    if origin in (list, Sequence):
        return f"list of {_describe(args[0]) if args else 'any'}"
    if origin in (dict, Mapping):
        return f"object of {_describe(args[1]) if args else 'any'}"
    if dataclasses.is_dataclass(hint):
        return "object"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return " | ".join(f'"{member.value}"' for member in hint)
    if isinstance(hint, type) and issubclass(hint, PurePath):
        return "string"
    return {
        int: "integer",
        float: "number",
        str: "string",
        bool: "boolean",
        type(None): "null",
    }.get(hint, "any")
