"""The run folder on disk: every name memforensics writes there, and how to read it back.

::

    <out_dir>/
      steps4-7/rank0_pid1234.pickle  + rank0_pid1234.json     a window of several steps
      step12/rank0_pid1234.pickle    + .json                  a window of one step
      oom/rank3_pid77_step12_20261130-101112-123456.pickle + .json   (no _stepN outside steps)
      near-oom/rank3_pid77_step9_20261130-101102-000001.pickle + .json  (the allocator thrashed)
      manual/rank0_pid1_20261130-101500-000000.pickle + .json
      journal/rank3_pid77.jsonl      + rank3_pid77.1.jsonl (the rotated, older lines)
      .inflight/rank3/               temporary names of writes in flight (gone when empty)

Capture builds these names while training runs; analysis parses them afterwards, also for dumps
whose sidecar never came. Both call this module and nothing else knows the names, so the writer
and the readers cannot drift apart. Builders and parsers sit side by side: every name a builder
makes parses back to the facts it was made from.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

NEAR_OOM = "near-oom"
"""The kind (and folder) of a dump taken when memory got tight but nothing failed yet."""
EVENT_KINDS = ("oom", NEAR_OOM, "manual")
"""Dumps taken at a moment rather than over a window: each kind has a folder of that name."""
WINDOW = "window"
"""The sidecar kind of a window dump (its folder is named after its steps)."""
JOURNAL_FOLDER = "journal"
INFLIGHT_FOLDER = ".inflight"
SNAPSHOT_SUFFIX = ".pickle"
SNAPSHOT_SUFFIXES = (".pickle", ".pickle.gz", ".pkl", ".pkl.gz")
"""What a snapshot file may end with: ours, compressed copies, and hand-named dumps."""
SIDECAR_SUFFIX = ".json"
PREDICTED = "predicted"
"""The sidecar key, and (as :data:`PREDICTED_KEY`) the snapshot's, of a dump ``plan`` wrote:
the planned device's facts."""
PREDICTED_KEY = "memforensics_predicted"
"""The first top-level key of every snapshot ``plan`` records, holding what a sidecar's
:data:`PREDICTED` holds: a ``_snapshot()`` the script pickles itself still says it is a
prediction. PyTorch's own readers index only the keys they know."""
OOM_EXPANDABLE = "oom_expandable"
"""The key, inside a planned OOM dump's :data:`PREDICTED` object, saying whether the plan's own
run with ``expandable_segments:True`` ran out too (absent: no such run was made)."""
PEAK_ALLOCATED = "peak_allocated_bytes"
"""The sidecar key (and the key inside a planned snapshot's :data:`PREDICTED_KEY` mark) of the
most bytes the allocator held allocated at once before the dump, counting blocks whole as its
statistics do: a trace of bounded length may no longer show it. A planned dump's is the figure
``plan`` prints."""
JOURNAL_SUFFIX = ".jsonl"

RANK_LIMIT = 1 << 31
"""Ranks and world sizes are below this (a C ``int``, as torch.distributed and launchers keep
them): ``install()`` refuses larger ones, and readers report a larger claim as absurd."""

_WINDOW_RE = re.compile(r"^steps?(\d+)(?:-(\d+))?$")
_RANK_RE = re.compile(r"(?:^|_)rank(\d+)(?:_|$)")
_PID_RE = re.compile(r"(?:^|_)pid(\d+)(?:_|$)")
_STEP_RE = re.compile(r"_step(\d+)(?:_|$)")
_TIME_RE = re.compile(r"_(\d{8}-\d{6}-\d{6})$")
_TIME_FORMAT = "%Y%m%d-%H%M%S-%f"
_JOURNAL_RE = re.compile(r"^rank(\d+)_pid(\d+)(?:_[0-9a-f]+)?(?:\.(\d+))?\.jsonl$")


# -- window folders -----------------------------------------------------------------------------
def window_folder(first_step: int, last_step: int) -> str:
    """``step12`` for a one-step window, ``steps4-7`` for several."""
    if first_step == last_step:
        return f"step{first_step}"
    return f"steps{first_step}-{last_step}"


def parse_window_folder(name: str) -> tuple[int, int] | None:
    """``(first, last)`` of a window folder name (``step4-7`` and ``steps12`` too); else None."""
    match = _WINDOW_RE.match(name)
    if match is None:
        return None
    first = int(match.group(1))
    return (first, int(match.group(2) or first))


def folder_kind(name: str) -> str | None:
    """The dump kind a folder's name says: ``window``, ``oom``, ``manual``; None for others."""
    if parse_window_folder(name) is not None:
        return WINDOW
    return name if name in EVENT_KINDS else None


# -- dump file names ----------------------------------------------------------------------------
def timestamp(now: datetime) -> str:
    """``20261130-101112-123456``: sortable, filesystem-safe, microsecond resolution."""
    return (
        f"{now.year:04d}{now.month:02d}{now.day:02d}-"
        f"{now.hour:02d}{now.minute:02d}{now.second:02d}-{now.microsecond:06d}"
    )


def parse_timestamp(stamp: str) -> datetime | None:
    """The UTC moment a :func:`timestamp` names; None if it names no valid moment."""
    try:
        return datetime.strptime(stamp, _TIME_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def window_stem(rank: int, pid: int, token: str = "") -> str:
    """``rank0_pid1234``: a window folder holds one dump per process; ``rank0_pid1234_<token>``
    for a process that shares its rank and pid with another live one (see ``journal_name``)."""
    return f"rank{rank}_pid{pid}{_tag(token)}"


def event_stem(rank: int, pid: int, step: int | None, now: datetime, token: str = "") -> str:
    """``rank3_pid77_step12_20261130-101112-123456`` (no ``_stepN`` outside steps; the token,
    if any, right after the pid)."""
    step_part = f"_step{step}" if step is not None else ""
    return f"rank{rank}_pid{pid}{_tag(token)}{step_part}_{timestamp(now)}"


def _tag(token: str) -> str:
    return f"_{token}" if token else ""


@dataclass(frozen=True, slots=True)
class StemFacts:
    """What a dump's file name says; None where the name does not say it."""

    rank: int | None = None
    pid: int | None = None
    step: int | None = None
    created_at: datetime | None = None
    """UTC, from the name's timestamp (event dumps only)."""


def parse_stem(stem: str) -> StemFacts:
    """The facts in a dump's file stem, read leniently: a hand-named ``x_rank3.pickle`` still
    gives its rank."""
    rank = _RANK_RE.search(stem)
    pid = _PID_RE.search(stem)
    step = _STEP_RE.search(stem)
    stamp = _TIME_RE.search(stem)
    return StemFacts(
        rank=int(rank.group(1)) if rank else None,
        pid=int(pid.group(1)) if pid else None,
        step=int(step.group(1)) if step else None,
        created_at=parse_timestamp(stamp.group(1)) if stamp else None,
    )


def snapshot_stem(name: str) -> str | None:
    """``rank0_pid1`` for ``rank0_pid1.pickle`` / ``.pickle.gz``; None if not a snapshot name."""
    for suffix in SNAPSHOT_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return None


def sidecar_name(stem: str) -> str:
    """``rank0_pid1.json``: the sidecar of every snapshot file with that stem."""
    return f"{stem}{SIDECAR_SUFFIX}"


def sidecar_path(path: Path) -> Path:
    """The sidecar beside a snapshot: ``x.pickle`` and ``x.pickle.gz`` both map to ``x.json``."""
    return path.with_name(sidecar_name(snapshot_stem(path.name) or path.stem))


def window_snapshot(out_dir: Path, folder: str, rank: int, pid: int, token: str = "") -> Path:
    """``<out_dir>/steps4-7/rank0_pid1234.pickle``."""
    return out_dir / folder / f"{window_stem(rank, pid, token)}{SNAPSHOT_SUFFIX}"


def event_snapshot(
    out_dir: Path, kind: str, rank: int, pid: int, step: int | None, now: datetime, token: str = ""
) -> Path:
    """``<out_dir>/oom/rank3_pid77_step12_<time>.pickle``."""
    return out_dir / kind / f"{event_stem(rank, pid, step, now, token)}{SNAPSHOT_SUFFIX}"


# -- journals -----------------------------------------------------------------------------------
def journal_folder(out_dir: Path) -> Path:
    """``<out_dir>/journal``: every process's journal files."""
    return out_dir / JOURNAL_FOLDER


def journal_name(rank: int, pid: int, generation: int = 0, token: str = "") -> str:
    """``rank3_pid77.jsonl``, or ``rank3_pid77.1.jsonl`` for the rotated generation;
    ``rank3_pid77_<token>.jsonl`` when another live process of that rank has that pid too (two
    containers with python as pid 1): the token keeps their lines apart."""
    middle = f".{generation}" if generation else ""
    return f"rank{rank}_pid{pid}{_tag(token)}{middle}{JOURNAL_SUFFIX}"


def parse_journal_name(name: str) -> tuple[int, int, int] | None:
    """``(rank, pid, generation)`` of a journal file name, or None for anything else."""
    match = _JOURNAL_RE.match(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


# -- writes in flight ---------------------------------------------------------------------------
def inflight_folder(out_dir: Path, rank: int) -> Path:
    """``<out_dir>/.inflight/rank<R>``: where rank R registers the temporary files it writes."""
    return out_dir / INFLIGHT_FOLDER / f"rank{rank}"


def unsafe_folders(out_dir: Path) -> list[str]:
    """``out_dir`` and each folder above it that lets another user swap a dump: writable by
    group or others without the sticky bit (anyone may rename files there), or owned by a user
    other than this process's and root (the owner may). Each as ``path (why)``; a folder
    memforensics created itself is private by its mode and never listed."""
    me = os.geteuid()
    found = []
    folder = out_dir
    while True:
        try:
            info = os.stat(folder)
        except OSError:
            break
        reasons = []
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
            reasons.append(
                f"mode {stat.S_IMODE(info.st_mode):o}, writable by others, no sticky bit"
            )
        if info.st_uid not in (me, 0):
            reasons.append(f"owned by uid {info.st_uid}")
        if reasons:
            found.append(f"{folder} ({'; '.join(reasons)})")
        if folder.parent == folder:
            break
        folder = folder.parent
    return found
