"""What a dump is (kind, rank, step, time, OOM facts): from its JSON sidecar, else its path.

The sidecar is the authority, but a run folder on a shared file system after a crash holds dumps
whose sidecar never came, or plain ``torch.cuda.memory._dump_snapshot`` pickles. The folder and
file names memforensics writes (``steps4-7/rank0_pid12.pickle``,
``oom/rank3_pid77_step12_20261130-101112-123456.pickle``) carry enough to place those too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from itertools import repeat
from pathlib import Path
from typing import Any

from memforensics import _layout
from memforensics._errors import SnapshotLoadError
from memforensics._text import printable
from memforensics.analysis.dump.files import read_regular
from memforensics.analysis.dump.model import as_int

# Where a trace records OOMs: the positions of its ``oom`` entries, found once per dump.
#
# Several readers ask where the trace's (last) OOM is: the device choice, the OOM's moment, the
# summary's OOM record. On a million-entry trace without an OOM each backwards walk in Python
# visits every entry; reading the actions in C and searching them there costs a tenth of one.


def trace_actions(trace: list[Any]) -> list[object]:
    """Each entry's ``action`` (None for an entry that is no dict), read in C when it can be."""
    try:
        return list(map(dict.get, trace, repeat("action")))
    except TypeError:  # an entry that is no dict: the careful pass
        return [entry.get("action") if type(entry) is dict else None for entry in trace]


def oom_positions(trace: list[Any], actions: list[object] | None = None) -> tuple[int, ...]:
    """Indices of the trace's ``oom`` entries, oldest first (``actions``: the trace's, when
    already read)."""
    if actions is None:
        actions = trace_actions(trace)
    found: list[int] = []
    start = 0
    while True:
        try:
            index = actions.index("oom", start)
        except ValueError:
            return tuple(found)
        found.append(index)
        start = index + 1


SIDECAR_LIMIT = 4 << 20
"""Bytes a sidecar may have (ours are a few KiB, an OOM's stack included); more is no sidecar."""


@dataclass(frozen=True, slots=True)
class OomRecord:
    """The failed allocation: what was asked for and what the device had left."""

    requested_bytes: int | None
    device_free_bytes: int | None
    device_total_bytes: int | None
    source: str  # "sidecar" or "trace"
    allocation_bytes: int | None = None
    """What the allocator tried to get from the driver (sidecar schema 2; the size PyTorch's
    error text prints). Schema 1 wrote that size as ``requested_bytes``."""


@dataclass(frozen=True, slots=True)
class TrackedTensor:
    """One tensor the training process tracked (the sidecar's ``tensors``): its storage's
    ``address``, its ``offset`` in it and its ``bytes``, its ``kind`` and ``name``."""

    address: int
    offset: int
    bytes: int
    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class DumpMeta:
    """Facts about one dump file; every field may be None when neither source knows it."""

    kind: str | None = None
    rank: int | None = None
    step: int | None = None
    steps: tuple[int, int] | None = None
    created_at: str | None = None
    partial: bool | None = None
    truncated: bool | None = None
    device_index: int | None = None
    hostname: str | None = None
    oom: OomRecord | None = None
    has_sidecar: bool = False
    sidecar: dict[str, Any] = field(default_factory=dict)
    tensors: tuple[TrackedTensor, ...] | None = None
    """The tracked tensors the sidecar lists; None when it lists none (nothing was tracked,
    or a sidecar from before ``tensors``)."""
    predicted: bool = False
    """Written by ``memforensics plan``: a prediction on the CPU, not a GPU's record."""
    context_bytes: int | None = None
    """A planned dump's CUDA context (``plan --context-memory``): device memory outside
    PyTorch the dump accounts for. None for a GPU's dump, whose context is not recorded."""
    oom_expandable: bool | None = None
    """A planned OOM dump's: whether the plan's own run with ``expandable_segments:True`` ran
    out too (None: no such run was made)."""
    allocator_peak_bytes: int | None = None
    """The most bytes the allocator held allocated at once before the dump, by its own
    statistics (``allocated_bytes.all.peak``, since the process began or last reset its
    peaks): the sidecar's, else a planned snapshot's own mark (the figure ``plan`` prints),
    else an OOM record's statistics. It counts each block whole where a trace counts the
    request, and it reaches back before the trace began. None when the dump records none."""

    @property
    def taken_at_oom(self) -> bool:
        """The sidecar says the snapshot was taken at an OOM: it records one, or its kind
        (or the dump's folder) is ``oom``."""
        return self.oom is not None or self.kind == "oom"


def read_sidecar(path: Path) -> dict[str, Any] | None:
    """The sidecar object beside ``path``; None if absent; SnapshotLoadError if unreadable."""
    return read_sidecar_file(_layout.sidecar_path(path))


def read_sidecar_file(side: Path) -> dict[str, Any] | None:
    """The sidecar object in ``side`` (a regular file of at most ``SIDECAR_LIMIT`` bytes, its
    strings made printable); None if absent; SnapshotLoadError if unreadable."""
    shown = printable(str(side))
    try:
        text = read_regular(side, SIDECAR_LIMIT).decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise SnapshotLoadError(f"{shown}: cannot read sidecar ({reason})") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise SnapshotLoadError(f"{shown}: sidecar is not valid JSON") from None
    if not isinstance(data, dict):
        raise SnapshotLoadError(f"{shown}: sidecar is not a JSON object")
    return printable_strings(data)


def printable_strings(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every string in it (keys too, at any depth) made printable: a sidecar is
    whatever the file says, and its hostname or stack reaches a terminal and a page."""
    return {printable(str(key)): _printable_value(value) for key, value in data.items()}


def _printable_value(value: object) -> object:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return printable_strings(value)
    if isinstance(value, list):
        return [_printable_value(item) for item in value]
    return value


def marked_predicted(snapshot: object) -> bool:
    """Whether a snapshot object carries ``plan``'s own mark (a ``_snapshot()`` of a planned
    run, pickled by the script itself with no sidecar)."""
    return isinstance(snapshot, dict) and isinstance(snapshot.get(_layout.PREDICTED_KEY), dict)


def dump_meta(
    path: Path | None, sidecar: dict[str, Any] | None, *, marked: bool = False
) -> DumpMeta:
    """Combine the sidecar (preferred) with what the path says. ``marked``: the snapshot itself
    carries ``plan``'s mark, which says "predicted" as a sidecar's ``predicted`` does."""
    guess = _from_path(path) if path is not None else DumpMeta()
    if sidecar is None:
        return replace(guess, predicted=marked) if marked else guess
    steps = _steps(sidecar.get("steps")) or guess.steps
    kind = sidecar.get("kind")
    created = sidecar.get("created_at")
    hostname = sidecar.get("hostname")
    rank = as_int(sidecar.get("rank"))
    step = as_int(sidecar.get("step"))
    planned = sidecar.get(_layout.PREDICTED)
    return DumpMeta(
        kind=kind if isinstance(kind, str) else guess.kind,
        rank=guess.rank if rank is None else rank,
        step=guess.step if step is None else step,
        steps=steps,
        created_at=created if isinstance(created, str) else guess.created_at,
        partial=_flag(sidecar.get("partial")),
        truncated=_flag(sidecar.get("truncated")),
        device_index=as_int(sidecar.get("device_index")),
        hostname=hostname if isinstance(hostname, str) else None,
        oom=_oom(sidecar.get("oom")),
        has_sidecar=True,
        sidecar=sidecar,
        tensors=_tensors(sidecar.get("tensors")),
        predicted=marked or isinstance(planned, dict),
        context_bytes=as_int(planned.get("context_bytes")) if isinstance(planned, dict) else None,
        oom_expandable=_flag(planned.get(_layout.OOM_EXPANDABLE))
        if isinstance(planned, dict)
        else None,
        allocator_peak_bytes=_allocator_peak(sidecar),
    )


def marked_peak(snapshot: object) -> int | None:
    """The run's peak allocated bytes that ``plan``'s own mark in a snapshot holds (None
    without the mark, or a mark from before it held the peak)."""
    if not marked_predicted(snapshot):
        return None
    assert isinstance(snapshot, dict)
    return _bytes(snapshot[_layout.PREDICTED_KEY].get(_layout.PEAK_ALLOCATED))


def _allocator_peak(sidecar: dict[str, Any]) -> int | None:
    """The allocator's own peak allocated bytes a sidecar records: its own key (capture's and
    plan's), else the statistics an OOM's record carries (a sidecar written before the key)."""
    found = _bytes(sidecar.get(_layout.PEAK_ALLOCATED))
    if found is not None:
        return found
    oom = sidecar.get("oom")
    stats = oom.get("allocator") if isinstance(oom, dict) else None
    return _bytes(stats.get("allocated_bytes.all.peak")) if isinstance(stats, dict) else None


def _bytes(value: object) -> int | None:
    """A count of bytes, or None for anything that is not one (negative, a flag, a string)."""
    found = as_int(value)
    return found if found is not None and found >= 0 else None


def _from_path(path: Path) -> DumpMeta:
    """What the folder and file name say (see :mod:`memforensics._layout`)."""
    folder = path.parent.name
    named = _layout.parse_stem(_layout.snapshot_stem(path.name) or path.stem)
    return DumpMeta(
        kind=_layout.folder_kind(folder),
        rank=named.rank,
        step=named.step,
        steps=_layout.parse_window_folder(folder),
        created_at=named.created_at.isoformat() if named.created_at else None,
    )


def _steps(value: object) -> tuple[int, int] | None:
    if isinstance(value, list | tuple) and len(value) == 2:
        first, last = as_int(value[0]), as_int(value[1])
        if first is not None and last is not None:
            return (first, last)
    return None


def _flag(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _tensors(value: object) -> tuple[TrackedTensor, ...] | None:
    """The sidecar's ``tensors``: each well-formed entry (positive address and bytes, an offset
    of at least 0, a kind and a name); None when the key is absent or not a list."""
    if not isinstance(value, list):
        return None
    found: list[TrackedTensor] = []
    for entry in value:
        if not isinstance(entry, dict):
            continue
        address, offset = as_int(entry.get("address")), as_int(entry.get("offset"))
        size, kind, name = as_int(entry.get("bytes")), entry.get("kind"), entry.get("name")
        if (
            address is not None
            and address > 0
            and offset is not None
            and offset >= 0
            and size is not None
            and size > 0
            and isinstance(kind, str)
        ):
            found.append(
                TrackedTensor(address, offset, size, kind, name if isinstance(name, str) else "")
            )
    return tuple(found)


def _oom(value: object) -> OomRecord | None:
    """Schema 1 and 2. The two sizes are never mixed up: schema 1 wrote the allocator's
    allocation (the observer's size, what the error text prints) as ``requested_bytes``, so it
    is read as the allocation; a schema-2 sidecar without the user's request (no history was
    recorded) leaves the request unknown rather than showing the allocation under its name."""
    if not isinstance(value, dict):
        return None
    requested = as_int(value.get("requested_bytes"))
    allocation = as_int(value.get("allocation_bytes"))
    if "allocation_bytes" not in value:
        requested, allocation = None, requested
    return OomRecord(
        requested_bytes=requested,
        allocation_bytes=allocation,
        device_free_bytes=as_int(value.get("device_free_bytes")),
        device_total_bytes=as_int(value.get("device_total_bytes")),
        source="sidecar",
    )
