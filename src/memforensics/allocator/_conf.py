"""Reading allocator settings as PyTorch reads them: the conf string, ``--set``, a snapshot.

A ``PYTORCH_CUDA_ALLOC_CONF`` string (Ascend: ``PYTORCH_NPU_ALLOC_CONF``) is lexed into tokens
at ``,`` ``:`` ``[`` ``]`` with spaces dropped, then read key by key with the same limits and
error wording PyTorch has (mirrors ``CUDAAllocatorConfig::lexArgs`` / ``parseArgs`` /
``parseRoundUpPower2Divisions`` in ``c10/cuda/CUDAAllocatorConfig.cpp``). Pinned-memory and
lock options are accepted and ignored, like an unknown ``backend`` would be by a model that
only knows the native allocator. A snapshot's ``allocator_settings`` dict (what ``_snapshot()``
reports) converts back into the same value, so a replay runs under exactly the settings the
dump was taken with.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from memforensics.allocator._blocks import K_LARGE_BUFFER
from memforensics.allocator._settings import (
    NO_LIMIT,
    ROUNDUP_INTERVALS,
    AllocatorSettings,
    MiB,
)

_IGNORED = frozenset(
    {
        "backend",
        "release_lock_on_cudamalloc",
        "release_lock_on_hipmalloc",
        "pinned_use_cuda_host_register",
        "pinned_use_hip_host_register",
        "pinned_num_register_threads",
        "pinned_reserve_segment_size_mb",
        "pinned_use_background_threads",
        "graph_capture_record_stream_reuse",
        "expandable_segments_handle_type",
    }
)


class SettingsError(ValueError):
    """A conf string PyTorch itself would refuse (the message says why)."""


def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def lex(conf: str) -> list[str]:
    """Mirrors ``CUDAAllocatorConfig::lexArgs``: separators are tokens, spaces vanish."""
    tokens: list[str] = []
    buffer: list[str] = []
    for char in conf:
        if char in ",:[]":
            if buffer:
                tokens.append("".join(buffer))
                buffer.clear()
            tokens.append(char)
        elif char != " ":
            buffer.append(char)
    if buffer:
        tokens.append("".join(buffer))
    return tokens


class _Tokens:
    """A cursor over lexed tokens with PyTorch's error wording."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.i = 0

    def expect(self, char: str) -> None:
        if self.i >= len(self.tokens) or self.tokens[self.i] != char:
            raise SettingsError(f"Error parsing CachingAllocator settings, expected {char}")
        self.i += 1

    def value(self, key: str) -> str:
        self.expect(":")
        if self.i >= len(self.tokens):
            raise SettingsError(f"Error, expecting {key} value")
        token = self.tokens[self.i]
        self.i += 1
        return token


def _megabytes(key: str, token: str) -> int:
    """A ``*_mb`` value: must exceed 20 (kLargeBuffer in MiB), as PyTorch checks."""
    number = _int(key, token)
    if number <= K_LARGE_BUFFER // MiB:
        raise SettingsError(f"CachingAllocator option {key} too small, must be > 20")
    return number * MiB


def _int(key: str, token: str) -> int:
    try:
        return int(token)
    except ValueError:
        raise SettingsError(f"{key}: {token!r} is not an integer") from None


def _bool(key: str, token: str) -> bool:
    if token not in ("True", "False"):
        raise SettingsError(f"Expected a single True/False argument for {key}")
    return token == "True"


def apply_tokens(settings: AllocatorSettings, tokens: list[str]) -> AllocatorSettings:
    """Mirrors ``CUDAAllocatorConfig::parseArgs`` over the placement keys."""
    cursor = _Tokens(tokens)
    while cursor.i < len(tokens):
        key = tokens[cursor.i]
        cursor.i += 1
        if key == "max_split_size_mb":
            settings = replace(settings, max_split_size=_megabytes(key, cursor.value(key)))
        elif key == "max_non_split_rounding_mb":
            size = _megabytes(key, cursor.value(key))
            settings = replace(settings, max_non_split_rounding_size=size)
        elif key == "large_segment_size_mb":
            size = _int(key, cursor.value(key)) * MiB
            if size <= 0:
                raise SettingsError("large_segment_size_mb must be positive")
            settings = replace(settings, large_segment_size=size)
        elif key == "garbage_collection_threshold":
            settings = replace(settings, garbage_collection_threshold=_threshold(cursor.value(key)))
        elif key == "roundup_power2_divisions":
            divisions = _divisions(cursor, settings.roundup_power2_divisions)
            settings = replace(settings, roundup_power2_divisions=divisions)
        elif key == "expandable_segments":
            settings = replace(settings, expandable_segments=_bool(key, cursor.value(key)))
        elif key in _IGNORED:
            cursor.value(key)
        else:
            raise SettingsError(f"Unrecognized CachingAllocator option: {key}")
        if cursor.i < len(tokens):
            cursor.expect(",")
    return settings


def _threshold(token: str) -> float:
    try:
        value = float(token)
    except ValueError:
        raise SettingsError(f"garbage_collection_threshold: {token!r} is not a number") from None
    if not 0.0 < value < 1.0 or math.isnan(value):
        raise SettingsError("garbage_collect_threshold must be between 0.0 and 1.0 (exclusive)")
    return value


def _divisions(cursor: _Tokens, current: tuple[int, ...]) -> tuple[int, ...]:
    """Mirrors ``parseRoundUpPower2Divisions``: one value for all, or ``[size:div,...,>:div]``."""
    cursor.expect(":")
    tokens = cursor.tokens
    if cursor.i >= len(tokens):
        raise SettingsError("Error, expecting roundup_power2_divisions value")
    values = list(current)
    if tokens[cursor.i] != "[":
        number = _int("roundup_power2_divisions", tokens[cursor.i])
        cursor.i += 1
        if not _power_of_two(number):
            raise SettingsError("For roundups, the divisions has to be power of 2")
        return (number,) * ROUNDUP_INTERVALS
    cursor.i += 1
    first, last_index = True, 0
    while cursor.i < len(tokens) and tokens[cursor.i] != "]":
        interval = tokens[cursor.i]
        cursor.i += 1
        number = _int("roundup_power2_divisions", cursor.value("roundup_power2_divisions"))
        if number != 0 and not _power_of_two(number):
            raise SettingsError("For roundups, the divisions has to be power of 2 or 0")
        if interval == ">":  # from the interval after the last one named (PyTorch's own tests)
            start = last_index + 1 if not first else 0
            values[start:] = [number] * (ROUNDUP_INTERVALS - start)
        else:
            size_mb = _int("roundup_power2_divisions", interval)
            if not _power_of_two(size_mb):
                raise SettingsError("For roundups, the intervals have to be power of 2")
            index = min(size_mb.bit_length() - 1, ROUNDUP_INTERVALS - 1)
            if first:
                values[:index] = [number] * index
                first = False
            values[index] = number
            last_index = index
        if cursor.i < len(tokens) and tokens[cursor.i] == ",":
            cursor.i += 1
    cursor.expect("]")
    return tuple(values)


def parse_conf(conf: str | None) -> AllocatorSettings:
    """Settings from a ``PYTORCH_CUDA_ALLOC_CONF`` string (None or empty: the defaults)."""
    if not conf:
        return AllocatorSettings()
    return apply_tokens(AllocatorSettings(), lex(conf))


def from_snapshot(raw: object) -> AllocatorSettings | None:
    """Settings from a snapshot's ``allocator_settings``; None when absent or unreadable.

    The parsed fields win over the conf string (they are what the allocator used); the conf
    string fills what older PyTorch does not report (``max_non_split_rounding_mb``).
    """
    if not isinstance(raw, Mapping):
        return None
    conf = raw.get("PYTORCH_CUDA_ALLOC_CONF")
    try:
        settings = parse_conf(conf) if isinstance(conf, str) else AllocatorSettings()
    except SettingsError:
        settings = AllocatorSettings()
    split = raw.get("max_split_size")
    if isinstance(split, int) and not isinstance(split, bool) and split < _WIDEST:
        settings = replace(settings, max_split_size=NO_LIMIT if split < 0 else split)
    threshold = raw.get("garbage_collection_threshold")
    if isinstance(threshold, int | float) and not isinstance(threshold, bool) and 0 < threshold < 1:
        settings = replace(settings, garbage_collection_threshold=float(threshold))
    expandable = raw.get("expandable_segments")
    if isinstance(expandable, bool):
        settings = replace(settings, expandable_segments=expandable)
    divisions = _snapshot_divisions(raw.get("roundup_power2_divisions"))
    if divisions is not None:
        settings = replace(settings, roundup_power2_divisions=divisions)
    return settings


_WIDEST = 1 << 64
"""A setting read from a snapshot is a C++ size_t or narrower: a wider number is ignored."""


def _snapshot_divisions(raw: object) -> tuple[int, ...] | None:
    """``roundup_power2_divisions`` as a dict ``{"1": 0, ...}`` (newer) or list (older)."""
    values: list[object]
    if isinstance(raw, Mapping):
        if not all(str(key).isascii() and str(key).isdigit() and len(str(key)) < 5 for key in raw):
            return None  # "²" is a digit to isdigit(), not to int()
        values = [raw[key] for key in sorted(raw, key=lambda k: int(str(k)))]
    elif isinstance(raw, list):
        values = list(raw)
    else:
        return None
    if len(values) != ROUNDUP_INTERVALS or not all(
        type(v) is int and 0 <= v < _WIDEST for v in values
    ):
        return None
    return tuple(int(v) for v in values)  # type: ignore[call-overload]


def apply_assignment(settings: AllocatorSettings, assignment: str) -> AllocatorSettings:
    """``settings`` with a ``key=value`` (or ``key:value``) from ``--set`` applied."""
    key, sep, value = assignment.partition("=")
    if not sep:
        key, sep, value = assignment.partition(":")
    if not sep or not key.strip() or not value.strip():
        raise SettingsError(f"expected KEY=VALUE, got {assignment!r}")
    return apply_tokens(settings, lex(f"{key.strip()}:{value.strip()}"))
