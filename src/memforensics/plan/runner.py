"""One planned run: the script under the emulated device, and what the allocator model saw.

The caller hands in how to run the script (the CLI runs it as python would) and what to do with
each snapshot the script dumps itself; this module builds the device, pushes the emulation,
runs, and returns a :class:`PlanResult`. A predicted OOM is the script's own
``torch.cuda.OutOfMemoryError``: it ends the run and is reported, not raised.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TextIO

from memforensics._units import format_bytes
from memforensics.allocator import AllocatorSettings
from memforensics.plan.device import (
    FLIGHT_ENTRIES,
    DeviceSpec,
    PlannedDevice,
    Stopped,
    WorkerFigures,
)
from memforensics.plan.distributed import World

SCHEMA = 1
"""Version of ``plan --json``'s keys (docs/json.md): adding keys keeps it, renaming or removing
one bumps it."""


@dataclass(frozen=True)
class PlanVerdict:
    """A predicted OOM's dump as ``summary`` judges it: its cause and the allocator's verdict."""

    cause: str
    label: str
    explanation: str
    advice: str


@dataclass(frozen=True)
class PlanResult:
    """What the planned device went through: its peaks, its segments, whether the run fit; with
    the snapshots it left, a predicted OOM's verdict, and the script's own exit status (None
    when it ended without ``sys.exit``, or with status 0)."""

    device_name: str
    device_bytes: int
    capability: str
    context_bytes: int
    allocator_conf: str
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    peak_segments: int
    segments: int
    fits: bool
    oom_message: str | None
    script_snapshots: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default=())
    snapshots: tuple[str, ...] = ()
    verdict: PlanVerdict | None = None
    needed_bytes: int = field(init=False)
    """Peak reserved plus the CUDA context (where the script initialized CUDA) and NCCL's
    buffers: what the device must hold."""
    exit_status: int | None = None
    rank: int = 0
    world_size: int = 1
    nccl_bytes: int = 0
    """NCCL's buffers outside PyTorch, an allowance from NCCL's defaults (0 without a
    process group of two or more ranks)."""
    oom_expandable: bool | None = None
    """A predicted OOM judged fragmentation, planned again with ``expandable_segments:True``:
    whether that run runs out too (None: not planned again)."""
    interrupted: str | None = None
    """Where the script was (``file:line``) when it was interrupted (Ctrl-C or SIGTERM, which
    ``exit_status`` tells apart): the figures are the run's up to there; None when it ran to
    its end."""
    steps: int | None = None
    """``--steps``: the optimizer steps the run was limited to; None without a limit."""
    ended_at_step: str | None = None
    """Where the script was (``file:line``) when an optimizer came to its step ``steps`` + 1,
    which ended the run: the figures are those of the steps before; None when the limit did
    not end it."""
    failed: str | None = None
    """Where and how the script failed for a reason other than a predicted OOM
    (``file:line: Error: message``, its traceback shown): the figures are the run's up to
    there; None when it ran to its end."""
    cuda_initialized: bool = True
    """Whether the script initialized CUDA (made a tensor on the device, or called what
    initializes CUDA, as ``torch.cuda.init``, ``set_device``, ``mem_get_info``): only then does
    the process hold the CUDA context (``context_bytes``), on a GPU as in ``needed_bytes``."""

    workers: tuple[WorkerFigures, ...] = ()
    """The script's worker processes on the device (Hogwild trainers), each its own
    allocator's figures, in the order they started."""
    device_peak_bytes: int = 0
    """The most device memory the script's process and its workers held at once."""
    caught_ooms: tuple[str, ...] = ()
    """PyTorch's message for each predicted OOM the script caught and went on from, in order
    (a search for the largest batch that fits); the one that ended the run is ``oom_message``."""

    def __post_init__(self) -> None:
        context = self.context_bytes if self.cuda_initialized else 0
        needed = self.peak_reserved_bytes + context + self.nccl_bytes
        object.__setattr__(self, "needed_bytes", max(needed, self.device_peak_bytes))


def device_spec(
    total_bytes: int, capability: tuple[int, int], context_bytes: int, settings: AllocatorSettings
) -> DeviceSpec:
    """The planned device (validated: a context as large as the device leaves it nothing)."""
    if total_bytes <= 0:
        raise ValueError(f"the device memory must be positive, got {total_bytes}")
    if context_bytes < 0:
        raise ValueError(f"the context memory cannot be negative, got {context_bytes}")
    if context_bytes >= total_bytes:
        raise ValueError(
            f"--context-memory {format_bytes(context_bytes)} leaves nothing of "
            f"--device-memory {format_bytes(total_bytes)}"
        )
    return DeviceSpec(total_bytes, capability, context_bytes, settings)


@contextmanager
def planned_device(
    spec: DeviceSpec,
    on_snapshot: Callable[[str, dict[str, object]], None],
    *,
    defer: bool = True,
    flight_entries: int = FLIGHT_ENTRIES,
) -> Iterator[PlannedDevice]:
    """The emulation in place for ``spec`` (:func:`memforensics.plan.table.emulated`): torch as
    it was after. ``flight_entries``: the events the plan's own trace keeps, the last ones."""
    from memforensics.plan.table import emulated

    device = PlannedDevice(spec, flight_entries=flight_entries)
    with emulated(device, on_snapshot, defer=defer):
        yield device


def _shown_at_script(show: Callable[..., None]) -> Callable[..., None]:
    """``warnings.showwarning`` for a planned run: a warning is shown as python shows it, at
    once, and one that torch raised from inside the emulation (a C++ warning is placed at the
    innermost Python frame, the plan's) is placed at the script's line that called torch, where
    it is on a real GPU."""
    from memforensics.plan.values import where

    here = os.path.dirname(os.path.abspath(__file__))

    def shown(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if os.path.abspath(filename).startswith(here + os.sep):
            caller = sys._getframe(1)
            while caller.f_back is not None and caller.f_code.co_filename == warnings.__file__:
                caller = caller.f_back
            place, _, number = where(caller).rpartition(":")
            if place and number.isdigit():
                filename, lineno, line = place, int(number), None
        show(message, category, filename, lineno, file, line)

    return shown


def predicted_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is a predicted OOM, which :func:`run_planned` answers itself."""
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError)


def run_planned(
    spec: DeviceSpec,
    run: Callable[[], None],
    on_snapshot: Callable[[str, dict[str, object]], None],
    *,
    before: Callable[[], None] | None = None,
    after: Callable[[], None] | None = None,
    defer: bool = True,
    stop_after: int | None = None,
    steps: int | None = None,
    flight_entries: int = FLIGHT_ENTRIES,
) -> tuple[PlanResult, PlannedDevice]:
    """Run ``run`` on the planned device; ``before``/``after`` run inside the emulation (the
    CLI installs and closes capture there). Exceptions other than a predicted OOM propagate.
    ``defer``: large CPU tensors made while a module is built hold no host memory until read
    (off, they are made and initialised as python would). ``stop_after``: the run ends, as if
    the script had, once the device has served that many allocations. ``steps``: it ends
    when an optimizer comes to its step ``steps`` + 1 (:mod:`~memforensics.plan.step_limit`;
    :class:`~memforensics.plan.step_limit.StepsTaken` reaches ``run``). ``flight_entries``: the
    events the trace of the snapshot written when the script dumps none keeps, the last ones."""
    import torch

    from memforensics.plan.step_limit import limited

    snapshots: list[str] = []

    def written(path: str, snapshot: dict[str, object]) -> None:
        snapshots.append(path)
        on_snapshot(path, snapshot)

    oom: str | None = None
    shown = warnings.showwarning
    with warnings.catch_warnings():
        warnings.showwarning = _shown_at_script(shown)
        with (
            planned_device(spec, written, defer=defer, flight_entries=flight_entries) as device,
            limited(steps) as limit,
        ):
            device.stop_after = stop_after
            if before is not None:
                before()
            try:
                run()
            except torch.cuda.OutOfMemoryError as exc:
                oom = str(exc)
            except Stopped:
                pass
            finally:
                if after is not None:
                    after()
    said = list(device.said)
    if limit is not None and limit.taken == 0:
        said.append(
            f"--steps {steps} counts the steps of torch.optim optimizers, and the script took "
            "none: the limit ended nothing"
        )
    world = World.from_env()
    result = PlanResult(
        device_name=spec.name,
        device_bytes=spec.total_bytes,
        capability=f"{spec.capability[0]}.{spec.capability[1]}",
        context_bytes=spec.context_bytes,
        allocator_conf=device.spec.settings.to_conf(),
        peak_allocated_bytes=device.run_peak("allocated_bytes"),
        peak_reserved_bytes=device.run_peak("reserved_bytes"),
        peak_segments=device.run_peak("segment"),
        segments=device.segments(),
        fits=oom is None,
        oom_message=oom,
        script_snapshots=tuple(snapshots),
        warnings=tuple(said),
        steps=steps,
        rank=world.rank,
        world_size=world.world_size,
        nccl_bytes=device.outside_bytes,
        cuda_initialized=device.initialized,
        workers=tuple(device.workers),
        device_peak_bytes=device.peak_device,
        caught_ooms=tuple(device.ooms[:-1] if oom is not None else device.ooms),
    )
    fits = result.fits and not any(w.oom_message for w in result.workers)
    return replace(result, fits=fits and result.needed_bytes <= spec.total_bytes), device
