"""What ``torch.cuda`` and ``torch.accelerator`` answer for the planned device: the stand-ins
the emulation's table (:mod:`memforensics.plan.table`) puts in their place.

Device queries describe the planned device; every memory function of ``torch.cuda.memory``
answers from the allocator model (``memory_summary`` is PyTorch's own table over the model's
statistics); the history calls (``_record_memory_history``, ``_snapshot``, ``_dump_snapshot``)
record and write the predicted snapshot; synchronisation, streams, events, NVTX and the CUDA
RNG are harmless no-ops. ``torch.accelerator`` reaches the same answers through the bindings it
calls, so it names CUDA as the accelerator.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._device

from memforensics.plan import scratch, values
from memforensics.plan.device import OutOfScope, PlannedDevice

SnapshotWritten = Callable[[str, dict[str, Any]], None]
"""Writes each snapshot the script dumps itself (``_dump_snapshot(path)``) at its path."""


@dataclass(frozen=True)
class _Props:
    """``torch.cuda.get_device_properties()`` for the planned device."""

    name: str
    total_memory: int
    major: int
    minor: int
    multi_processor_count: int
    max_threads_per_multi_processor: int
    is_integrated: bool = False
    is_multi_gpu_board: bool = False
    L2_cache_size: int = 50 << 20
    warp_size: int = 32
    uuid: str = "memforensics-planned-device"

    def __repr__(self) -> str:
        return (
            f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory >> 20}MB, multi_processor_count="
            f"{self.multi_processor_count})"
        )


class Captures:
    """What a stream's or an event's wait asks of the CUDA graph captures underway: none,
    until the planned run puts its graphs here (:attr:`Stream.captures`)."""

    def capture_of(self, stream: object = None) -> object:
        """The capture underway on ``stream`` (the current stream by default), None if none."""
        return None

    def forbid_stream_wait(self, stream: int) -> None:
        """Raise what ``cudaStreamSynchronize``/``cudaStreamQuery`` of ``stream`` fails with
        while a capture forbids it."""

    def forbid_event_wait(self, capture: object) -> None:
        """Raise what ``cudaEventSynchronize``/``cudaEventQuery`` fail with on an event last
        recorded during ``capture`` (None: before any) while a capture forbids it."""

    def forbid_elapsed_time(self, *captures: object) -> None:
        """Raise what ``cudaEventElapsedTime`` fails with on events last recorded during
        ``captures`` (None: before any)."""


class Stream:
    """A stream or event: the plan has one timeline, so a wait waits for nothing, and fails
    only where CUDA refuses it during a graph capture (``captures``)."""

    captures: Captures = Captures()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.device = torch.device("cuda", 0)
        self.cuda_stream = 0

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return _nothing

    def synchronize(self) -> None:
        """``cudaStreamSynchronize``: nothing to wait for, refused as CUDA refuses it."""
        Stream.captures.forbid_stream_wait(int(self.cuda_stream))

    def query(self) -> bool:
        """``cudaStreamQuery``: all work done, refused as CUDA refuses it."""
        Stream.captures.forbid_stream_wait(int(self.cuda_stream))
        return True

    def record_event(self, event: Event | None = None) -> Event:
        """A new event (or ``event``) recorded now, as ``torch.cuda.Stream.record_event``
        returns it: code that overlaps copies waits on it or synchronizes it later."""
        if event is None:
            event = Event()
        event.record(self)
        return event


EVENT_RESOLUTION_MS = 0.0005
"""The least time a CUDA event pair measures: ``cudaEventElapsedTime`` has a resolution of
around half a microsecond."""


class Event(Stream):
    """``torch.cuda.Event`` on the planned device. The plan has one timeline, so waits do
    nothing; a timing event records the host's clock, and ``elapsed_time`` answers the host
    time between two records (never below CUDA's resolution), so a throughput the script
    divides by it is finite and positive, as on a GPU. It refuses what torch refuses: events
    made without ``enable_timing=True``, or not yet recorded."""

    def __init__(
        self,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
        external: bool = False,
    ) -> None:
        super().__init__()
        self.enable_timing = enable_timing
        self.recorded_at: float | None = None
        self.recorded_in: object = None  # the capture underway where it was last recorded

    def record(self, stream: object = None) -> None:
        self.recorded_at = time.perf_counter()
        self.recorded_in = Stream.captures.capture_of(stream)

    def synchronize(self) -> None:
        """``cudaEventSynchronize``, which torch calls only once the event was recorded."""
        if self.recorded_at is not None:
            Stream.captures.forbid_event_wait(self.recorded_in)

    def query(self) -> bool:
        """``cudaEventQuery`` (torch answers True for an event never recorded, unasked)."""
        if self.recorded_at is not None:
            Stream.captures.forbid_event_wait(self.recorded_in)
        return True

    def elapsed_time(self, end_event: object) -> float:
        if not (self.enable_timing and getattr(end_event, "enable_timing", False)):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        end: float | None = getattr(end_event, "recorded_at", None)
        if self.recorded_at is None or end is None:
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        ended_in = getattr(end_event, "recorded_in", None)
        Stream.captures.forbid_elapsed_time(self.recorded_in, ended_in)
        return max((end - self.recorded_at) * 1000.0, EVENT_RESOLUTION_MS)

    def __repr__(self) -> str:
        return (
            "<torch.cuda.Event uninitialized>" if self.recorded_at is None else "<torch.cuda.Event>"
        )


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


def stream_class(device: PlannedDevice) -> type:
    """``torch.cuda.Stream`` on the planned device: a stream the script makes is the next of
    its priority's pool (:func:`pooled_stream_id`), and allocations made while it is current
    (``with stream``, ``torch.cuda.stream(s)``, ``set_stream``) are on it, so the allocator
    model keeps their blocks in that stream's pool as PyTorch's does (FSDP's all-gather and
    reduce-scatter streams). Waits and events do nothing: the plan has one timeline."""

    class PlannedStream(Stream):
        drawn = [0] * STREAM_PRIORITIES  # streams taken from each priority's pool so far

        def __init__(self, device_: Any = None, priority: int = 0, **kwargs: Any) -> None:
            super().__init__()
            stream_id = kwargs.get("stream_id")
            if stream_id is None:
                level = min(max(-int(priority), 0), STREAM_PRIORITIES - 1)
                stream_id = pooled_stream_id(level, PlannedStream.drawn[level])
                PlannedStream.drawn[level] += 1
            self.cuda_stream = int(stream_id)
            self.stream_id = self.cuda_stream
            self.priority = priority
            self._outer: list[int] = []

        def __enter__(self) -> PlannedStream:
            self._outer.append(device.stream)
            device.stream = self.cuda_stream
            return self

        def __exit__(self, *exc: object) -> None:
            device.stream = self._outer.pop() if self._outer else 0

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Stream) and other.cuda_stream == self.cuda_stream

        def __hash__(self) -> int:
            return hash(self.cuda_stream)

        @staticmethod
        def priority_range() -> tuple[int, int]:
            """CUDA's (least, greatest) priority, clamped to the priorities PyTorch's stream
            pools are built for, as ``CUDAStream::priority_range`` answers."""
            return PRIORITY_RANGE

        def __repr__(self) -> str:
            return f"<torch.cuda.Stream device=cuda:0 cuda_stream={self.cuda_stream:#x}>"

    return PlannedStream


def external_stream_class(kind: type) -> type:
    """``torch.cuda.ExternalStream`` over ``kind``, the planned ``torch.cuda.Stream``: the
    stream whose handle is ``stream_ptr``. PyTorch's caching allocator keeps blocks by the
    ``cudaStream_t`` they were made on, so an external stream wrapping a handle that a
    ``torch.cuda.Stream`` gave out (``s.cuda_stream``) shares that stream's cached blocks, and
    any other handle is a stream of its own."""

    class ExternalStream(kind):  # type: ignore[misc]  # a class made per planned device
        def __init__(self, stream_ptr: int, device: Any = None, **kwargs: Any) -> None:
            super().__init__(stream_id=int(stream_ptr))

    return ExternalStream


STREAMS_PER_POOL = 32
"""Streams in each of CUDA's stream pools per device (``kStreamsPerPool``): PyTorch creates them
once and hands them out round-robin, so ``torch.cuda.Stream()`` made anew each epoch (a data
prefetcher's) is one of 32 streams, and the 33rd is the first again, whose cached blocks it
reuses."""

STREAM_PRIORITIES = 4
"""PyTorch's stream pools per device, one per priority (``max_compile_time_stream_priorities``):
priority 0 is the first, -1 the second, ..., lower ones the last."""


def pooled_stream_id(level: int, drawn: int) -> int:
    """The id of the stream ``torch.cuda.Stream()`` returns when ``drawn`` streams were already
    taken from the pool of priority ``-level``: ``getStreamFromPool`` takes the pool's counter
    modulo its size. Ids are distinct from the default stream's (0) and across pools."""
    return 1 + level * STREAMS_PER_POOL + drawn % STREAMS_PER_POOL


def on_planned_device(device: Any) -> bool:
    """Whether ``device`` (``torch.Event``'s or ``torch.Stream``'s) is the planned CUDA device:
    none names the current accelerator, which in a plan is CUDA; a bare index is CUDA's."""
    if device is None or isinstance(device, int):
        return True
    return bool(torch.device(device).type == "cuda")


class _AlsoTorchs(type):
    """The metaclass of a stand-in for one of torch's base classes: ``isinstance`` against the
    stand-in answers True for what torch's answers True for: the planned CUDA kind (a
    ``torch.cuda.Stream`` is a ``torch.Stream``) and torch's own class (a CPU event)."""

    also: tuple[type, ...]

    def __instancecheck__(cls, instance: object) -> bool:
        return type.__instancecheck__(cls, instance) or isinstance(instance, cls.also)


def device_generic_kinds(streams: Streams) -> tuple[type, type]:
    """``torch.Event`` and ``torch.Stream``, the device-generic classes (the
    ``torch.accelerator`` examples time and overlap with them): on the planned device, the
    current accelerator's when no device is named, they are the CUDA stand-ins (an event that
    times, a stream with its own id); on another device they are torch's own."""
    real_event, real_stream = torch.Event, torch.Stream

    class DeviceEvent(Event, metaclass=_AlsoTorchs):
        also = (Event, real_event)

        def __new__(cls, device: Any = None, **flags: Any) -> Any:
            if not on_planned_device(device):
                return real_event(device, **flags)
            return super().__new__(cls)

        def __init__(
            self,
            device: Any = None,
            *,
            enable_timing: bool = False,
            blocking: bool = False,
            interprocess: bool = False,
        ) -> None:
            super().__init__(enable_timing, blocking, interprocess)

    class DeviceStream(streams.kind, metaclass=_AlsoTorchs):  # type: ignore[misc,name-defined]
        also = (streams.kind, real_stream)

        def __new__(cls, device: Any = None, **options: Any) -> Any:
            if not on_planned_device(device):
                return real_stream(device, **options)
            return super().__new__(cls)

        def __init__(self, device: Any = None, **options: Any) -> None:
            super().__init__(device, **options)

    return DeviceEvent, DeviceStream


class Streams:
    """``torch.cuda``'s stream functions over the planned device's current stream."""

    def __init__(self, device: PlannedDevice) -> None:
        self.device = device
        self.kind = stream_class(device)
        self.external_kind = external_stream_class(self.kind)

    def external(self, data_ptr: int, device: object = None) -> Any:
        """``get_stream_from_external``: the stream whose handle is ``data_ptr``."""
        return self.kind(stream_id=int(data_ptr))

    def of(self, stream_id: int) -> Any:
        return self.kind(stream_id=stream_id)

    def current(self, device: object = None) -> Any:
        return self.of(self.device.stream)

    def default(self, device: object = None) -> Any:
        return self.of(0)

    def set(self, stream: Any) -> None:
        self.device.stream = int(getattr(stream, "cuda_stream", 0) or 0)

    @contextlib.contextmanager
    def using(self, stream: Any = None) -> Iterator[Any]:
        """``torch.cuda.stream(s)``: ``s`` current inside (None changes nothing)."""
        if stream is None:
            yield None
            return
        outer = self.device.stream
        self.set(stream)
        try:
            yield stream
        finally:
            self.device.stream = outer


PRIORITY_RANGE = (0, -3)
"""``cudaDeviceGetStreamPriorityRange``'s (0, -5) on current GPUs, clamped by PyTorch to its
``max_compile_time_stream_priorities`` (4) less one."""


class Cudart:
    """``torch.cuda._cudart``, what ``torch.cuda.cudart()`` returns and ``check_error``
    reads, on the planned device: the profiler's start and stop (what
    ``torch.cuda.profiler.profile()`` and Nsight Systems' capture ranges call) succeed and
    record nothing."""

    def cudaProfilerStart(self) -> int:  # the runtime's own name
        return 0  # cudaSuccess

    def cudaProfilerStop(self) -> int:  # the runtime's own name
        return 0  # cudaSuccess

    class cudaError:  # the runtime's own name
        success = 0

        def __init__(self, code: int) -> None:
            self.code = code

    def cudaGetErrorString(self, error: object) -> str:  # the runtime's own name
        return "no error"


def noop() -> Callable[..., None]:
    """A fresh no-op for one name: torch._dynamo, if the script imports it, indexes
    ``torch.cuda``'s functions and refuses one object under names it treats differently."""

    def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    return nothing


def called_now(function: Callable[[], Any], **kwargs: Any) -> None:
    """``torch.cuda._lazy_call``: ``function`` run now. torch queues it until CUDA is
    initialized (``torch.cuda._queued_calls``, run by ``_lazy_init``); the planned device's
    state (its generators' seeds and offsets) is there from the start, and the stand-in
    ``_lazy_init`` runs no queue."""
    function()


_CAPTURE = ("memforensics.capture", "memforensics.backends")
"""memforensics' own capture, which the plan installs to write its snapshots: what it asks
the device is not the script's doing."""


def initializing(device: PlannedDevice, answer: Callable[..., Any]) -> Callable[..., Any]:
    """``answer``, a fresh function for one name, that first marks CUDA initialized on
    ``device``: for the ``torch.cuda`` functions that initialize CUDA on a GPU (they run
    ``torch.cuda._lazy_init``), after which the process holds a CUDA context. Capture's own
    questions (its journal reads ``mem_get_info``) initialize nothing."""

    def initialized(*args: Any, **kwargs: Any) -> Any:
        caller = str(sys._getframe(1).f_globals.get("__name__", ""))
        if not caller.startswith(_CAPTURE):
            device.initialize()
        return answer(*args, **kwargs)

    return initialized


class Nvtx:
    """``torch.cuda.nvtx``'s binding on the planned device: ranges nest and are counted, nothing
    is recorded. torch's own ``range`` (a context manager and a decorator), ``range_push`` /
    ``range_pop``, ``mark`` and ``range_start`` / ``range_end`` run over it unchanged."""

    def __init__(self) -> None:
        self.depth = 0
        self.started = 0

    def rangePushA(self, msg: str) -> int:  # the binding's own name
        self.depth += 1
        return self.depth - 1

    def rangePop(self) -> int:  # the binding's own name
        self.depth = max(self.depth - 1, 0)
        return self.depth

    def markA(self, msg: str) -> None:  # the binding's own name
        return None

    def rangeStartA(self, msg: str) -> int:  # the binding's own name
        self.started += 1
        return self.started

    def rangeEnd(self, range_id: int) -> None:  # the binding's own name
        return None

    def deviceRangeStart(self, msg: str, stream: int = 0) -> object:
        return object()

    def deviceRangeEnd(self, handle: object, stream: int = 0) -> None:
        return None


def nvtx_emitted(emitter: Any) -> Any:
    """``torch.autograd.profiler.emit_nvtx.__enter__`` on the planned device: the autograd
    profiler in its NVTX state would push a range per operator through the NVTX binding, which
    records nothing in a plan (:class:`Nvtx`) and which the CPU build's profiler refuses
    ("compiled without CUDA"). Torch's checks stay: disabled it does nothing, and it is not
    reentrant; the device is synchronized, as torch does, which a plan answers at once."""
    if not emitter.enabled:
        return None
    if emitter.entered:
        raise RuntimeError("NVTX annotation context manager is not reentrant")
    emitter.entered = True
    torch.cuda.synchronize()
    return emitter


def nvtx_emission_ended(emitter: Any, *exc: object) -> bool:
    """``emit_nvtx.__exit__``: the device synchronized, as torch does; no exception kept."""
    if emitter.enabled:
        torch.cuda.synchronize()
    return False


TELEMETRY = (
    "GPU telemetry (utilization, memory activity, temperature, power, clock) reads 0 in a "
    "plan: no kernel runs on a device"
)
NOT_CACHING = (
    "the caching allocator stays on in a plan: caching_allocator_enable(False) is not modelled"
)
PLUGGABLE = "a pluggable allocator is out of scope: the plan models PyTorch's own caching allocator"


class Answers:
    """``torch.cuda``'s device queries and memory functions over the planned device.

    ``malloc`` allocates a block or raises the predicted OOM as an operator's allocation does,
    for ``caching_allocator_alloc``.
    """

    def __init__(
        self,
        device: PlannedDevice,
        written: SnapshotWritten,
        notes: values.Notes,
        malloc: Callable[[int], Any],
    ) -> None:
        self.device = device
        self.spec = device.spec
        capability = self.spec.capability
        self.props = _Props(
            self.spec.name,
            self.spec.total_bytes,
            *capability,
            multi_processor_count=scratch.multiprocessors(capability),
            max_threads_per_multi_processor=scratch.threads_per_multiprocessor(capability),
        )
        self.written = written
        self.notes = notes
        self.malloc = malloc
        self.raw: dict[int, Any] = {}

    # -- the device

    def capability(self, device: object = None) -> tuple[int, int]:
        return self.spec.capability

    def properties(self, device: object = None) -> _Props:
        return self.props

    def name(self, device: object = None) -> str:
        return self.spec.name

    def bf16(self, including_emulation: bool = True) -> bool:
        return self.spec.capability >= (8, 0)

    # -- memory statistics

    def allocated(self, device: object = None) -> int:
        return self.device.figure("allocated_bytes", "current")

    def max_allocated(self, device: object = None) -> int:
        return self.device.figure("allocated_bytes", "peak")

    def reserved(self, device: object = None) -> int:
        return self.device.figure("reserved_bytes", "current")

    def max_reserved(self, device: object = None) -> int:
        return self.device.figure("reserved_bytes", "peak")

    def stats(self, device: object = None) -> dict[str, int]:
        """``memory_stats()``: the model's figures, under every key CUDA's allocator reports."""
        return dict(sorted(self.device.stats().items()))

    def nested(self, device: object = None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in self.stats().items():
            node = out
            *path, last = key.split(".")
            for part in path:
                node = node.setdefault(part, {})
            node[last] = value
        return out

    def summary(self, device: object = None, abbreviated: bool = False) -> str:
        """PyTorch's own ``memory_summary`` table over the model's statistics, with its rows
        for the large and the small pool unless ``abbreviated``."""
        return _torch_table(self.stats(), abbreviated)

    def reset_peaks(self, device: object = None) -> None:
        self.device.reset_peaks()

    def reset_accumulated(self, device: object = None) -> None:
        self.device.reset_accumulated()

    def nothing(self, device: object = None) -> None:
        return None

    def empty_cache(self) -> None:
        self.device.empty_cache()

    def mem_get_info(self, device: object = None) -> tuple[int, int]:
        return self.device.mem_get_info()

    def fraction(self, device: object = None) -> float:
        return self.device.fraction

    def set_fraction(self, fraction: float, device: object = None) -> None:
        self.device.set_memory_fraction(fraction)

    def host_stats(self) -> dict[str, Any]:
        """Pinned host memory is not modelled: what torch answers before it pins any."""
        return {}

    def segments(self, mempool_id: Any = None, include_traces: bool = True) -> list[Any]:
        """``memory_snapshot()``: the segments of the predicted snapshot; with ``mempool_id``,
        those of that private pool (a ``MemPool``'s, a CUDA graph's)."""
        found: list[Any] = self.device.snapshot()["segments"]
        if mempool_id is None:
            return found
        return [s for s in found if tuple(s["segment_pool_id"]) == tuple(mempool_id)]

    def used(self, device: object = None) -> int:
        """``device_memory_used`` (NVML's used memory, as ``nvidia-smi`` shows it): the
        device less what ``mem_get_info`` finds free, the context and what is reserved."""
        free, total = self.mem_get_info()
        return total - free

    def processes(self, device: object = None) -> str:
        """``list_gpu_processes``: this process, holding what it reserved and its context."""
        held = self.used()
        return f"GPU:0\nprocess {os.getpid():>10d} uses {held / MiB:>12.3f} MB GPU memory"

    def telemetry(self, device: object = None) -> int:
        """NVML's readings of a running GPU (utilization, memory activity, temperature, power,
        clock): none exists in a plan, so 0, said once."""
        self.notes.once("telemetry", TELEMETRY)
        return 0

    def backend(self) -> str:
        return "native"

    # -- raw allocations

    def raw_alloc(self, size: int, device: object = None, stream: object = None) -> int:
        """``caching_allocator_alloc``: a block of the model, by its address."""
        block = self.malloc(int(size))
        self.raw[int(block.address)] = block
        return int(block.address)

    def raw_delete(self, mem_ptr: int) -> None:
        """``caching_allocator_delete``: the block at ``mem_ptr`` back to the model."""
        block = self.raw.pop(int(mem_ptr), None)
        if block is None:
            raise RuntimeError("invalid device pointer: " + hex(int(mem_ptr)))
        self.device.free(block)

    def caching(self, value: bool = True) -> None:
        if not value:
            self.notes.once("caching", NOT_CACHING)

    @contextlib.contextmanager
    def caching_disabled(self) -> Iterator[None]:
        self.caching(False)
        yield

    # -- history and snapshots

    def record(
        self,
        enabled: Any = "all",
        context: Any = "all",
        stacks: str = "all",
        max_entries: int = 2**63 - 1,
        device: object = None,
        clear_history: bool = False,
        **kwargs: Any,
    ) -> None:
        """``_record_memory_history``, the old spelling (``enabled=True``) included. ``stacks``
        changes nothing: the plan records Python's stacks and the native frames it knows."""
        mode: str | None = ("all" if enabled else None) if isinstance(enabled, bool) else enabled
        self.device.record_history(
            mode, max_entries=max_entries, context=context, clear=clear_history
        )

    def snapshot(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.device.snapshot()

    def dump(self, filename: str = "dump_snapshot.pickle") -> None:
        self.written(str(filename), self.device.snapshot())  # written at the script's path

    # -- torch.accelerator's bindings

    def accelerator(self) -> torch.device:
        return torch.device("cuda")

    def index(self, *args: Any) -> int:
        return 0

    def device_stats(self, device_index: object = None) -> dict[str, Any]:
        return self.nested()

    def initialized(self) -> bool:
        return True


MiB = 1 << 20
_SUMMARY = torch.cuda.memory.memory_summary


def _torch_table(stats: dict[str, int], abbreviated: bool) -> str:
    """``stats`` in PyTorch's own ``memory_summary`` table: torch's function, reading ``stats``
    where it reads ``memory_stats()``."""
    memory = torch.cuda.memory
    answering = memory.memory_stats
    memory.memory_stats = lambda device=None: stats
    try:
        return str(_SUMMARY(0, abbreviated=abbreviated))
    finally:
        memory.memory_stats = answering


def current_allocator() -> Callable[[], object]:
    """``torch._C._cuda_getAllocator`` (what ``torch.cuda.memory._get_current_allocator`` wraps):
    the one handle of the native caching allocator the plan models, a
    ``torch._C._cuda_CUDAAllocator`` as on a GPU, made without ``__init__``: the CPU build's
    class is a stand-in whose ``__new__`` and ``__init__`` refuse construction, so it is made by
    ``object.__new__``; a CUDA build's is a pybind11 class, which refuses ``object.__new__``
    ("not safe") and is made by its own ``__new__``."""
    kind = torch._C._cuda_CUDAAllocator
    try:
        handle = object.__new__(kind)
    except TypeError:
        handle = kind.__new__(kind)
    return lambda: handle


def pluggable(*args: Any, **kwargs: Any) -> None:
    """``change_current_allocator``: out of scope, in one line."""
    raise OutOfScope(PLUGGABLE)


class PluggableAllocator(torch.cuda.memory._CUDAAllocator):  # type: ignore[misc, unused-ignore]
    """``CUDAPluggableAllocator``: out of scope, in one line, once a script makes one; still
    the class, so a script's ``isinstance(allocator, CUDAPluggableAllocator)`` runs (and is
    False for the native allocator, as on a GPU)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise OutOfScope(PLUGGABLE)


def one_device_forward(self: Any, *inputs: Any, **kwargs: Any) -> Any:
    return self.module(*inputs, **kwargs)


def storage_to(original: Callable[..., Any]) -> Callable[..., Any]:
    def to(storage: Any, device: Any, non_blocking: bool = False) -> Any:
        if torch.device(device).type == "cuda" and storage.device.type != "meta":
            return torch.empty(storage.nbytes(), dtype=torch.uint8, device="cuda").untyped_storage()
        return original(storage, device, non_blocking)

    return to


def _names_device(location: Any) -> bool:
    """Whether ``torch.load``'s ``map_location`` sends every storage to CUDA."""
    if isinstance(location, dict):
        return bool(location) and all(_names_device(v) for v in location.values())
    if isinstance(location, (str, torch.device)):
        return bool(torch.device(location).type == "cuda")
    return False


def load_onto_device(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.load``'s reading of a checkpoint: with ``map_location`` onto CUDA each storage is
    a stand-in made from its size (torch's own ``skip_data`` reading: no byte is read into host
    memory); with ``mmap=True`` the mapped file's pages are never touched by the move either."""
    from torch import serialization

    def load(zip_file: Any, map_location: Any, *args: Any, **kwargs: Any) -> Any:
        state = serialization._serialization_tls
        if not _names_device(map_location) or state.skip_data:
            return original(zip_file, map_location, *args, **kwargs)
        state.skip_data = True
        try:
            return original(zip_file, map_location, *args, **kwargs)
        finally:
            state.skip_data = False

    return load


def cuda_for_meta(original: Callable[..., str]) -> Callable[..., str]:
    def device_type(*args: Any) -> str:
        found = original(*args)
        return "cuda" if found == "meta" else found

    return device_type


def default_tensor_type(original: Callable[[Any], None]) -> Callable[[Any], None]:
    """``set_default_tensor_type(torch.cuda.HalfTensor)`` (Meta's Llama reference builds its
    model so): the type's dtype, and ``"cuda"`` as the default device. A CPU type puts the
    default device back."""

    def set_default_tensor_type(kind: Any) -> None:
        found = torch._utils._import_dotted_name(kind) if isinstance(kind, str) else kind
        cuda = getattr(found, "is_cuda", None)
        if cuda:
            torch.set_default_dtype(found.dtype)
            torch.set_default_device("cuda")
            return
        if cuda is False and torch.utils._device.CURRENT_DEVICE is not None:
            torch.set_default_device(None)
        original(kind)

    return set_default_tensor_type


def default_device(original: Callable[[Any], None]) -> Callable[[Any], None]:
    """``set_default_device``: ``"cuda"`` makes stand-ins on ``meta``. The default still names
    the device the script asked for, so a factory call tells it from the script's own
    ``meta``."""

    def set_default_device(device: Any) -> None:
        if isinstance(device, (str, torch.device)) and torch.device(device).type == "cuda":
            original("meta")
            torch.utils._device.CURRENT_DEVICE = torch.device(device)
        else:
            original(device)

    return set_default_device
