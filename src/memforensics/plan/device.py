"""The planned device: one emulated CUDA device whose memory is the caching allocator model.

Every storage the script puts on the device becomes a block of
:class:`memforensics.allocator.DeviceCachingAllocator`, allocated and freed at the moment
PyTorch would, with the Python stack ``stacks="python"`` records (and, under a block whose kind
the plan made it knowing, a workspace, the native frames a GPU's trace shows there with
``stacks="all"``, whatever stacks were asked for). The device answers
``torch.cuda``'s memory statistics and writes snapshots in ``torch.cuda.memory._snapshot()``'s
format, so every memforensics command reads them as it reads a real GPU's. Plain Python: this
module never imports torch (the error it raises on OOM is handed in).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import CodeType, FrameType
from typing import Any, TypeVar

from memforensics._layout import PEAK_ALLOCATED, PREDICTED_KEY
from memforensics.allocator import AllocatorSettings, Block, DeviceCachingAllocator, apply_conf
from memforensics.backends.sim import format as fmt

_T = TypeVar("_T")

CONF_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
"""Where PyTorch reads its allocator settings when the allocator is first used
(``CUDAAllocatorConfig::instance``), the first one set."""

OomObserver = Callable[[int, int, int, int], None]
"""``(device, allocation_bytes, device_total_bytes, device_free_bytes)``, as torch calls it."""
BlockListener = Callable[[int, int, int], None]
"""``(address, size, sign)``: a block of ``size`` bytes at ``address`` handed out (sign 1) or
returned (sign -1), as PyTorch reports blocks to its profiler."""

_HERE = os.path.dirname(os.path.abspath(__file__))
FLIGHT_ENTRIES = 100_000
"""Events the plan keeps of its own, by default, for the snapshot it writes when the script
dumps none, the last ones as ``_record_memory_history(max_entries=N)`` keeps them: as many as
``memforensics.install``'s default ``max_entries``, enough for the steps of a run that a plan
is asked for (a step of a 2.7B-parameter model makes about 10,000). The figures the plan
prints come from the allocator's statistics, never from these events."""
_STATISTICS = (
    "allocation",
    "allocated_bytes",
    "active",
    "active_bytes",
    "requested_bytes",
    "reserved_bytes",
    "segment",
    "inactive_split",
    "inactive_split_bytes",
)
"""The allocator's ``Stat`` statistics, each with a current value, a peak and running totals,
for the aggregate and for each kind of pool."""
_OVERSIZE = ("oversize_allocations", "oversize_segments")
"""The allocator's ``Stat`` statistics kept for the aggregate alone."""


class Stopped(BaseException):
    """The planned run has served the allocations it was asked to run for (a check that need
    not run the script to its end); a ``BaseException``, so the script's own ``except
    Exception`` lets it through, as it lets ``KeyboardInterrupt``."""


class OutOfScope(RuntimeError):
    """The script needs what the plan does not model (distributed collectives)."""


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """What the plan emulates: the device's size and capability, the CUDA context's share, and
    the allocator's settings."""

    total_bytes: int
    capability: tuple[int, int]
    context_bytes: int
    settings: AllocatorSettings

    @property
    def name(self) -> str:
        """The name ``get_device_name()`` answers: it says the device is planned."""
        major, minor = self.capability
        return f"memforensics planned device (sm_{major}{minor})"

    @property
    def usable_bytes(self) -> int:
        """What ``cudaMalloc`` can hand the allocator: the device less the CUDA context."""
        return max(self.total_bytes - self.context_bytes, 0)

    def predicted_record(self) -> dict[str, Any]:
        """What marks every snapshot of the plan as predicted (its sidecar's ``predicted``, the
        snapshot's own :data:`~memforensics._layout.PREDICTED_KEY`): the planned device."""
        major, minor = self.capability
        return {
            "device_total_bytes": self.total_bytes,
            "capability": f"{major}.{minor}",
            "context_bytes": self.context_bytes,
            "allocator_settings": self.settings.to_conf(),
        }


def _format_size(nbytes: int) -> str:
    """Bytes as torch's ``format_size`` prints them in its OOM message."""
    if nbytes <= 1024:
        return f"{nbytes} bytes"
    for limit, divisor, unit in ((1 << 20, 1 << 10, "KiB"), (1 << 30, 1 << 20, "MiB")):
        if nbytes <= limit:
            return f"{nbytes / divisor:.2f} {unit}"
    return f"{nbytes / (1 << 30):.2f} GiB"


class _StackCapture:
    """The caller's Python frames, innermost first, without the plan's own or torch's dispatch
    machinery (which a real run never shows): frames cached per code position, stacks interned.

    A code position is keyed by its code object's ``id`` and the frame's last instruction, not
    by the code object itself: a code object hashes its whole contents (bytecode, constants,
    names) on every lookup, more than a microsecond for a large function, on each of the
    dozens of frames under every allocation. The cache holds each code object it keys, so no
    other takes its ``id`` while its positions are kept.

    Stacks seen before are found in a tree of code positions, innermost first, one node per
    distinct chain of callers: a walk through known nodes takes the stack kept at its end, with
    no frame described and no stack built, hashed or compared (an allocation's stack is a few
    dozen frames, and most allocations repeat a chain seen before). A node maps a caller's last
    instruction to ``(code, next node)``, the code object compared by identity; a second code
    at the same instruction is keyed by ``(id(code), instruction)``. The stack is kept under
    the key None of the node where the chain ends; a chain that stops at autograd's engine
    (``on_autograd_thread``) ends in ``(code, None, stack)``."""

    _LIMIT = 1 << 16

    def __init__(self, skipped_prefixes: tuple[str, ...]) -> None:
        self.skipped = skipped_prefixes
        self._frames: dict[tuple[int, int], fmt.Frame | None] = {}
        self._codes: dict[int, CodeType] = {}
        self._stacks: dict[fmt.Stack, fmt.Stack] = {}
        self._chains: dict[bool, dict[Any, Any]] = {False: {}, True: {}}
        self._nodes = 0

    def __call__(self, *, on_autograd_thread: bool = False) -> fmt.Stack:
        """The stack now; ``on_autograd_thread``: only the frames autograd's engine runs (a
        hook's, a custom ``Function``'s backward), which on a GPU run on the engine's device
        thread with no frame of the script's below them; none where the engine was not
        entered from Python."""
        start = sys._getframe(2)
        frame: FrameType | None = start
        node: Any = self._chains[on_autograd_thread]
        while frame is not None:
            code = frame.f_code
            entry = node.get(frame.f_lasti)
            if entry is None or entry[0] is not code:
                entry = node.get((id(code), frame.f_lasti))
                if entry is None:
                    return self._walked(start, on_autograd_thread)
            node = entry[1]
            if node is None:  # autograd's engine entered here
                return entry[2]  # type: ignore[no-any-return]
            frame = frame.f_back
        stack = node.get(None)
        return self._walked(start, on_autograd_thread) if stack is None else stack

    def _walked(self, start: FrameType, on_autograd_thread: bool) -> fmt.Stack:
        """The stack under ``start``, described frame by frame, and its chain kept."""
        frames: list[fmt.Frame] = []
        chain: list[tuple[CodeType, int]] = []
        frame: FrameType | None = start
        cache = self._frames
        while frame is not None:
            code = frame.f_code
            chain.append((code, frame.f_lasti))
            if on_autograd_thread and _enters_engine(code):
                break
            key = (id(code), frame.f_lasti)
            found = cache.get(key, _UNSEEN)
            if found is _UNSEEN:
                found = self._remembered(key, frame)
            if found is not None:
                frames.append(found)  # type: ignore[arg-type]  # not _UNSEEN here
            frame = frame.f_back
        if on_autograd_thread and frame is None:
            frames = []
        stack = tuple(frames)
        if len(self._stacks) >= self._LIMIT or self._nodes >= self._LIMIT:
            self._forget()
        stack = self._stacks.setdefault(stack, stack)
        self._chain(self._chains[on_autograd_thread], chain, stack, stopped=frame is not None)
        return stack

    def _chain(
        self,
        node: dict[Any, Any],
        chain: list[tuple[CodeType, int]],
        stack: fmt.Stack,
        *,
        stopped: bool,
    ) -> None:
        """Keep the chain of positions ``chain`` from ``node`` (innermost first) as leading to
        ``stack``; ``stopped``: its last position is autograd's engine entry, which ends it."""
        for code, lasti in chain[:-1] if stopped else chain:
            entry = node.get(lasti)
            if entry is None or entry[0] is not code:
                entry = node.get((id(code), lasti))
            if entry is None:
                key: Any = lasti if lasti not in node else (id(code), lasti)
                entry = node[key] = (code, {})
                self._nodes += 1
            node = entry[1]
        if stopped:
            code, lasti = chain[-1]
            entry = (code, None, stack)
            key = lasti if node.get(lasti, entry)[0] is code else (id(code), lasti)
            node[key] = entry
        else:
            node[None] = stack

    def _forget(self) -> None:
        """Drop every kept position, chain and stack (their count is bounded)."""
        self._frames.clear()
        self._codes.clear()
        self._stacks.clear()
        self._chains = {False: {}, True: {}}
        self._nodes = 0

    def _remembered(self, key: tuple[int, int], frame: FrameType) -> fmt.Frame | None:
        """``frame`` described, and kept for its code position (its code object held with it)."""
        found = self._described(frame)
        if len(self._frames) >= self._LIMIT:
            self._forget()
        self._codes[key[0]] = frame.f_code
        self._frames[key] = found
        return found

    def _described(self, frame: FrameType) -> fmt.Frame | None:
        """``frame`` as a stack names it; None for the plan's own and torch's machinery."""
        filename = frame.f_code.co_filename
        if filename.startswith(self.skipped):
            return None
        return (filename, frame.f_lineno or 0, frame.f_code.co_name)


_UNSEEN = object()
"""A code position the stack cache has not described yet (None is a skipped frame's)."""


_ENGINE_ENTRY = ("_engine_run_backward", os.path.join("torch", "autograd", "graph.py"))
"""Where torch's Python hands a backward to autograd's engine (``torch.autograd.backward`` and
``torch.autograd.grad`` both call it)."""


def _enters_engine(code: CodeType) -> bool:
    """Whether ``code`` is torch's call into autograd's engine."""
    name, path = _ENGINE_ENTRY
    return code.co_name == name and code.co_filename.endswith(path)


@dataclass(frozen=True)
class WorkerFigures:
    """One worker process's own caching allocator over its run on the device: its peaks, its
    CUDA context (where it initialized CUDA) and the OOM it was predicted to raise."""

    name: str
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    peak_segments: int
    cuda_initialized: bool
    oom_message: str | None


class PlannedDevice:
    """Device 0 of the plan: the allocator model, its history, its OOM observers.

    Frees arrive from storage finalizers, which the garbage collector may run in the middle of
    any operation; they are queued while the device is busy and applied before the next one.
    """

    def __init__(
        self,
        spec: DeviceSpec,
        *,
        skipped_prefixes: tuple[str, ...] = (),
        flight_entries: int = FLIGHT_ENTRIES,
    ) -> None:
        self.spec = spec
        self.index = 0
        self._allocator = DeviceCachingAllocator(
            spec.settings,
            capacity=spec.usable_bytes,
            device_total=spec.total_bytes,
            on_trace=self._on_trace,
        )
        self._stack = _StackCapture((_HERE, *skipped_prefixes))
        self.backward = False  # on autograd's device thread: only the engine's own frames
        self._lock = threading.RLock()
        self._busy = False
        self._pending: deque[tuple[Block, fmt.Stack | None]] = deque()
        """Frees not yet applied, each with the stack at the free where the history records
        one (``context="all"``), else None."""
        self._trace: deque[fmt.Entry] = deque(maxlen=1)
        self._flight: deque[fmt.Entry] = deque(maxlen=max(1, flight_entries))
        self.events = 0  # allocator events of the whole run, kept in the flight recorder or not
        self._recording: str | None = None
        self._free_stacks = False
        self._op_stack: fmt.Stack | None = None
        """The stack the allocator operation running now gathered (PyTorch's ``context``):
        a ``malloc``'s always, a ``free``'s or ``empty_cache``'s only with ``context="all"``;
        None where it gathered none, and each event then carries its block's own
        (:meth:`_on_trace`)."""
        self._metadata = ""
        self._observers: list[OomObserver] = []
        self._listeners: list[BlockListener] = []
        self.fraction = 1.0
        self._reset_from: dict[tuple[int, str], int] = {}
        """Each allocator's peaks as they stood when the script last reset them, by the
        allocator's id and the statistic's name (:meth:`run_peak`)."""
        self.ooms: list[str] = []  # PyTorch's message for each OOM raised, in order
        self.stream = 0  # the current stream: what the script's allocations are made on
        self.outside_bytes = 0  # NCCL's buffers: device memory outside PyTorch, not the context
        self.served = 0  # allocations served
        self.said: list[str] = []  # where this run differs from a real one, each said once
        self.stop_after: int | None = None  # allocations after which the run ends (Stopped)
        self._settled = False  # whether the allocator has read the environment's settings
        self.initialized = False
        """Whether the script initialized CUDA: made a tensor on the device, or called what
        initializes CUDA on a GPU (:meth:`initialize`). A process that never does holds no
        CUDA context."""
        self._main = self._allocator  # the script's own process's allocator
        self._main_initialized = False
        self._worker: str | None = None  # the worker process running now, by name
        self._owner: dict[int, DeviceCachingAllocator] = {}  # a worker's live blocks, by id
        self._held: dict[str, int] = {}  # ended, unjoined workers: their reserved + context
        self.workers: list[WorkerFigures] = []
        self.peak_device = 0
        """The most device memory every process on it held at once: the script's reserved
        memory and context, NCCL's buffers, and its worker processes' (:meth:`begin_worker`)."""
        self._limit_by(spec.settings)

    def initialize(self) -> None:
        """CUDA initialized, as PyTorch's lazy initialization does it: the process holds its
        CUDA context from now on, and the allocator's settings are those in the environment
        then (:meth:`_settle`)."""
        self._settle()
        self.initialized = True

    def _settle(self) -> None:
        """The first use of the allocator: the settings it reads from the environment as the
        script left it (a script that sets ``PYTORCH_ALLOC_CONF`` before it first uses the
        device is planned with them), once per process."""
        if self._settled or self._worker is not None:
            return
        self._settled = True
        conf = next((os.environ[name] for name in CONF_ENV if name in os.environ), None)
        if conf is not None:
            self._configure(AllocatorSettings(), conf)

    def set_allocator_settings(self, conf: str) -> None:
        """``torch.cuda.memory._set_allocator_settings(conf)``: ``conf`` read over the settings
        now (those of the environment, where the allocator was not used yet), and followed by
        later requests."""
        self._settle()
        self._configure(self.spec.settings, conf)

    def _configure(self, base: AllocatorSettings, conf: str) -> None:
        """``conf`` read over ``base``, as ``CUDAAllocatorConfig::parseArgs`` reads it: the
        settings the allocator follows from now on, and the ones the plan and its snapshots
        report. Keys the model does not know are skipped and said once."""
        settings, skipped = apply_conf(base, conf)
        for key in skipped:
            said = f"the allocator setting {key!r} is not modelled; planned without it"
            if said not in self.said:
                self.said.append(said)
        if settings == self.spec.settings:
            return
        with self._lock:
            self.spec = replace(self.spec, settings=settings)
            self._main.configure(settings)
            self._limit_by(settings)

    def _limit_by(self, settings: AllocatorSettings) -> None:
        """The conf string's ``per_process_memory_fraction``, where it caps the device."""
        if settings.memory_fraction is not None and settings.memory_fraction < 1.0:
            self.set_memory_fraction(settings.memory_fraction)

    def take_outside(self, nbytes: int) -> None:
        """``nbytes`` of the device taken outside PyTorch's allocator (NCCL's buffers, at
        communicator creation): ``cudaMalloc`` can hand the allocator that much less."""
        if nbytes <= 0:
            return
        with self._lock:
            self.outside_bytes += nbytes
            self._allocator.capacity = max(self.spec.usable_bytes - self.outside_bytes, 0)

    def record_stream(self, block: Block, stream: int) -> None:
        """``Tensor.record_stream``: the block is in use on ``stream`` too; its free completes
        once that stream's work is done (at the next allocation: the plan has one timeline)."""
        with self._lock:
            self._allocator.record_stream(block, stream)

    def skip_files(self, files: tuple[str, ...]) -> None:
        """Leave ``files`` (the emulation's own machinery) out of every recorded stack."""
        self._stack = _StackCapture((*self._stack.skipped, *files))

    # -- allocation and free, as the storages come and go

    def malloc(self, nbytes: int, stream: int = 0, native: fmt.Stack = ()) -> Block | None:
        """A block for ``nbytes`` (None when the model cannot serve it: the caller raises).
        ``native``: the native frames a GPU's trace shows under this block (cuBLAS's
        workspace's), recorded whenever stacks are, Python's only or not: the plan knows what
        it made, whatever Python frames are above it (a TorchScript function's product has
        none that names it)."""
        if not self._settled:
            self._settle()
        self.initialized = True
        stack = self._stack(on_autograd_thread=self.backward) if self._recording else ()
        if native and self._recording:
            stack = (*native, *stack)
        with self._lock:
            self._busy = True
            try:
                if self._pending:
                    self._drain()
                block = self._operated(
                    stack, self._allocator.malloc, nbytes, stream, (stack, self._metadata)
                )
                if block is not None and self._worker is not None:
                    self._owner[id(block)] = self._allocator
                elif block is not None:
                    for listener in self._listeners:
                        listener(block.address, block.size, 1)
                self.peak_device = max(self.peak_device, self.device_used())
            finally:
                self._busy = False
        if block is not None:
            self.served += 1
            if self.stop_after is not None and self.served >= self.stop_after:
                raise Stopped(f"{self.stop_after} allocations served")
        return block

    def free(self, block: Block) -> None:
        """Return ``block``; queued when the device is in the middle of another operation."""
        self._pending.append((block, self._gathered_at_all() if self._free_stacks else None))
        if self._busy:
            return
        with self._lock:
            self._busy = True
            try:
                self._drain()
            finally:
                self._busy = False

    def _gathered_at_all(self) -> fmt.Stack | None:
        """The stack PyTorch gathers for an operation at ``RecordContext::ALL`` (``free``,
        ``emptyCache``): the stack here where the history records ``context="all"``, else
        None (none gathered)."""
        if self._free_stacks and self._recording:
            return self._stack(on_autograd_thread=self.backward)
        return None

    def _drain(self) -> None:
        """Apply the queued frees, each traced with the stack PyTorch's ``free`` records: the
        stack at the free where the history gathers one (``context="all"``), else the stack
        the block was allocated under (``context ? context : block->context_when_allocated``),
        never the stack of whatever operation ran last."""
        op_stack = self._op_stack
        while self._pending:
            block, self._op_stack = self._pending.popleft()
            owner = self._owner.pop(id(block), None)
            if owner is not None:
                owner.free(block)
                continue
            for listener in self._listeners:
                listener(block.address, block.size, -1)
            self._main.free(block)
        self._op_stack = op_stack

    # -- worker processes: other processes of the script on the same device

    def device_used(self) -> int:
        """What every process holds on the device now: the script's reserved memory and
        context, NCCL's buffers, each unjoined worker's, the running worker's."""
        context = self.spec.context_bytes
        used = self._main.reserved_bytes.current + self.outside_bytes + sum(self._held.values())
        if self._worker is None:
            return used + (context if self.initialized else 0)
        used += context if self._main_initialized else 0
        return used + self._allocator.reserved_bytes.current + (context if self.initialized else 0)

    def _others(self) -> int:
        """Device memory the allocator running now cannot have besides its own process's
        context (``usable_bytes`` leaves that out): NCCL's buffers, the unjoined workers', and
        while a worker runs the script's own reserved memory and context."""
        others = self.outside_bytes + sum(self._held.values())
        if self._worker is not None:
            others += self._main.reserved_bytes.current
            others += self.spec.context_bytes if self._main_initialized else 0
        return others

    def begin_worker(self, name: str) -> None:
        """A worker process of the script starts on the device (a Hogwild trainer): on a GPU a
        fresh process with its own CUDA context and caching allocator, which cannot use what
        the script's process or the other running workers reserved. Until :meth:`end_worker`
        the device's allocations, statistics and OOMs are that allocator's."""
        with self._lock:
            self._drain()
            self._main_initialized = self.initialized
            self.initialized = False
            self._worker = name
            self._allocator = DeviceCachingAllocator(
                self.spec.settings,
                capacity=max(self.spec.usable_bytes - self._others(), 0),
                device_total=self.spec.total_bytes,
            )

    def end_worker(self, oom_message: str | None) -> WorkerFigures:
        """The running worker process ended: its figures kept, its memory held on the device
        (its peak reserved and context, as the workers run at once on a GPU) until
        :meth:`joined`, the script's own allocator back in place."""
        with self._lock:
            self._drain()
            worker, name = self._allocator, self._worker or ""
            figures = WorkerFigures(
                name,
                self.run_peak("allocated_bytes", worker),
                self.run_peak("reserved_bytes", worker),
                self.run_peak("segment", worker),
                self.initialized,
                oom_message,
            )
            self.workers.append(figures)
            context = self.spec.context_bytes if self.initialized else 0
            self._held[name] = figures.peak_reserved_bytes + context
            for key in [key for key in self._reset_from if key[0] == id(worker)]:
                del self._reset_from[key]  # the worker's allocator goes; its id may be reused
            self._allocator, self._worker = self._main, None
            self.initialized = self._main_initialized
            self._main.capacity = max(self.spec.usable_bytes - self._others(), 0)
        return figures

    def joined(self, name: str) -> None:
        """A worker process joined (or found ended): its memory is the device's again."""
        with self._lock:
            self._held.pop(name, None)
            if self._worker is None:
                self._main.capacity = max(self.spec.usable_bytes - self._others(), 0)

    def oom_report(self) -> tuple[str, tuple[int, int, int, int]]:
        """PyTorch's OOM message for the last failed request, and the observers' arguments."""
        allocator = self._allocator
        oom = allocator.last_oom
        assert oom is not None
        reserved = allocator.reserved_bytes.current
        allocated = allocator.allocated_bytes.current
        total = self.spec.total_bytes
        in_use = total - oom.device_free
        allowed = allocator.allowed
        limit = f"{_format_size(allowed)} allowed; " if allowed is not None else ""
        message = (
            f"CUDA out of memory. Tried to allocate {_format_size(oom.alloc_size)}. "
            f"GPU {self.index} has a total capacity of {_format_size(total)} of which "
            f"{_format_size(oom.device_free)} is free. Including non-PyTorch memory, this "
            f"process has {_format_size(in_use)} memory in use. {limit}Of the allocated memory "
            f"{_format_size(allocated)} is allocated by PyTorch, and "
            f"{_format_size(reserved - allocated)} is reserved by PyTorch but unallocated. If "
            "reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
            "documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )
        self.ooms.append(message)
        args = (
            self.index,
            oom.alloc_size,
            allowed if allowed is not None else total,
            oom.device_free,
        )
        return message, args

    def observers(self) -> list[OomObserver]:
        """The attached OOM observers, in attach order."""
        return list(self._observers)

    def listen(self, listener: BlockListener) -> Callable[[], None]:
        """Call ``listener`` for every block handed out and returned from now; the function
        returned stops it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def live_blocks(self) -> list[tuple[int, int]]:
        """``(address, size)`` of every block allocated now."""
        with self._lock:
            self._drain()
            heads = self._allocator.segment_heads()
        found: list[tuple[int, int]] = []
        for head in heads:
            block: Block | None = head
            while block is not None:
                if block.allocated:
                    found.append((block.address, block.size))
                block = block.next
        return found

    def attach_oom_observer(self, observer: OomObserver) -> None:
        """``torch._C._cuda_attach_out_of_memory_observer``: there is no detach."""
        self._observers.append(observer)

    # -- what torch.cuda answers

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache``: each ``segment_free`` (and the ``free_completed`` of a
        block whose other streams' work it waits for) carries the stack at this call where the
        history records ``context="all"``, else the stack its segment (block) was allocated
        under, as PyTorch's ``emptyCache`` records them."""
        at_call = self._gathered_at_all()
        with self._lock:
            self._drain()
            self._operated(at_call, self._allocator.empty_cache)

    def _operated(self, stack: fmt.Stack | None, operation: Callable[..., _T], *args: Any) -> _T:
        """``operation(*args)``, an allocator operation that gathered ``stack`` (None: none),
        its answer handed back: a plain call, as every allocation makes one, where a
        generator-based context manager costs several calls more."""
        outer, self._op_stack = self._op_stack, stack
        try:
            return operation(*args)
        finally:
            self._op_stack = outer

    # -- private pools: a CUDA graph's capture, ``use_mem_pool``

    def create_pool(self, pool_id: tuple[int, int]) -> None:
        """A private pool used once (a ``MemPool`` made), or one more use of it."""
        with self._lock:
            self._allocator.create_or_incref_pool(pool_id)

    def begin_pool(self, pool_id: tuple[int, int], accepts: Callable[[int], bool]) -> None:
        """Allocations on the streams ``accepts`` go to the private pool ``pool_id`` (made on
        first use) until :meth:`end_pool`."""
        with self._lock:
            self._drain()
            self._allocator.begin_allocate_to_pool(pool_id, accepts)

    def end_pool(self, pool_id: tuple[int, int]) -> None:
        with self._lock:
            self._allocator.end_allocate_to_pool(pool_id)

    def release_pool(self, pool_id: tuple[int, int], *, empty: bool = False) -> None:
        """One use of the pool less (a graph reset, ``use_mem_pool`` left, a ``MemPool``
        gone); ``empty``: its free segments go back now, as a ``MemPool``'s do (its
        ``emptyCache``, whose events carry what :meth:`empty_cache`'s do)."""
        at_call = self._gathered_at_all() if empty else None
        with self._lock:
            self._drain()
            self._allocator.release_pool(pool_id)
            if empty:
                self._operated(at_call, self._allocator.release_cached_blocks, pool_id)

    def pool_use_count(self, pool_id: tuple[int, int]) -> int:
        with self._lock:
            return self._allocator.pool_use_count(pool_id)

    def set_memory_fraction(self, fraction: float) -> None:
        """``set_per_process_memory_fraction``: caps the allocator at that share of the device."""
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        self._allocator.allowed = int(fraction * self.spec.total_bytes)
        self.fraction = fraction

    def stats(self) -> dict[str, int]:
        """``torch.cuda.memory_stats()``'s flat keys."""
        with self._lock:
            self._drain()
            return fmt.memory_stats(self._allocator)

    def reset_peaks(self) -> None:
        """``reset_peak_memory_stats``: every peak back to its current value."""
        with self._lock:
            self._drain()
            a = self._allocator
            for name in _STATISTICS:
                stat = getattr(a, name)
                key = (id(a), name)
                self._reset_from[key] = max(self._reset_from.get(key, 0), stat.peak)
                stat.peak = stat.current
                for kind in (a.small_pool, a.large_pool):
                    stat = getattr(kind, name)
                    stat.peak = stat.current
            for name in _OVERSIZE:
                stat = getattr(a, name)
                stat.peak = stat.current

    def reset_accumulated(self) -> None:
        """``reset_accumulated_memory_stats``: every statistic's running totals (its
        ``allocated`` and ``freed``) and the counters of retries, OOMs, synchronizations and
        device allocations and frees back to 0, as ``resetAccumulatedStats`` does; current
        values and peaks stay."""
        with self._lock:
            self._drain()
            a = self._allocator
            for name in _STATISTICS:
                for stats in (a, a.small_pool, a.large_pool):
                    stat = getattr(stats, name)
                    stat.allocated = stat.freed = 0
            for name in _OVERSIZE:
                stat = getattr(a, name)
                stat.allocated = stat.freed = 0
            a.num_alloc_retries = a.num_ooms = a.num_sync_all_streams = 0
            a.num_device_alloc = a.num_device_free = 0

    def run_peak(self, name: str, allocator: DeviceCachingAllocator | None = None) -> int:
        """The most a statistic (``allocated_bytes``, ``reserved_bytes``, ``segment``) of an
        allocator (the running process's by default) reached over the whole run: what the
        plan reports, where ``max_memory_allocated`` answers the script from its last
        ``reset_peak_memory_stats`` (a script that resets the peaks each epoch still needs the
        device for its largest epoch)."""
        with self._lock:
            self._drain()
            a = allocator if allocator is not None else self._allocator
            return max(int(getattr(a, name).peak), self._reset_from.get((id(a), name), 0))

    def figure(self, name: str, field: str) -> int:
        """One statistic: ``allocated_bytes``/``reserved_bytes``, ``current``/``peak``."""
        with self._lock:
            self._drain()
            stat = getattr(self._allocator, name)
            return int(getattr(stat, field))

    def mem_get_info(self) -> tuple[int, int]:
        """``(free, total)``: the device less the context (once CUDA is initialized), NCCL's
        buffers and what the allocator reserved."""
        reserved = self.figure("reserved_bytes", "current")
        context = self.spec.context_bytes if self.initialized else 0
        free = self.spec.total_bytes - context - self._others() - reserved
        return max(free, 0), self.spec.total_bytes

    def segments(self) -> int:
        """Segments the allocator holds now."""
        return self.figure("segment", "current")

    # -- history and snapshots

    def record_history(
        self,
        enabled: str | None,
        *,
        max_entries: int,
        context: str | None,
        clear: bool,
    ) -> None:
        """``_record_memory_history``: ``"all"`` traces, ``"state"`` only keeps blocks' stacks.
        The plan's stacks are Python's, with the few native frames that say what a block is
        (``malloc``'s ``native``) under it, whatever ``stacks`` the script asked for."""
        with self._lock:
            self._drain()
            keep = () if enabled is None or clear else self._trace
            self._trace = deque(keep, maxlen=max(1, max_entries))
            self._recording = enabled
            self._free_stacks = enabled is not None and context == "all"

    def set_metadata(self, text: str) -> None:
        """``_set_memory_metadata``: tags later allocations."""
        self._metadata = text

    def metadata(self) -> str:
        """``_get_memory_metadata``: the text later allocations are tagged with ("" for none)."""
        return self._metadata

    def _on_trace(self, action: str, addr: int, size: int, stream: int, kept: object) -> None:
        """One trace entry, with the stack PyTorch records for it: the running operation's,
        else (it gathered none) ``kept``'s, the block's or segment's own
        (``context ? context : block->context_when_...``)."""
        stack = self._op_stack
        if stack is None:
            stack = kept[0] if isinstance(kept, tuple) else ()
        device_free = None
        if action == "oom":
            addr, device_free = 0, addr
        entry = (
            action,
            addr,
            size,
            stream,
            time.time_ns() // 1000,
            stack,
            self._metadata,
            device_free,
        )
        self._flight.append(entry)
        self.events += 1
        if self._recording == "all":
            self._trace.append(entry)

    @property
    def flight_entries(self) -> int:
        """Events the plan's own recording keeps, the last ones (``plan --max-entries``)."""
        return self._flight.maxlen or 1

    def snapshot(self, *, flight: bool = False) -> dict[str, Any]:
        """The allocator's state and trace as ``torch.cuda.memory._snapshot()`` returns them,
        marked predicted by one more key, so a copy the script pickles itself says so too; the
        mark holds the run's peak allocated so far, which the trace may no longer show.

        With ``flight``, the trace is the plan's own recording of the last
        :attr:`flight_entries` events, whatever history the script asked for: the snapshot the
        plan writes when the script dumps none, so that ``summary`` of it finds the peak the
        plan printed, not only what outlived the script."""
        frame_dicts: dict[fmt.Frame, dict[str, Any]] = {}
        frame_lists: dict[int, tuple[fmt.Stack, list[dict[str, Any]]]] = {}

        def frames(stack: fmt.Stack) -> list[dict[str, Any]]:
            found = frame_lists.get(id(stack))
            if found is None:
                dicts = [frame_dicts.setdefault(f, fmt.frame_dict(f)) for f in stack]
                found = frame_lists[id(stack)] = (stack, dicts)
            return found[1]

        with self._lock:
            self._drain()
            heads = self._allocator.segment_heads()
            segments = [fmt.segment_dict(head, self.index, frames) for head in heads]
            entries = list(self._flight if flight else self._trace)
        settings = self.spec.settings.to_snapshot()
        record = self.spec.predicted_record()
        record[PEAK_ALLOCATED] = self.run_peak("allocated_bytes")
        return {
            PREDICTED_KEY: record,  # first: a reader of the head finds it
            "segments": segments,
            "device_traces": [[fmt.entry_dict(entry, frames) for entry in entries]],
            "allocator_settings": settings,
            "external_annotations": [],
        }
