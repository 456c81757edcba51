"""One story per dump: what :func:`explain` says of a dump is what every command prints.

A dump is explained from itself and from what lies beside it in its run folder: its sidecar
(read with the dump), and the window dumps of its rank, whose per-site totals show a site
growing window after window (the ``leaks`` fit), and the journal of its process (its rank and
pid), whose allocated bytes climbing step after step show growth no window names (the
forecast's fit). :func:`explain` gathers that evidence itself,
so ``summary``, ``report``, ``overview``, ``plan`` and ``watch`` cannot tell two stories of one
dump: each asks this one call and prints its answer. :func:`evidence_files` names every file
the answer is read from, by the same rule, so a cache keys the answer by each of them.

A dump that lies in no run folder (its folder is not one capture names: a window, ``oom``,
``near-oom`` or ``manual`` folder) reads nothing beside it, and costs what its summary costs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from memforensics import _layout
from memforensics._errors import SnapshotLoadError
from memforensics.analysis.compare import WindowTotals, fit_windows, read_windows
from memforensics.analysis.dump import Dump, DumpMeta, dump_meta, load_dump, read_sidecar_file
from memforensics.analysis.folder import MISSING, JournalFile, Line, fit_line, read_process
from memforensics.analysis.summary import Summary, summarize

Phase = Callable[[str], object]
"""Told what :func:`explain` does next (``reading 3 window dumps beside it``), for a display."""
WindowReader = Callable[[Sequence[Path]], Sequence[WindowTotals | str | None]]
"""Reads window dumps into their per-site totals (``compare.read_windows``, or a caller's that
remembers them: a report of a run folder explains every dump of a rank from the same windows)."""


def explain(
    source: Dump | str | Path,
    *,
    top: int | None = 10,
    requested: int | None = None,
    device_memory: int | None = None,
    device: int | None = None,
    replay: bool = True,
    phase: Phase | None = None,
    windows: WindowReader = read_windows,
) -> Summary:
    """The summary of a dump, with its diagnosis, from the dump and the evidence beside it.

    ``source``: the dump, or its path (loaded here; SnapshotLoadError when unusable).
    ``device``: the device to explain (SnapshotLoadError when the file holds nothing there);
    None explains what ``summary`` does by default (:meth:`Dump.device_views`): the first
    device's summary holds the others', in that order, in ``other_devices``. ``top``,
    ``requested``, ``device_memory`` and ``replay`` are
    :func:`~memforensics.analysis.summary.summarize`'s;
    ``windows`` reads the window dumps beside it (:data:`WindowReader`).
    """
    dump = source if isinstance(source, Dump) else load_dump(source)
    views = dump.device_views() if device is None else (dump.on_device(device),)
    beside = window_dumps_beside(dump.path, dump.meta) if dump.path is not None else None
    trends = None
    if beside is not None:
        if phase is not None and beside:
            phase(f"reading {len(beside)} window dumps beside it")
        totals = [item for item in windows(beside) if isinstance(item, WindowTotals)]
        trends = fit_windows("", [item for item in totals if item.rank == dump.meta.rank]).trends
    journal = journal_beside(dump.path, dump.meta) if dump.path is not None else ()
    climb = allocated_climb(journal) if journal else None
    if phase is not None:
        phase(f"summarizing {dump.path.name if dump.path is not None else dump.name}")
    summaries = [
        summarize(
            view,
            top=top,
            requested=requested,
            trends=trends,
            climb=climb,
            replay=replay,
            device_memory=device_memory,
        )
        for view in views
    ]
    return replace(summaries[0], other_devices=tuple(summaries[1:]))


def evidence_files(path: Path) -> tuple[Path, ...]:
    """Every file :func:`explain` reads to explain the dump at ``path``: the dump itself (and
    its sidecar beside it), the window dumps of its rank in its run folder (and theirs), then
    its process's journal files."""
    try:
        sidecar = read_sidecar_file(_layout.sidecar_path(path))
    except SnapshotLoadError:
        sidecar = None  # the load says so, and explains the dump without it
    meta = dump_meta(path, sidecar)
    journal = tuple(Path(file.path) for file in journal_beside(path, meta))
    return (path, *(window_dumps_beside(path, meta) or ()), *journal)


def journal_beside(path: Path, meta: DumpMeta) -> tuple[JournalFile, ...]:
    """The journal files of the process that wrote the dump at ``path`` (its rank, and its pid
    from the sidecar, else the file name), rotated generation first; none when ``path`` lies
    in no run folder, its rank or pid is not known, or the process left no journal. Only that
    process's files are looked at: another rank's or pid's journal says nothing of this dump."""
    pid = meta.sidecar.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        pid = _layout.parse_stem(path.name).pid
    if meta.rank is None or pid is None or _layout.folder_kind(path.parent.name) is None:
        return ()
    folder = _layout.journal_folder(path.parent.parent)
    found = []
    for generation in (1, 0):
        file = folder / _layout.journal_name(meta.rank, pid, generation)
        if file.is_file():
            found.append(JournalFile(str(file), meta.rank, pid, generation))
    return tuple(found)


def allocated_climb(files: Sequence[JournalFile]) -> Line | None:
    """The steady line of allocated bytes over steps in the newest run of ``files`` (a
    restarted process's older run says nothing of the dump), or None when they do not climb
    (the forecast's fit and guards); a torn or bad line is skipped, as every journal reader
    skips it."""
    journal = read_process(list(files))[-1]
    points = [
        (step, live)
        for step, live in zip(journal.steps, journal.columns["allocated_bytes"], strict=True)
        if MISSING not in (step, live)
    ]
    return fit_line([step for step, _ in points], [live for _, live in points])


def window_dumps_beside(path: Path, meta: DumpMeta) -> tuple[Path, ...] | None:
    """The window dumps of the rank ``meta`` names in the run folder ``path`` lies in, by
    window; None when ``path`` lies in no run folder or its rank is not known (then whose
    windows they would be cannot be told). A window dump whose name says no rank is read, and
    kept only if its sidecar says this rank."""
    if meta.rank is None or _layout.folder_kind(path.parent.name) is None:
        return None
    root = path.parent.parent
    found: list[tuple[tuple[int, int], str, Path]] = []
    for folder in _children(root):
        steps = _layout.parse_window_folder(folder.name)
        if steps is None or not folder.is_dir():
            continue
        for file in _children(folder):
            stem = _layout.snapshot_stem(file.name)
            if stem is None or file.name.startswith(".") or not file.is_file():
                continue
            named = _layout.parse_stem(stem).rank
            if named is None or named == meta.rank:
                found.append((steps, file.name, file))
    return tuple(file for _steps, _name, file in sorted(found))


def _children(folder: Path) -> Sequence[Path]:
    """The entries of ``folder`` (none when it cannot be listed)."""
    try:
        with os.scandir(folder) as entries:
            return [Path(entry.path) for entry in entries]
    except OSError:
        return []
