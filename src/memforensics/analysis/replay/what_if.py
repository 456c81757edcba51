"""The what-if rows: the same requests replayed under other settings, in worker processes
when the caller allows several.

Rows whose settings cannot decide differently on this trace share one run
(:func:`~memforensics.allocator.deciding_settings`: a GC threshold without a memory fraction,
a ``max_split_size`` above every block the run can make).

Each row is one pass of the model over the whole trace and no row reads another's result, so
with ``jobs`` above 1 (and ``fork`` available in a process with one thread) the rows run in
that many forked workers. A forked worker shares the parent's dump and decoded trace
copy-on-write; what it copies is the pages its own reference counting touches (see
docs/performance.md for the measured cost).
"""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from memforensics.allocator import AllocatorSettings, deciding_settings
from memforensics.analysis.dump import Dump
from memforensics.analysis.oom import AllocatorState
from memforensics.analysis.replay.events import REQUESTS, Event
from memforensics.analysis.replay.lint import MEMORY_FRACTION
from memforensics.analysis.replay.run import UNBOUNDED, Device, RunResult, run

GC_NEEDS_FRACTION = (
    f"{MEMORY_FRACTION}, without which garbage collection does nothing; this row assumes one at"
    " the limit the OOM met"
)
"""What a ``garbage_collection_threshold`` row needs when the recorded run set no fraction."""


@dataclass(frozen=True, slots=True)
class WhatIf:
    """One row of the what-if table."""

    name: str
    conf: str
    oom: bool
    peak_reserved_bytes: int
    fragmentation_at_peak_bytes: int
    first_failure_index: int | None
    first_failure_bytes: int | None
    note: str | None = None
    requires: str | None = None  # what else the row's outcome needs beyond its conf

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (one element of ``replay --json``'s ``what_if``)."""
        return {
            "name": self.name,
            "conf": self.conf,
            "oom": self.oom,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "fragmentation_at_peak_bytes": self.fragmentation_at_peak_bytes,
            "first_failure_index": self.first_failure_index,
            "first_failure_bytes": self.first_failure_bytes,
            "note": self.note,
            "requires": self.requires,
        }


def row(
    name: str,
    settings: AllocatorSettings,
    result: RunResult,
    note: str | None,
    requires: str | None = None,
) -> WhatIf:
    """The table row of one run."""
    return WhatIf(
        name=name,
        conf=settings.to_conf(),
        oom=result.oom_index is not None,
        peak_reserved_bytes=result.peak_reserved,
        fragmentation_at_peak_bytes=result.fragmentation_at_peak,
        first_failure_index=result.oom_index,
        first_failure_bytes=result.oom_request,
        note=note,
        requires=requires,
    )


@dataclass(frozen=True)
class _Rows:
    """What every row's run reads: one dump, its decoded trace, the start and the device."""

    dump: Dump
    events: list[Event]
    start: AllocatorState
    device: Device
    recorded: AllocatorSettings
    note: str | None

    def run(self, task: tuple[AllocatorSettings, Device]) -> WhatIf:
        """Replay the trace under one alternative on its device, stopping at its first OOM
        (the row's name and conf are left for the caller)."""
        settings, device = task
        result = run(
            self.dump, settings, self.start, device, exact=False, stop_at_oom=True,
            events=self.events,
        )  # fmt: skip
        return row("", settings, result, self.note)


_forked: list[_Rows] = []  # what forked workers inherit: set only while a pool runs


def _run_forked(task: tuple[AllocatorSettings, Device]) -> WhatIf:
    return _forked[0].run(task)


def what_if_rows(
    dump: Dump,
    events: list[Event],
    start: AllocatorState,
    device: Device,
    recorded: AllocatorSettings,
    alternatives: list[tuple[str, AllocatorSettings]],
    *,
    note: str | None,
    jobs: int = 1,
) -> list[WhatIf]:
    """One row per alternative, in order; up to ``jobs`` runs at once in forked workers.

    Rows whose settings decide alike on this trace (:func:`deciding_settings`) on the same
    device share one run.
    """
    rows = _Rows(dump, events, start, device, recorded, note)
    largest = _largest_request(events, start)
    first: dict[tuple[AllocatorSettings, Device], int] = {}
    tasks: list[tuple[AllocatorSettings, Device]] = []
    found: list[tuple[int, str | None]] = []  # per row: the task that answers it, its needs
    for _name, settings in alternatives:
        row_device = _device_with_fraction(device, settings, recorded)
        fraction = row_device.allowed is not None
        key = (deciding_settings(settings, fraction=fraction, largest_request=largest), row_device)
        if key not in first:
            first[key] = len(tasks)
            tasks.append((settings, row_device))
        found.append((first[key], GC_NEEDS_FRACTION if row_device is not device else None))
    answers = _run_all(rows, tasks, jobs)
    return [
        replace(answers[task], name=name, conf=settings.to_conf(), requires=needs)
        for (name, settings), (task, needs) in zip(alternatives, found, strict=True)
    ]


def _run_all(rows: _Rows, tasks: list[tuple[AllocatorSettings, Device]], jobs: int) -> list[WhatIf]:
    """Each task's row, in order: here, or in up to ``jobs`` forked workers."""
    workers = min(jobs, len(tasks))
    if workers <= 1 or not _fork_is_safe():
        return [rows.run(task) for task in tasks]
    _forked.append(rows)
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            return list(pool.map(_run_forked, tasks))
    finally:
        _forked.clear()


def _largest_request(events: list[Event], start: AllocatorState) -> int:
    """The most bytes any request of a what-if run asks for: the trace's requests and the
    blocks live at the start (allocated afresh)."""
    asked = (event[2] for event in events if event[0] in REQUESTS and event[2] is not None)
    held = (block.requested for segment in start.segments for block in segment.blocks)
    return max(max(asked, default=0), max(held, default=0))


def _fork_is_safe() -> bool:
    """fork copies only the calling thread: safe with one thread, where the platform has it."""
    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def _device_with_fraction(
    device: Device, settings: AllocatorSettings, recorded: AllocatorSettings
) -> Device:
    """Garbage collection acts only under a memory fraction: without a recorded one, a row that
    sets a threshold of its own gets one at the limit the OOM met (which changes nothing else)
    and says so (:data:`GC_NEEDS_FRACTION`); rows keeping the recorded threshold keep the
    recorded device, where it did nothing."""
    threshold = settings.garbage_collection_threshold
    gc = threshold > 0 and threshold != recorded.garbage_collection_threshold
    if gc and device.allowed is None and device.capacity < UNBOUNDED:
        return Device(device.capacity, device.capacity, device.total)
    return device
