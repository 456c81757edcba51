"""Reading allocator settings as PyTorch reads them: the conf string, ``--set``, a snapshot.

A ``PYTORCH_CUDA_ALLOC_CONF`` string (Ascend: ``PYTORCH_NPU_ALLOC_CONF``) is lexed into tokens
at ``,`` ``:`` ``[`` ``]`` with spaces dropped, then read key by key with the same limits and
error wording PyTorch has (mirrors ``CUDAAllocatorConfig::lexArgs`` / ``parseArgs`` /
``parseRoundUpPower2Divisions`` in ``c10/cuda/CUDAAllocatorConfig.cpp`` and, from 2.9,
``c10/core/AllocatorConfig.cpp``), by the rules of the release that wrote the dump
(:mod:`._rules`). Pinned-memory, lock and OOM-policy options are accepted and ignored, like an
unknown ``backend`` would be by a model that only knows the native allocator. A snapshot's
``allocator_settings`` dict (what ``_snapshot()`` reports) converts back into the same value,
so a replay runs under exactly the settings the dump was taken with; a key the model does not
know is reported, never a reason to drop the keys it does know.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from memforensics.allocator._blocks import K_LARGE_BUFFER, K_MIN_LARGE_ALLOC
from memforensics.allocator._settings import (
    NO_LIMIT,
    ROUNDUP_INTERVALS,
    AllocatorSettings,
    MiB,
)

# How a given PyTorch release reads its allocator conf string: the rules that changed.
#
# The keys and limits moved between releases; a dump is read by the rules of the torch that
# wrote it (its sidecar's ``torch_version``), else by the newest ones known here (2.13). Each
# rule names the release it first shipped in, from PyTorch's history of
# ``c10/cuda/CUDAAllocatorConfig.cpp`` and ``c10/core/AllocatorConfig.cpp``:
#
# - up to 2.8 ``CUDAAllocatorConfig::parseMaxSplitSize`` (and ``max_non_split_rounding_mb``,
#   added in 2.6) required a value ``> 20`` (kLargeBuffer in MiB); 2.9 moved parsing into
#   ``AcceleratorAllocatorConfig`` (``c10/core/AllocatorConfig.cpp``), which accepts ``>= 20``.
# - ``roundup_power2_divisions:[...,>:N]`` filled from the last interval named, overwriting it,
#   up to 2.9; the fix of pytorch/pytorch#165304 (first in 2.10) fills from the interval after
#   it.
# - ``large_segment_size_mb`` (pytorch/pytorch#172056, first in 2.11) must be ``> 10``
#   (kMinLargeAlloc in MiB); from then on ``max_split_size_mb`` and
#   ``max_non_split_rounding_mb`` must be at least the large segment size, and the latter
#   defaults to it.
# - ``per_process_memory_fraction`` (in ``[0, 1]``), ``throw_on_cudamalloc_oom`` and
#   ``pinned_free_catch_all`` are ``CUDAAllocatorConfig`` keys of 2.13.

NEWEST = (2, 13)
"""The newest release whose parser these rules were checked against."""


@dataclass(frozen=True, slots=True)
class ConfRules:
    """What one release's parser accepts where releases differ."""

    version: tuple[int, int] | None
    split_minimum_inclusive: bool  # ``max_split_size_mb:20`` is valid
    divisions_after_last: bool  # ``>`` fills from the interval after the last one named
    large_segment_key: bool  # ``large_segment_size_mb`` exists and bounds the split sizes

    def label(self) -> str:
        """``torch 2.9``, or ``torch 2.13 rules, version unknown``."""
        if self.version is None:
            return f"torch {NEWEST[0]}.{NEWEST[1]} rules, version unknown"
        return f"torch {self.version[0]}.{self.version[1]}"


def rules_for(torch_version: object) -> ConfRules:
    """The rules of the release named by ``torch_version`` (``"2.9.1+cu128"``); the newest
    known when it is absent or unreadable."""
    version = _major_minor(torch_version)
    at = version or NEWEST
    return ConfRules(
        version=version,
        split_minimum_inclusive=at >= (2, 9),
        divisions_after_last=at >= (2, 10),
        large_segment_key=at >= (2, 11),
    )


def _major_minor(torch_version: object) -> tuple[int, int] | None:
    if not isinstance(torch_version, str):
        return None
    found = re.match(r"\s*(\d+)\.(\d+)", torch_version)
    return (int(found[1]), int(found[2])) if found else None


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
        "pinned_max_round_threshold_mb",
        "pinned_max_cached_size_mb",
        "pinned_free_catch_all",
        "throw_on_cudamalloc_oom",
        "graph_capture_record_stream_reuse",
        "expandable_segments_handle_type",
        "expandable_segments_reserve",
        "expandable_segments_reserve_by_class",
    }
)
"""Keys PyTorch accepts that do not decide placement: read past, their values unchecked."""


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


def _split_megabytes(key: str, token: str, minimum: int, rules: ConfRules) -> int:
    """``max_split_size_mb`` / ``max_non_split_rounding_mb``: at least ``minimum`` bytes (the
    large segment size, 20 MiB unless set) from 2.9 on, above 20 MiB before (:mod:`._rules`)."""
    number = _int(key, token)
    bound = minimum // MiB
    if number < bound or (number == bound and not rules.split_minimum_inclusive):
        relation = ">=" if rules.split_minimum_inclusive else ">"
        raise SettingsError(f"CachingAllocator option {key} too small, must be {relation} {bound}")
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


@dataclass
class ConfNotes:
    """What a lenient read set aside: keys the rules do not know, values they refuse."""

    unknown: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def apply_tokens(
    settings: AllocatorSettings,
    tokens: list[str],
    rules: ConfRules | None = None,
    notes: ConfNotes | None = None,
) -> AllocatorSettings:
    """Mirrors ``CUDAAllocatorConfig::parseArgs`` over the placement keys, by ``rules``
    (default: the newest release's).

    Without ``notes`` the first unknown key or bad value raises :class:`SettingsError`, as
    PyTorch refuses to start; with ``notes`` it is recorded there and skipped, and every other
    key still applies (a recorded conf string read by a model that knows fewer keys).
    """
    rules = rules or rules_for(None)
    cursor = _Tokens(tokens)
    if rules.large_segment_key:  # 2.11+ reads the large segment size before the split sizes
        try:
            settings = _large_segment_first(settings, tokens, rules)
        except SettingsError as error:
            if notes is None:
                raise
            notes.refused.append(f"large_segment_size_mb: {error}")
    while cursor.i < len(tokens):
        start = cursor.i
        key = tokens[cursor.i]
        cursor.i += 1
        try:
            settings = _apply_key(settings, key, cursor, rules)
        except SettingsError as error:
            if notes is None:
                raise
            if str(error).startswith(_UNKNOWN):
                notes.unknown.append(key)
            else:
                notes.refused.append(f"{key}: {error}")
            cursor.i = _skip_value(tokens, start + 1)
        if cursor.i < len(tokens):
            cursor.expect(",")
    return settings


_UNKNOWN = "Unrecognized key"


def _apply_key(
    settings: AllocatorSettings, key: str, cursor: _Tokens, rules: ConfRules
) -> AllocatorSettings:
    """One ``key:value`` read at the cursor (just past the key)."""
    segment = settings.large_segment_size if rules.large_segment_key else K_LARGE_BUFFER
    if key == "max_split_size_mb":
        size = _split_megabytes(key, cursor.value(key), segment, rules)
        return replace(settings, max_split_size=size)
    if key == "max_non_split_rounding_mb":
        size = _split_megabytes(key, cursor.value(key), segment, rules)
        return replace(settings, max_non_split_rounding_size=size)
    if key == "large_segment_size_mb" and rules.large_segment_key:
        cursor.value(key)  # read before every other key (_large_segment_first)
        return settings
    if key == "garbage_collection_threshold":
        return replace(settings, garbage_collection_threshold=_threshold(cursor.value(key)))
    if key == "roundup_power2_divisions":
        divisions = _divisions(cursor, settings.roundup_power2_divisions, rules)
        return replace(settings, roundup_power2_divisions=divisions)
    if key == "expandable_segments":
        return replace(settings, expandable_segments=_bool(key, cursor.value(key)))
    if key == "per_process_memory_fraction":
        return replace(settings, memory_fraction=_fraction(cursor.value(key)))
    if key in _IGNORED:
        cursor.value(key)
        return settings
    raise SettingsError(f"{_UNKNOWN} '{key}' in CUDA allocator config ({rules.label()})")


def _large_segment_first(
    settings: AllocatorSettings, tokens: list[str], rules: ConfRules
) -> AllocatorSettings:
    """``large_segment_size_mb`` (``parseLargeSegmentSize``): more than 10 (kMinLargeAlloc in
    MiB); ``max_non_split_rounding_mb`` defaults to it, the split sizes are bounded by it."""
    for i, token in enumerate(tokens[:-2]):
        after_comma = i == 0 or tokens[i - 1] == ","
        if token == "large_segment_size_mb" and tokens[i + 1] == ":" and after_comma:
            number = _int(token, tokens[i + 2])
            if number <= K_MIN_LARGE_ALLOC // MiB:
                raise SettingsError(
                    f"CachingAllocator option large_segment_size_mb must be >"
                    f" {K_MIN_LARGE_ALLOC // MiB} MB ({rules.label()})"
                )
            size = number * MiB
            rounding = settings.max_non_split_rounding_size
            if rounding == settings.large_segment_size:
                rounding = size
            settings = replace(
                settings, large_segment_size=size, max_non_split_rounding_size=rounding
            )
    return settings


def _skip_value(tokens: list[str], i: int) -> int:
    """The index of the ``,`` ending the value that starts at ``i`` (brackets nest)."""
    depth = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "[":
            depth += 1
        elif token == "]":
            depth -= 1
        elif token == "," and depth <= 0:
            return i
        i += 1
    return i


def _fraction(token: str) -> float:
    """``per_process_memory_fraction``: a share of the device in ``[0, 1]``."""
    try:
        value = float(token)
    except ValueError:
        raise SettingsError(f"per_process_memory_fraction: {token!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise SettingsError("per_process_memory_fraction is invalid, set it in [0.0, 1.0]")
    return value


def _threshold(token: str) -> float:
    try:
        value = float(token)
    except ValueError:
        raise SettingsError(f"garbage_collection_threshold: {token!r} is not a number") from None
    if not 0.0 < value < 1.0 or math.isnan(value):
        raise SettingsError("garbage_collect_threshold must be between 0.0 and 1.0 (exclusive)")
    return value


def _divisions(cursor: _Tokens, current: tuple[int, ...], rules: ConfRules) -> tuple[int, ...]:
    """Mirrors ``parseRoundUpPower2Divisions``: one value for all, or ``[size:div,...,>:div]``.

    ``>`` fills from the interval after the last one named (2.10+), or from that interval
    itself, overwriting it (up to 2.9; :mod:`._rules`).
    """
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
        if interval == ">":
            start = last_index + 1 if rules.divisions_after_last else last_index
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


def apply_conf(settings: AllocatorSettings, conf: str) -> tuple[AllocatorSettings, list[str]]:
    """``conf`` read over ``settings``, as ``CUDAAllocatorConfig::parseArgs`` reads a string
    over the settings it holds (``torch.cuda.memory._set_allocator_settings``, or the
    environment when the allocator is first used): the new settings, and each key the model
    does not know or value it refuses, skipped (every other key still applies)."""
    notes = ConfNotes()
    found = apply_tokens(settings, lex(conf), None, notes)
    return found, [*notes.unknown, *notes.refused]


def parse_conf(conf: str | None, rules: ConfRules | None = None) -> AllocatorSettings:
    """Settings from a ``PYTORCH_CUDA_ALLOC_CONF`` string (None or empty: the defaults)."""
    if not conf:
        return AllocatorSettings()
    return apply_tokens(AllocatorSettings(), lex(conf), rules)


@dataclass(frozen=True)
class RecordedSettings:
    """A snapshot's settings as the torch that wrote it read them, and what the model could
    not: ``unknown`` keys and ``refused`` values (each kept out, every other key kept)."""

    settings: AllocatorSettings
    rules: ConfRules
    unknown: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()

    def notes(self) -> list[str]:
        """One sentence per key the model set aside (empty when it read everything)."""
        found = [
            f"allocator setting {key!r} is unknown to this model ({self.rules.label()}):"
            " ignored, the replay may differ where it matters"
            for key in self.unknown
        ]
        found += [f"allocator setting refused ({self.rules.label()}): {r}" for r in self.refused]
        return found


def from_snapshot(raw: object, rules: ConfRules | None = None) -> AllocatorSettings | None:
    """Settings from a snapshot's ``allocator_settings``; None when absent or unreadable."""
    recorded = read_snapshot_settings(raw, rules)
    return recorded.settings if recorded is not None else None


def read_snapshot_settings(raw: object, rules: ConfRules | None = None) -> RecordedSettings | None:
    """A snapshot's ``allocator_settings`` read by ``rules`` (those of the torch that wrote it:
    :func:`~._rules.rules_for` its ``torch_version``; default the newest); None when absent or
    unreadable.

    The parsed fields win over the conf string (they are what the allocator used); the conf
    string fills what older PyTorch does not report (``max_non_split_rounding_mb``). A key the
    model does not know, or a value it refuses, is set aside and reported; the rest is kept.
    """
    if not isinstance(raw, Mapping):
        return None
    rules = rules or rules_for(None)
    conf = raw.get("PYTORCH_CUDA_ALLOC_CONF")
    notes = ConfNotes()
    settings = AllocatorSettings()
    if isinstance(conf, str) and conf:
        try:
            settings = apply_tokens(settings, lex(conf), rules, notes)
        except SettingsError as error:  # malformed beyond one key: the separators themselves
            notes.refused.append(str(error))
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
    return RecordedSettings(settings, rules, tuple(notes.unknown), tuple(notes.refused))


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


def apply_assignment(
    settings: AllocatorSettings, assignment: str, rules: ConfRules | None = None
) -> AllocatorSettings:
    """``settings`` with a ``key=value`` (or ``key:value``) from ``--set`` applied."""
    key, sep, value = assignment.partition("=")
    if not sep:
        key, sep, value = assignment.partition(":")
    if not sep or not key.strip() or not value.strip():
        raise SettingsError(f"expected KEY=VALUE, got {assignment!r}")
    return apply_tokens(settings, lex(f"{key.strip()}:{value.strip()}"), rules)
