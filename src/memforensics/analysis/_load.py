"""Safe loading: a snapshot file becomes a :class:`Dump` without running any code from it.

``pickle.load`` on an untrusted file can run anything (a reduce to ``os.system``). A snapshot is
only dicts, lists, tuples, strings and numbers, and none of those needs ``find_class``: the C
unpickler only calls it for GLOBAL-style opcodes, so refusing every call there makes loading
safe while it stays as fast as plain ``pickle.load``. Every failure becomes one
:class:`~memforensics.SnapshotLoadError` naming the file, never a traceback.
"""

from __future__ import annotations

import gzip
import pickle
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from memforensics._errors import SnapshotLoadError
from memforensics.analysis._meta import DumpMeta, dump_meta, read_sidecar
from memforensics.analysis._model import Segment, normalize_segments

_GZIP_MAGIC = b"\x1f\x8b"


class _Refused(pickle.UnpicklingError):
    """The pickle asked for a class or function; snapshots never do."""


class _RestrictedUnpickler(pickle.Unpickler):
    """Plain containers and scalars only: every global lookup is refused before it happens."""

    def find_class(self, module: str, name: str, /) -> Any:
        raise _Refused(f"{module}.{name}")


@dataclass(frozen=True)
class Dump:
    """One loaded snapshot: checked segments, the trace of its device, and what its sidecar says.

    ``trace`` is the allocator history of ``device`` exactly as PyTorch recorded it (a list of
    dicts, oldest first); read it defensively. ``warnings`` lists what was odd but not fatal.
    """

    path: Path | None
    segments: tuple[Segment, ...]
    trace: list[Any]
    device: int | None
    meta: DumpMeta
    snapshot: dict[str, Any]
    warnings: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """How to refer to this dump in messages."""
        return str(self.path) if self.path is not None else "<snapshot>"


def read_snapshot_file(path: Path) -> object:
    """Unpickle ``path`` (``.pickle`` or gzip-compressed) with the restricted unpickler."""
    try:
        with path.open("rb") as raw:
            stream: IO[bytes] | gzip.GzipFile = raw
            if raw.read(2) == _GZIP_MAGIC:
                raw.seek(0)
                stream = gzip.GzipFile(fileobj=raw, mode="rb")
            else:
                raw.seek(0)
            return _RestrictedUnpickler(stream).load()
    except FileNotFoundError:
        raise SnapshotLoadError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SnapshotLoadError(f"{path}: is a folder, not a snapshot file") from None
    except _Refused as exc:
        raise SnapshotLoadError(
            f"{path}: refused to load: it asks to import {exc}; a snapshot holds only plain data"
        ) from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise SnapshotLoadError(f"{path}: truncated or corrupt ({_one_line(exc)})") from None
    except MemoryError:
        raise SnapshotLoadError(f"{path}: too large to load into memory here") from None
    except OSError as exc:
        raise SnapshotLoadError(f"{path}: cannot read ({_one_line(exc)})") from None
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file: one line
        raise SnapshotLoadError(f"{path}: not a readable snapshot ({_one_line(exc)})") from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:120]
    return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__


def load_dump(path: str | Path) -> Dump:
    """Load a snapshot file and its sidecar (if any); raise SnapshotLoadError if unusable."""
    file = Path(path)
    snapshot = read_snapshot_file(file)
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
    """Build a Dump from an in-memory snapshot dict (e.g. ``torch.cuda.memory._snapshot()``)."""
    source = str(path) if path is not None else "<snapshot>"
    segments = normalize_segments(snapshot, source)
    assert isinstance(snapshot, dict)  # normalize_segments raised otherwise
    traces = snapshot.get("device_traces", [])
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise SnapshotLoadError(f"{source}: not a memory snapshot ('device_traces' is not lists)")
    meta = dump_meta(path, sidecar)
    device = _choose_device(segments, traces, meta.device_index)
    if device is not None and len({s.device for s in segments}) > 1:
        segments = tuple(s for s in segments if s.device in (device, None))
    trace = traces[device] if device is not None and 0 <= device < len(traces) else []
    return Dump(path, segments, trace, device, meta, snapshot, tuple(warnings or ()))


def _choose_device(
    segments: tuple[Segment, ...], traces: list[Any], hint: int | None
) -> int | None:
    """The sidecar's device; else the one with most reserved memory; else the busiest trace."""
    if hint is not None and (hint < len(traces) or any(s.device == hint for s in segments)):
        return hint
    reserved: dict[int, int] = {}
    for segment in segments:
        if segment.device is not None:
            reserved[segment.device] = reserved.get(segment.device, 0) + segment.total_size
    if reserved:
        return max(reserved, key=lambda device: (reserved[device], -device))
    if traces:
        return max(range(len(traces)), key=lambda index: (len(traces[index]), -index))
    return None
