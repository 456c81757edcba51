"""``torch.profiler`` under a plan: the CPU profiled at its normal cost, the planned device's
memory in its memory timeline.

The CPU build has no CUDA profiler. Asked for CUDA activity (``ProfilerActivity.CUDA``, or
``use_device="cuda"`` now that ``torch.cuda.is_available()`` says yes), the profiler tries to
record a CUDA event at every operator, fails, and builds a C++ stack trace for the failure each
time: a planned forward runs hundreds of times slower. Under the plan the profiler records what
the CPU build can (operators, shapes, CPU memory) and nothing for CUDA. It records the
operators the script's code calls, not the plan's own work under each (the dispatch mode turns
record functions off for it, :class:`~memforensics.plan.emulate.StorageMode`), and no Python
calls: the Python tracer (``with_stack``) would record every Python call of the plan's.

The planned device's blocks never pass through a C++ allocator, so the profiler sees none of
them: ``export_memory_timeline`` would find no event on ``cuda:0``. While a profiler with
``profile_memory=True`` runs, the blocks the planned device hands out and takes back are
recorded, and its memory profile's timeline carries them for ``cuda:0`` (blocks live when it
started as pre-existing), with PyTorch's "unknown" category: the plan does not rebuild the
profiler's data-flow categories.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch._C._profiler import ProfilerActivity, ProfilerState
from torch.autograd import profiler as autograd_profiler
from torch.profiler import _memory_profiler as memory_profiler
from torch.profiler import profiler as torch_profiler

from memforensics.plan.device import PlannedDevice
from memforensics.plan.patches import Replacement

_DEVICE = "cuda:0"
_KINETO = ProfilerState.KINETO
_FALLBACK = ProfilerState.KINETO_GPU_FALLBACK


class _Timeline:
    """A memory profile's timeline with the planned device's blocks added; everything else
    (its categories) is the profile's own."""

    def __init__(self, profile: Any, planned: list[tuple[int, Any, Any, int]]) -> None:
        self._profile = profile
        self._categories = profile._categories
        self.timeline = tuple(sorted((*profile.timeline, *planned), key=lambda e: e[0]))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._profile, name)


class _Recording:
    """The planned device's blocks between a profiler's start and stop, as the timeline's
    ``(time_ns, action, (key, version), bytes)`` entries."""

    def __init__(self, device: PlannedDevice) -> None:
        key = memory_profiler.Key(torch.device(_DEVICE))
        self.entries: list[tuple[int, Any, Any, int]] = [
            (-1, memory_profiler.Action.PREEXISTING, (key, 0), size)
            for _, size in device.live_blocks()
        ]
        self._key = key
        self._stop = device.listen(self._block)

    def _block(self, address: int, size: int, sign: int) -> None:
        action = memory_profiler.Action.CREATE if sign > 0 else memory_profiler.Action.DESTROY
        self.entries.append((time.time_ns(), action, (self._key, 0), size))

    def stop(self) -> None:
        self._stop()


def _cpu_only(original: Callable[..., None]) -> Callable[..., None]:
    """``autograd.profiler.profile.__init__`` that records no CUDA activity. A profiler made
    disabled (``profile(enabled=False, use_cuda=True)``, a script's profiling flag left off)
    returns from torch's ``__init__`` before it sets any activity, and is left as it is."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if not self.enabled:
            return
        if self.use_device == "cuda":
            self.use_device = None
        self.kineto_activities.discard(ProfilerActivity.CUDA)
        if self.profiler_kind == _FALLBACK:
            self.profiler_kind = _KINETO

    return __init__


def _no_python_tracer(original: Callable[..., Any]) -> Callable[..., Any]:
    """``autograd.profiler.profile.config`` without the Python tracer: the profile keeps
    ``with_stack`` and ``with_modules`` as asked (``export_stacks`` still writes its file), but
    the profiler records no Python call, whose tracer would record each of the plan's own
    Python calls under every operator (a hundred times the script's: its export then takes
    minutes where a GPU run's takes a second)."""

    def config(self: Any, create_trace_id: bool = False) -> Any:
        asked = self.with_stack, self.with_modules
        self.with_stack = self.with_modules = False
        try:
            return original(self, create_trace_id)
        finally:
            self.with_stack, self.with_modules = asked

    return config


def rows(device: PlannedDevice) -> list[Replacement]:
    """What the plan replaces in ``torch.profiler``, as rows of the emulation's table."""
    kineto = torch_profiler._KinetoProfile
    start, stop, profile = kineto.start_trace, kineto.stop_trace, kineto._memory_profile
    recordings: weakref.WeakKeyDictionary[Any, _Recording] = weakref.WeakKeyDictionary()
    finished: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()

    def start_trace(self: Any) -> None:
        start(self)
        if self.profile_memory:
            recordings[self] = _Recording(device)

    def stop_trace(self: Any) -> None:
        stop(self)
        recording = recordings.pop(self, None)
        if recording is not None:
            recording.stop()
            finished[self] = recording.entries

    def memory_profile(self: Any) -> Any:
        return _Timeline(profile(self), finished.get(self, []))

    planned = "its memory timeline carries the planned device's blocks"
    return [
        Replacement(
            autograd_profiler.profile,
            "__init__",
            _cpu_only(autograd_profiler.profile.__init__),
            "CUDA activity would fail to record an event for every operator: CPU only",
        ),
        Replacement(
            autograd_profiler.profile,
            "config",
            _no_python_tracer(autograd_profiler.profile.config),
            "the Python tracer (with_stack) would record the plan's own Python calls under "
            "every operator: no Python stacks",
        ),
        Replacement(kineto, "start_trace", start_trace, planned),
        Replacement(kineto, "stop_trace", stop_trace, planned),
        Replacement(kineto, "_memory_profile", memory_profile, planned),
    ]
