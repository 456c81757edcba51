"""Reading a ``PYTORCH_CUDA_ALLOC_CONF`` string as PyTorch reads it: lex, then parse key by key.

Mirrors ``CUDAAllocatorConfig::lexArgs`` / ``parseArgs`` / ``parseRoundUpPower2Divisions`` in
``c10/cuda/CUDAAllocatorConfig.cpp``, with the same limits and error wording. Split from
:mod:`memforensics.allocator._settings`, which holds the value these produce: the grammar and
its checks are a seam of their own there too.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memforensics.allocator._settings import AllocatorSettings


MiB = 1 << 20
K_LARGE_BUFFER = 20 * MiB  # kLargeBuffer
ROUNDUP_INTERVALS = 16  # kRoundUpPowerOfTwoIntervals: 1 MiB .. 64 GiB
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
