"""Safe loading: a snapshot file becomes a :class:`Dump` without running any code from it.

``pickle.load`` on an untrusted file can run anything (a reduce to ``os.system``). A snapshot is
only dicts, lists, tuples, strings and numbers, and none of those needs ``find_class``: the C
unpickler only calls it for GLOBAL-style opcodes, so refusing every call there makes loading
safe while it stays as fast as plain ``pickle.load``. Every failure becomes one
:class:`~memforensics.SnapshotLoadError` naming the file, never a traceback.

Two things ``find_class`` alone does not cover. The extension opcodes (``EXT1``/``EXT2``/
``EXT4``) are served from :mod:`copyreg`'s process-wide cache without ``find_class`` once any
unpickler of the process resolved that code, so wherever that cache holds anything the file's
opcodes are checked first and any extension is refused (snapshots never use one). And a pickle
may reference one object millions of times (a memo bomb): a few bytes each in the file, a full
object each for every analysis. :func:`check_expansion` refuses a file whose entries and frames
are out of proportion to its size (``MAX_EXPANSION``, raised with ``MEMFORENSICS_MAX_EXPANSION``).
"""

from __future__ import annotations

import copyreg
import gc
import gzip
import io
import os
import pickle
import pickletools
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import repeat
from pathlib import Path
from typing import IO, Any, cast

from memforensics._errors import SnapshotLoadError
from memforensics._layout import PREDICTED_KEY
from memforensics._text import printable
from memforensics.analysis.dump.devices import DeviceUsage, choose_device, device_usage, trace_of
from memforensics.analysis.dump.files import BytesRead, CountingReader, open_regular
from memforensics.analysis.dump.meta import (
    DumpMeta,
    dump_meta,
    marked_peak,
    marked_predicted,
    oom_positions,
    read_sidecar,
    trace_actions,
)
from memforensics.analysis.dump.model import Segment, as_int, segments_from_list
from memforensics.analysis.dump.shapes import (
    SnapshotShape,
    mark_workspace,
    read_shape,
    split_top_level,
    workspace_limit,
)

# Python's cyclic garbage collector, held off while a dump is read or walked.
#
# Unpickling a 1,000,000-entry trace makes millions of dicts and lists, and every few hundred new
# containers the collector runs; its full passes walk the whole, still growing heap, which costs
# more than the unpickling itself (2-3x ``pickle.load``'s time on a real-shaped dump). A snapshot
# is a tree of plain containers without cycles and the analysis makes few, so holding the collector
# off changes nothing but the time: reference counting still frees everything, and whatever
# cycles the work left are collected when the collector resumes.


@contextmanager
def paused_gc() -> Iterator[None]:
    """Hold off the cyclic collector inside (nesting-safe: only the outermost resumes it).

    Also a decorator: ``@paused_gc()``.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_GZIP_MAGIC = b"\x1f\x8b"

SnapshotReader = Callable[[Path], object]
"""Reads a snapshot file into its plain-data object (SnapshotLoadError when it cannot)."""


MAX_EXPANSION = 4.0
"""How many times its own size a snapshot may cost as objects: each trace entry, segment and
block counts ``ENTRY_BYTES``, each frame reference ``FRAME_BYTES`` (the least a distinct entry
and a memoized frame take in a pickle). Real snapshots cost under 1; a memo bomb costs far more.
``MEMFORENSICS_MAX_EXPANSION`` sets another bound (a number; ``inf`` turns the check off)."""
EXPANSION_VARIABLE = "MEMFORENSICS_MAX_EXPANSION"
ENTRY_BYTES = 16
FRAME_BYTES = 2
_EXTENSION_OPCODES = frozenset({"EXT1", "EXT2", "EXT4"})


class _Refused(pickle.UnpicklingError):
    """The pickle asked for a class or function; snapshots never do."""


class _RestrictedUnpickler(pickle.Unpickler):
    """Plain containers and scalars only: every global lookup is refused before it happens."""

    def find_class(self, module: str, name: str, /) -> Any:
        raise _Refused(f"{module}.{name}")


@dataclass(frozen=True)
class Dump:
    """One loaded snapshot, read on one device: its segments, its trace, and the sidecar's facts.

    ``trace`` is the allocator history of ``device`` exactly as PyTorch recorded it (a list of
    dicts, oldest first); read it defensively. ``warnings`` lists what was odd but not fatal.
    A file may hold several devices: ``devices`` lists each, ``device_reason`` says why this
    one is read, and :meth:`on_device` / :meth:`device_views` give the others. ``shape`` says
    which shape the file has and what it cannot tell.
    """

    path: Path | None
    segments: tuple[Segment, ...]
    trace: list[Any]
    device: int | None
    meta: DumpMeta
    snapshot: dict[str, Any]
    warnings: tuple[str, ...] = ()
    shape: SnapshotShape = field(default_factory=SnapshotShape)
    devices: tuple[DeviceUsage, ...] = ()
    device_reason: str = ""
    all_segments: tuple[Segment, ...] | None = field(default=None, repr=False)
    file_warnings: tuple[str, ...] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """How to refer to this dump in messages."""
        return printable(str(self.path)) if self.path is not None else "<snapshot>"

    @cached_property
    def actions(self) -> list[object]:
        """Each trace entry's ``action`` (None for an entry that is no dict), read once."""
        return trace_actions(self.trace)

    @cached_property
    def oom_positions(self) -> tuple[int, ...]:
        """Positions of the trace's ``oom`` entries, oldest first (read once per dump)."""
        return oom_positions(self.trace, self.actions)

    @cached_property
    def records_stacks(self) -> bool:
        """True when the trace records stacks: some ``alloc`` entry carries frames. Then an
        ``alloc`` without frames was made with no Python on the stack; in a trace recorded
        without stacks (``context=None``) no entry has any, and an empty stack says nothing."""
        trace = self.trace
        return any(
            action == "alloc" and bool(trace[index].get("frames"))
            for index, action in enumerate(self.actions)
        )

    @property
    def limits(self) -> tuple[str, ...]:
        """What this dump cannot tell on this device (the shape's limits, and device notes)."""
        workspace = workspace_limit(self.segments)
        return self.shape.limits + ((workspace,) if workspace else ())

    def on_device(self, device: int, *, reason: str = "chosen with --device") -> Dump:
        """The same file read on ``device``; SnapshotLoadError if the file holds nothing there."""
        held = [item.device for item in self.devices]
        if device not in held:
            raise missing_device(self.name, device, held)
        everything = self.segments if self.all_segments is None else self.all_segments
        traces = self.snapshot.get("device_traces", [])
        trace = trace_of(traces, device) if isinstance(traces, list) else []
        return replace(
            self,
            segments=tuple(s for s in everything if s.device in (device, None)),
            trace=trace,
            device=device,
            device_reason=reason,
            warnings=self.warnings if device == self.device else self.file_warnings or (),
        )

    def device_views(self) -> tuple[Dump, ...]:
        """What to explain by default: the OOM's device; else every device with memory."""
        failed_here = any(item.oom and item.device == self.device for item in self.devices)
        if failed_here or self.meta.kind == "oom":
            return (self,)
        with_memory = [item.device for item in self.devices if item.reserved_bytes > 0]
        if len(with_memory) <= 1:
            return (self,)
        reason = "each device with memory: no OOM recorded"
        return tuple(self.on_device(device, reason=reason) for device in with_memory)


def missing_device(name: str, device: int, held: Sequence[int]) -> SnapshotLoadError:
    """The error for a device the dump ``name`` holds nothing on (``held``: those it does)."""
    listed = ", ".join(map(str, held)) or "none"
    return SnapshotLoadError(f"{name}: no device {device} in this dump (devices held: {listed})")


def read_snapshot_file(path: Path, on_read: BytesRead | None = None) -> object:
    """Unpickle ``path`` (``.pickle`` or gzip-compressed) with the restricted unpickler.

    ``on_read`` hears the running count of the file's bytes read (compressed ones for gzip).
    """
    shown = printable(str(path))
    try:
        with open_regular(path) as file:
            raw: IO[bytes] = file if on_read is None else CountingReader(file, on_read)  # type: ignore[assignment]
            stream: IO[bytes] | gzip.GzipFile = raw
            if raw.read(2) == _GZIP_MAGIC:
                raw.seek(0)
                stream = gzip.GzipFile(fileobj=raw, mode="rb")
            else:
                raw.seek(0)
            if copyreg._extension_cache:  # type: ignore[attr-defined]
                _refuse_extensions(stream)
                stream.seek(0)
            with paused_gc():  # see gc_pause: the collector costs more than the unpickling
                snapshot = _RestrictedUnpickler(stream).load()
            check_expansion(path, snapshot, stream.tell())
            return snapshot
    except SnapshotLoadError:
        raise
    except FileNotFoundError:
        raise SnapshotLoadError(f"{shown}: no such file") from None
    except IsADirectoryError:
        raise SnapshotLoadError(f"{shown}: is a folder, not a snapshot file") from None
    except _Refused as exc:
        raise SnapshotLoadError(
            f"{shown}: refused to load: it asks to import {printable(str(exc))};"
            " a snapshot holds only plain data"
        ) from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise SnapshotLoadError(f"{shown}: truncated or corrupt ({_one_line(exc)})") from None
    except MemoryError:
        raise SnapshotLoadError(f"{shown}: too large to load into memory here") from None
    except OSError as exc:
        raise SnapshotLoadError(f"{shown}: cannot read ({_one_line(exc)})") from None
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file: one line
        raise SnapshotLoadError(f"{shown}: not a readable snapshot ({_one_line(exc)})") from None


_HEAD_BYTES = 512
_STRINGS = frozenset(("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"))
_DICTS = frozenset(("EMPTY_DICT", "DICT"))
_BOOKKEEPING = frozenset(("PROTO", "FRAME", "MARK", "MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"))


def head_marked_predicted(path: Path) -> bool:
    """Whether the snapshot file carries ``plan``'s mark, read from its first bytes only (a
    listing does not unpickle every dump): its top-level dict opens with
    :data:`~memforensics._layout.PREDICTED_KEY` holding a dict, as a planned ``_snapshot()``
    is ordered. False for anything unreadable."""
    try:
        with open_regular(path) as file:
            head = file.read(_HEAD_BYTES)
            if head[:2] == _GZIP_MAGIC:
                file.seek(0)
                with gzip.GzipFile(fileobj=file, mode="rb") as stream:
                    head = stream.read(_HEAD_BYTES)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error):
        return False
    return _opens_with_mark(head)


def _opens_with_mark(head: bytes) -> bool:
    """The pickle's first opcodes, bookkeeping aside: a dict, the mark as its first key, a dict
    as its value."""
    seen: list[tuple[str, object]] = []
    try:
        for opcode, argument, _ in pickletools.genops(io.BytesIO(head)):
            if opcode.name not in _BOOKKEEPING:
                seen.append((opcode.name, argument))
                if len(seen) == 3:
                    break
    except ValueError:  # the head ends mid-pickle, or is not a pickle
        return False
    if len(seen) < 3:
        return False
    (opened, _), (string, key), (value, _) = seen
    return opened in _DICTS and string in _STRINGS and key == PREDICTED_KEY and value in _DICTS


def _refuse_extensions(stream: IO[bytes] | gzip.GzipFile) -> None:
    """Raise ``_Refused`` if the pickle uses an extension code (the cache would skip
    ``find_class``); a pass over the opcodes, taken only when the cache is not empty."""
    for opcode, argument, _ in pickletools.genops(cast(IO[bytes], stream)):
        if opcode.name in _EXTENSION_OPCODES:
            raise _Refused(f"extension code {argument}")
        if opcode.name == "STOP":
            return


def max_expansion() -> float:
    """The bound in force: ``MEMFORENSICS_MAX_EXPANSION`` when it is a positive number."""
    text = os.environ.get(EXPANSION_VARIABLE, "")
    try:
        value = float(text)
    except ValueError:
        return MAX_EXPANSION
    return value if value > 0 else MAX_EXPANSION


def check_expansion(path: Path, snapshot: object, file_bytes: int) -> None:
    """Refuse ``snapshot`` if it holds more entries and frames than ``file_bytes`` of pickle can
    hold without referencing the same objects again and again (see ``MAX_EXPANSION``), or a
    number no allocator writes.

    Entries are counted with ``len`` first, so the frame count that follows walks no more
    entries than the bound allows. The walks run in C (``map`` over ``dict.get``): on a
    million-entry trace they cost a fraction of the unpickling.
    """
    bound = max_expansion() * max(file_bytes, 1)
    segment_list, traces = _entry_lists(snapshot)
    entries = len(segment_list) + sum(map(len, traces))
    cost = ENTRY_BYTES * entries
    if cost <= bound:
        blocks = [
            b for seg in segment_list if isinstance(seg, dict) for b in _list(seg.get("blocks"))
        ]
        cost += ENTRY_BYTES * len(blocks)
        if cost <= bound:
            layout = [e for e in segment_list if type(e) is dict]
            layout += [b for b in blocks if type(b) is dict]
            events = [e for items in traces for e in items if type(e) is dict]
            cost += FRAME_BYTES * (_frame_count(layout) + _frame_count(events))
            _refuse_wide_numbers(path, layout, _LAYOUT_NUMBERS)
            _refuse_wide_numbers(path, events, _TRACE_NUMBERS)
    if cost > bound:
        times = cost / max(file_bytes, 1)
        raise SnapshotLoadError(
            f"{printable(str(path))}: refused to load: it expands to {times:,.0f} times its"
            f" {file_bytes:,} bytes (entries and frames referenced over and over), above the"
            f" bound of {max_expansion():g}; set {EXPANSION_VARIABLE} to a larger number to read it"
        )


def _frame_count(entries: list[dict[Any, Any]]) -> int:
    """Frames the entries reference (a ``frames`` that is not a list counts none)."""
    found = map(dict.get, entries, repeat("frames"), repeat(()))
    try:
        return sum(map(len, cast(Iterable[list[Any]], found)))  # in C: the usual case
    except TypeError:
        return sum(len(_list(e.get("frames"))) for e in entries)


_TRACE_NUMBERS = ("size", "addr", "time_us", "stream")  # what the analysis reads of an event
_LAYOUT_NUMBERS = ("size", "address", "total_size", "requested_size", "stream")


def _refuse_wide_numbers(path: Path, entries: list[dict[Any, Any]], keys: tuple[str, ...]) -> None:
    """Refuse a file whose entries hold an integer no allocator writes (beyond 64 bits) under
    one of ``keys``: every figure built from it would be meaningless, and some cannot even be
    printed."""
    for key in keys:
        # Falsy values (None, 0) are never wide: dropped in C without a call per value.
        present = cast(Iterable[int], filter(None, map(dict.get, entries, repeat(key))))
        try:
            array("q", present)  # in C: every value an int within 64 bits, the usual case
            continue
        except (TypeError, OverflowError):
            pass
        for value in map(dict.get, entries, repeat(key)):  # the careful pass: a float is fine
            if type(value) is int and not -(1 << 63) <= value < (1 << 64):
                raise SnapshotLoadError(
                    f"{printable(str(path))}: not a memory snapshot (a {key} of"
                    f" {value.bit_length():,} bits; an allocator's fit in 64)"
                )


def _entry_lists(snapshot: object) -> tuple[list[Any], list[list[Any]]]:
    """The segment list and each device's trace, whatever else the top level holds."""
    if isinstance(snapshot, list):
        return snapshot, []
    if not isinstance(snapshot, dict):
        return [], []
    traces = _list(snapshot.get("device_traces"))
    return _list(snapshot.get("segments")), [_list(t) for t in traces]


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _one_line(exc: BaseException) -> str:
    text = printable(" ".join(str(exc).split()), 120)
    return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__


@paused_gc()  # building the segments and the trace's views after it makes containers too
def load_dump(path: str | Path, *, reader: SnapshotReader | None = None) -> Dump:
    """Load a snapshot file and its sidecar (if any); raise SnapshotLoadError if unusable.

    ``reader`` turns the file into its snapshot object (default :func:`read_snapshot_file`;
    the CLI passes one that also reports the bytes read, for its progress display).
    """
    file = Path(path)
    snapshot = (reader or read_snapshot_file)(file)
    warnings: list[str] = []
    try:
        sidecar = read_sidecar(file)
    except SnapshotLoadError as exc:
        sidecar = None
        warnings.append(f"ignoring sidecar: {exc}")
    return dump_from_snapshot(snapshot, sidecar=sidecar, path=file, warnings=warnings)


def dump_from_snapshot(
    snapshot: object,
    *,
    sidecar: dict[str, Any] | None = None,
    path: Path | None = None,
    warnings: list[str] | None = None,
) -> Dump:
    """Build a Dump from any shape PyTorch or torch_npu writes: a ``_snapshot()`` dict, or the
    list of segments ``memory_snapshot()`` returns (see ``dump.shapes``), read on one device."""
    source = printable(str(path)) if path is not None else "<snapshot>"
    raw_segments, traces, container = split_top_level(snapshot, source)
    everything = mark_workspace(segments_from_list(raw_segments, source), traces)
    meta = dump_meta(path, sidecar, marked=marked_predicted(snapshot))
    if meta.allocator_peak_bytes is None:
        meta = replace(meta, allocator_peak_bytes=marked_peak(snapshot))
    family = meta.sidecar.get("device") if meta.has_sidecar else None
    shape = read_shape(
        snapshot,
        raw_segments,
        traces,
        container,
        device_family=family if isinstance(family, str) else None,
    )
    usage = device_usage(everything, traces)
    schema = as_int(meta.sidecar.get("schema"))
    choice = choose_device(
        usage, traces, meta.device_index, old_sidecar=schema is None or schema < 2
    )
    device = choice.device
    segments = everything
    if device is not None and len({s.device for s in everything}) > 1:
        segments = tuple(s for s in everything if s.device in (device, None))
    trace = trace_of(traces, device)
    base = tuple(warnings or ())
    return Dump(
        path=path,
        segments=segments,
        trace=trace,
        device=device,
        meta=meta,
        snapshot=snapshot if isinstance(snapshot, dict) else {"segments": raw_segments},
        warnings=base + choice.warnings,
        shape=shape,
        devices=usage,
        device_reason=choice.reason,
        all_segments=everything,
        file_warnings=base,
    )
