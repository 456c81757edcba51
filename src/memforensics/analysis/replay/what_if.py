"""The what-if rows: the same requests replayed under other settings, in worker processes
when the caller allows several.

Rows whose settings cannot decide differently on this trace share one run
(:func:`~memforensics.allocator.deciding_settings`: a GC threshold without a memory fraction,
a ``max_split_size`` above every block the run can make). A row that decides as the recorded
settings do, on the recorded device, is answered by the run the replay already made under them
(the self-check's note of its first stop, or the calibration when blocks were live or cached at
the start): it costs no pass of its own, and reads "no effect on this dump" with the rule that
makes it so (:func:`no_effect_reason`). Every other row gives its peak reserved against that
run, the baseline.

Each row is one pass of the model over the whole trace and no row reads another's result, so
with ``jobs`` above 1 (and ``fork`` available in a process with one thread) ``jobs - 1``
forked workers and the calling process share the rows' runs. A forked worker shares the
parent's dump and decoded trace copy-on-write; what it copies is the pages its own reference
counting touches (see docs/analysis.md, ``replay``, for the measured cost).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from memforensics._units import format_bytes as fmt
from memforensics.allocator import NO_LIMIT, AllocatorSettings, deciding_settings, largest_block
from memforensics.analysis.dump import Dump
from memforensics.analysis.oom import AllocatorState, OomMoment
from memforensics.analysis.replay.recorded import REQUESTS, Event
from memforensics.analysis.replay.runner import UNBOUNDED, Device, RunResult, run

# Config lint from the dump: allocator settings that cannot do what they are set for.
#
# Each finding is a known trap, read from the snapshot's ``allocator_settings`` and what the dump
# shows of the device:
#
# - ``garbage_collection_threshold`` without a memory fraction: PyTorch collects only under a
#   per-process limit. Older releases set one on any ``set_per_process_memory_fraction`` call
#   (``set_fraction``); newer ones only for a fraction below 1.0 (``setMemoryFraction`` leaves
#   ``allowed_memory_maximum`` unset at 1.0), from that call or from the conf key
#   ``per_process_memory_fraction``. Without one the setting does nothing.
# - expandable segments already on while segments fragment: the usual advice does not apply.
# - ``max_split_size_mb`` together with expandable segments: ``get_free_block`` still keeps a free
#   block of ``max_split_size`` or more from any smaller request, while ``should_split`` ignores
#   ``max_split_size`` in expandable segments, so a large request is handed such a block and the
#   rest is split off. Freed oversize blocks sit idle for the smaller requests while the segment
#   maps more pages: reserved memory can grow without bound (PyTorch issue 123548).

MEMORY_FRACTION = (
    "a memory fraction (torch.cuda.set_per_process_memory_fraction, below 1.0 in newer PyTorch,"
    " or per_process_memory_fraction in the conf string)"
)
"""What garbage collection needs, in the words of every finding and what-if row."""


def lint(dump: Dump, settings: AllocatorSettings, moment: OomMoment | None) -> list[str]:
    """Findings, one sentence each (empty when nothing is off)."""
    found: list[str] = []
    expandable = settings.expandable_segments or any(s.is_expandable for s in dump.segments)
    if settings.garbage_collection_threshold > 0:
        fraction = _fraction_set(moment)
        if settings.memory_fraction is not None and settings.memory_fraction < 1.0:
            fraction = True
        if fraction is False:
            found.append(
                "garbage_collection_threshold is set but no memory fraction is (the OOM's limit"
                f" is the whole device): PyTorch only collects under {MEMORY_FRACTION}, so it"
                " has no effect"
            )
        elif fraction is None:
            found.append(
                f"garbage_collection_threshold acts only under {MEMORY_FRACTION};"
                " this dump cannot tell whether one was set"
            )
    if expandable and settings.max_split_size != NO_LIMIT:
        found.append(
            "max_split_size_mb with expandable segments: a free block of max_split_size or more"
            " is kept from every smaller request, yet a larger request takes it and the rest is"
            " split off; freed oversize blocks sit idle while the segment grows, and reserved"
            " memory can grow without bound (PyTorch issue 123548); drop max_split_size_mb"
        )
    if expandable and moment is not None:
        largest = moment.largest_free_block_bytes or 0
        requested = moment.requested_bytes or 0
        holes = moment.free_in_reserved_bytes or 0
        if requested and largest < requested <= holes + (moment.headroom_bytes or 0):
            found.append(
                "expandable segments are already on, yet the free memory was in pieces:"
                " turning them on is not the fix; free the pinning tensors or lower the peak"
            )
    return found


def _fraction_set(moment: OomMoment | None) -> bool | None:
    """True/False when the OOM's figures tell whether a memory fraction limited the process."""
    if moment is None or None in (
        moment.device_total_bytes,
        moment.device_free_bytes,
        moment.reserved_bytes,
    ):
        return None
    assert moment.device_total_bytes is not None
    reachable = (moment.device_free_bytes or 0) + (moment.reserved_bytes or 0)
    return moment.device_total_bytes < reachable


GC_NEEDS_FRACTION = (
    f"{MEMORY_FRACTION}, without which garbage collection does nothing; this row assumes one at"
    " the limit the OOM met"
)
"""What a ``garbage_collection_threshold`` row needs when the recorded run set no fraction."""


@dataclass(frozen=True, slots=True)
class WhatIf:
    """One row of the what-if table: the recorded run, the baseline, or one setting."""

    name: str
    conf: str
    oom: bool | None
    """Whether the run failed; None when it did not fail on a device of unknown size (no
    OOM is ruled out there: the row gives the peak it reached)."""
    peak_reserved_bytes: int
    fragmentation_at_peak_bytes: int
    """Free inside reserved when allocated bytes peaked (the first such moment)."""
    first_failure_index: int | None
    first_failure_bytes: int | None
    note: str | None = None
    requires: str | None = None  # what else the row's outcome needs beyond its conf
    change_bytes: int | None = None
    """Peak reserved against the baseline row's (None: this row is the recorded run or the
    baseline itself)."""
    no_effect: str | None = None
    """Why the setting cannot change any decision of the model on this trace (None: it can)."""


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


Task = tuple[AllocatorSettings, Device]
"""One run: the settings and the device it replays on."""


@dataclass(frozen=True)
class _Rows:
    """What every row's run reads: one dump, its decoded trace, the start and the device."""

    dump: Dump
    events: list[Event]
    start: AllocatorState
    device: Device
    recorded: AllocatorSettings
    note: str | None
    releases: frozenset[int]  # where the recording released its whole cache

    def run(self, task: Task) -> WhatIf:
        """Replay the trace under one alternative on its device, stopping at its first OOM
        (the row's name and conf are left for the caller)."""
        settings, device = task
        result = run(
            self.dump, settings, self.start, device, exact=False, stop_at_oom=True,
            events=self.events, releases=self.releases,
        )  # fmt: skip
        return row("", settings, result, self.note)


AS_RECORDED = -1
"""The run answering a row that decides as the recorded settings do: the caller's own."""

_forked: list[tuple[_Rows, list[Task], Any]] = []  # inherited by forked workers (while starting)


class WhatIfRows:
    """The what-if rows of one replay: planned, then run here or started early in workers.

    Rows whose settings decide alike on this trace (:func:`deciding_settings`) on the same
    device share one run. With ``jobs`` above 1 (and ``fork`` safe) :meth:`start` forks
    ``jobs - 1`` workers that take runs one at a time while the caller runs its self-check;
    :meth:`rows` then takes what is left here too (so ``jobs`` processes work at once), and
    :meth:`close` ends the workers, whether their rows were asked for or not.
    """

    def __init__(
        self,
        rows: _Rows,
        alternatives: list[tuple[str, AllocatorSettings]],
        jobs: int,
    ) -> None:
        self._rows = rows
        self._alternatives = alternatives
        self._jobs = jobs
        self._workers: list[tuple[BaseProcess, Connection]] = []
        self._next: Any = None  # the index of the next run to take, shared with the workers
        largest = _largest_request(rows.events, rows.start)
        fraction = rows.device.allowed is not None
        recorded = deciding_settings(rows.recorded, fraction=fraction, largest_request=largest)
        as_recorded = (recorded, rows.device)
        runs: dict[Task, Task] = {}  # what a run decides by -> the run (its first row's)
        asked: list[tuple[Task, str | None]] = []  # per row: what it decides by, what it needs
        self._no_effect: list[str | None] = []
        for _name, settings in alternatives:
            device = _device_with_fraction(rows.device, settings, rows.recorded)
            fraction = device.allowed is not None
            key = (deciding_settings(settings, fraction=fraction, largest_request=largest), device)
            if key != as_recorded:
                runs.setdefault(key, (settings, device))
            asked.append((key, GC_NEEDS_FRACTION if device is not rows.device else None))
            self._no_effect.append(
                no_effect_reason(settings, rows.recorded, fraction=fraction, largest=largest)
                if key == as_recorded
                else None
            )
        # The costliest runs are taken first, so that the last to finish is a short one.
        ordered = sorted(runs, key=lambda key: -_cost(key[0]))
        index = {key: position for position, key in enumerate(ordered)}
        index[as_recorded] = AS_RECORDED
        self._tasks: list[Task] = [runs[key] for key in ordered]
        self._found = [(index[key], needs) for key, needs in asked]  # per row: its run, needs

    @property
    def runs(self) -> int:
        """Passes over the trace the rows need (rows that decide alike share one)."""
        return len(self._tasks)

    def start(self) -> None:
        """Fork ``jobs - 1`` workers (at most one per run) that start taking runs now."""
        workers = min(self._jobs - 1, len(self._tasks))
        if workers < 1 or self._next is not None or not _fork_is_safe():
            return
        context = multiprocessing.get_context("fork")
        self._next = context.Value("q", 0)
        _forked.append((self._rows, self._tasks, self._next))
        try:
            for _ in range(workers):
                reader, writer = context.Pipe(duplex=False)
                worker = context.Process(target=_work_forked, args=(writer,), daemon=True)
                worker.start()
                writer.close()
                self._workers.append((worker, reader))
        finally:
            _forked.clear()

    def rows(self, as_recorded: RunResult) -> list[WhatIf]:
        """One row per alternative, in order; ``as_recorded`` answers the rows that decide as
        the recorded settings do (the replay's own run under them, stopped at its first OOM)
        and is the baseline each row's ``change_bytes`` is measured against."""
        if self._next is None:
            answers = [self._rows.run(task) for task in self._tasks]
        else:
            taken = dict(_work(self._rows, self._tasks, self._next))  # what no worker took yet
            for _worker, reader in self._workers:
                with contextlib.suppress(EOFError, OSError):  # a worker that died sends nothing
                    taken.update(reader.recv())
            # A run a failed worker took is run here (where its error, if any, is raised).
            answers = [
                taken[index] if index in taken else self._rows.run(task)
                for index, task in enumerate(self._tasks)
            ]
        recorded = row("", self._rows.recorded, as_recorded, self._rows.note)
        found = zip(self._alternatives, self._found, self._no_effect, strict=True)
        return [
            replace(
                answer,
                name=name,
                conf=settings.to_conf(),
                requires=needs,
                change_bytes=answer.peak_reserved_bytes - as_recorded.peak_reserved,
                no_effect=why,
            )
            for (name, settings), (task, needs), why in found
            for answer in [answers[task] if task != AS_RECORDED else recorded]
        ]

    def close(self) -> None:
        """End the workers (a refused table's runs are not waited for)."""
        for worker, reader in self._workers:
            if worker.is_alive():
                worker.kill()
            worker.join()
            reader.close()
        self._workers, self._next = [], None


def _work_forked(writer: Connection) -> None:
    """A worker: runs taken one at a time until none is left, sent back as (index, row)."""
    rows, tasks, next_index = _forked[0]
    try:
        done = _work(rows, tasks, next_index)
    except Exception:  # noqa: BLE001 - the caller reruns what is missing and raises it there
        done = []
    writer.send(done)
    writer.close()


def _work(rows: _Rows, tasks: list[Task], next_index: Any) -> list[tuple[int, WhatIf]]:
    """Take the next run not yet taken by any process, run it, repeat; (index, row) pairs."""
    done: list[tuple[int, WhatIf]] = []
    while True:
        with next_index.get_lock():
            index = next_index.value
            next_index.value = index + 1
        if index >= len(tasks):
            return done
        done.append((index, rows.run(tasks[index])))


def plan_rows(
    dump: Dump,
    events: list[Event],
    start: AllocatorState,
    device: Device,
    recorded: AllocatorSettings,
    alternatives: list[tuple[str, AllocatorSettings]],
    *,
    note: str | None,
    jobs: int = 1,
    releases: frozenset[int] = frozenset(),
) -> WhatIfRows:
    """The rows for ``alternatives``: each replays the trace from ``start``, stopping at its
    first OOM; up to ``jobs`` runs at once in forked workers once started; each releases its
    whole cache where the recording did (``releases``)."""
    rows = _Rows(dump, events, start, device, recorded, note, releases)
    return WhatIfRows(rows, alternatives, jobs)


def no_effect_reason(
    settings: AllocatorSettings, recorded: AllocatorSettings, *, fraction: bool, largest: int
) -> str:
    """Why ``settings`` decide as ``recorded`` do on a trace whose largest request is
    ``largest`` bytes, by the rules :func:`deciding_settings` applies (``fraction``: a memory
    fraction limits the run)."""
    why: list[str] = []
    threshold = settings.garbage_collection_threshold
    if threshold != recorded.garbage_collection_threshold and not fraction:
        why.append("garbage collection acts only under a memory fraction, and none limits this run")
    if settings.max_split_size != recorded.max_split_size:
        biggest = largest_block(settings, largest)
        why.append(
            "no request here makes a block as large as max_split_size: the largest any can"
            f" make is {fmt(biggest)}"
        )
    return "; ".join(why) or "it decides as the recorded settings do"


def _largest_request(events: list[Event], start: AllocatorState) -> int:
    """The most bytes any request of a what-if run asks for: the trace's requests and the
    blocks live at the start (allocated afresh)."""
    asked = (event[2] for event in events if event[0] in REQUESTS and event[2] is not None)
    held = (block.requested for segment in start.segments for block in segment.blocks)
    return max(max(asked, default=0), max(held, default=0))


def _cost(settings: AllocatorSettings) -> int:
    """A rank of how long a run under ``settings`` takes (only the order runs are taken in
    depends on it): power-of-two rounding works on every request, expandable segments map and
    unmap pages, a split limit releases and remakes segments."""
    rounding = 2 if any(settings.roundup_power2_divisions) else 0
    return rounding + settings.expandable_segments + (settings.max_split_size != NO_LIMIT)


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
