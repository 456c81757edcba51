"""The sim device itself: one simulated accelerator, the tensors it hands out, and its OOM error.

A test or demo can build a device on its own (``SimDevice(total_bytes)``); it drives
:mod:`memforensics.allocator` under one lock. A ``SimTensor`` is an allocation's handle: freed
explicitly, by garbage collection through ``weakref.finalize``, or later after
``record_stream``, each by calling back into its device. Plain Python: this module never
imports torch.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from typing import Any, ClassVar, Literal

from memforensics.allocator import AllocatorSettings, Block, DeviceCachingAllocator, parse_conf
from memforensics.backends._protocol import HistoryContext, HistoryMode, OomObserver
from memforensics.backends.sim import format as fmt
from memforensics.backends.sim.format import FREE_CPP as _FREE_CPP
from memforensics.backends.sim.format import MALLOC_CPP as _MALLOC_CPP
from memforensics.backends.sim.format import capture_stack as _capture_stack


def _format_size(nbytes: int) -> str:
    """Bytes as torch's ``format_size`` prints them (its ``<=`` thresholds included)."""
    if nbytes <= 1024:
        return f"{nbytes} bytes"
    for limit, divisor, unit in ((1 << 20, 1 << 10, "KiB"), (1 << 30, 1 << 20, "MiB")):
        if nbytes <= limit:
            return f"{nbytes / divisor:.2f} {unit}"
    return f"{nbytes / (1 << 30):.2f} GiB"


class SimOutOfMemoryError(RuntimeError):
    """The sim device's ``torch.OutOfMemoryError``: a ``RuntimeError`` with torch's wording."""


class SimTensor:
    """A device allocation; freed by ``free()`` or when garbage collected, like a tensor."""

    __slots__ = ("__weakref__", "_block", "_device", "_finalizer", "address", "nbytes")

    def __init__(self, device: SimDevice, block: Block | None, nbytes: int) -> None:
        self.nbytes = nbytes
        self.address = block.address if block is not None else 0
        self._device = device
        self._block = block
        self._finalizer = weakref.finalize(self, device._collect, block)
        self._finalizer.atexit = False

    @property
    def block_size(self) -> int:
        """Bytes of the block the allocator handed over: the request rounded, plus any remainder
        too small to split off (what PyTorch's ``allocated_bytes`` counts)."""
        return self._block.size if self._block is not None else 0

    @property
    def freed(self) -> bool:
        """True once the memory went back to the allocator."""
        return not self._finalizer.alive

    def free(self) -> None:
        """Return the memory now; later calls do nothing."""
        if self._finalizer.detach() is not None:
            self._device._release(self._block)

    def record_stream(self, stream: int) -> None:
        """Mark use on another stream: the free then completes later (``Tensor.record_stream``)."""
        if self._block is not None and not self.freed:
            self._device._record_stream(self._block, stream)

    def __repr__(self) -> str:
        state = "freed" if self.freed else "live"
        return f"SimTensor(nbytes={self.nbytes}, address={self.address:#x}, {state})"


class SimDevice:
    """One simulated accelerator with its own caching allocator, history and OOM observers.

    One lock guards all allocator state. Frees from garbage collection can arrive while that
    lock is held (even by the same thread), so they are queued and applied by the next
    operation; everything that reports state applies them first.
    """

    OutOfMemoryError: ClassVar[type[SimOutOfMemoryError]] = SimOutOfMemoryError

    def __init__(
        self,
        total_bytes: int = 1 << 30,
        *,
        index: int = 0,
        settings: AllocatorSettings | str | None = None,
    ) -> None:
        if total_bytes <= 0:
            raise ValueError(f"total_bytes must be positive, got {total_bytes}")
        self.index = index
        self.total_bytes = total_bytes
        if not isinstance(settings, AllocatorSettings):
            settings = parse_conf(settings)
        self.settings = settings
        self._lock = threading.Lock()
        self._allocator = DeviceCachingAllocator(
            self.settings, capacity=total_bytes, on_trace=self._on_trace
        )
        self._trace: deque[fmt.Entry] = deque(maxlen=1)
        self._mode: HistoryMode = None
        self._free_stacks = False  # context="all": frees record their stack too
        self._cpp = False
        self._metadata = ""
        self._observers: list[OomObserver] = []
        self._pending: deque[tuple[Block, fmt.Stack]] = deque()
        self._op_stack: fmt.Stack = ()
        fraction = settings.memory_fraction
        if fraction is not None and fraction < 1.0:  # the conf key, applied at start as torch does
            self.set_per_process_memory_fraction(fraction)

    def empty(self, nbytes: int, *, stream: int = 0) -> SimTensor:
        """Allocate ``nbytes`` on ``stream``; ``SimOutOfMemoryError`` when the device is full."""
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        if nbytes == 0:
            return SimTensor(self, None, 0)  # torch hands out a null pointer, no block
        stack = _capture_stack(_MALLOC_CPP if self._cpp else ()) if self._mode else ()
        with self._lock:
            self._drain_pending()
            self._op_stack = stack
            block = self._allocator.malloc(nbytes, stream, (stack, self._metadata))
            if block is not None:
                return SimTensor(self, block, nbytes)
            error, observers, args = self._out_of_memory()
        for observer in observers:  # lock released: an observer may call snapshot()
            observer(*args)
        raise error

    def _out_of_memory(
        self,
    ) -> tuple[SimOutOfMemoryError, list[OomObserver], tuple[int, int, int, int]]:
        """What to tell observers and raise once the lock is released (the model traced it).

        Like torch, observers and the message get the allocation size (the model's
        ``alloc_size``: what the allocator asked the device for, a whole segment), the trace event
        the rounded block size; the limit is the memory fraction's when one is set.
        """
        allocator = self._allocator
        oom = allocator.last_oom
        assert oom is not None  # malloc returned None: it recorded the OOM
        allocation_bytes, device_free_bytes = oom.alloc_size, oom.device_free
        reserved, allocated = allocator.reserved_bytes.current, allocator.allocated_bytes.current
        allowed = allocator.allowed
        device_total_bytes = allowed if allowed is not None else self.total_bytes
        message = (
            f"SIM out of memory. Tried to allocate {_format_size(allocation_bytes)}. "
            f"Device {self.index} has a total capacity of {_format_size(self.total_bytes)} "
            f"of which {_format_size(device_free_bytes)} is free. Of the allocated memory "
            f"{_format_size(allocated)} is allocated by PyTorch, and "
            f"{_format_size(reserved - allocated)} is reserved by PyTorch but unallocated."
        )
        args = (self.index, allocation_bytes, device_total_bytes, device_free_bytes)
        return SimOutOfMemoryError(message), list(self._observers), args

    def _release(self, block: Block | None) -> None:
        """Free ``block`` now (an explicit ``SimTensor.free()``)."""
        if block is None:
            return
        stack = _capture_stack(_FREE_CPP if self._cpp else ()) if self._free_stacks else ()
        with self._lock:
            self._drain_pending()
            self._free_locked(block, stack)

    def _collect(self, block: Block | None) -> None:
        """Finalizer of a collected tensor: queue the free, apply it if the lock is free."""
        if block is None:
            return
        stack = _capture_stack(_FREE_CPP if self._cpp else ()) if self._free_stacks else ()
        self._pending.append((block, stack))
        if self._lock.acquire(blocking=False):
            try:
                self._drain_pending()
            finally:
                self._lock.release()

    def _drain_pending(self) -> None:
        """Apply queued garbage-collection frees (lock held)."""
        while self._pending:
            self._free_locked(*self._pending.popleft())

    def _free_locked(self, block: Block, stack: fmt.Stack) -> None:
        """Perform one free; the model traces it (lock held)."""
        self._op_stack = stack
        self._allocator.free(block)

    def _record_stream(self, block: Block, stream: int) -> None:
        """``recordStream`` on the model (lock taken)."""
        with self._lock:
            self._allocator.record_stream(block, stream)

    def set_per_process_memory_fraction(self, fraction: float) -> None:
        """Cap this process at ``fraction`` of the device, as torch's call of that name does.

        Only under a fraction does ``garbage_collection_threshold`` act (as in PyTorch).
        """
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"fraction must be within [0, 1], got {fraction}")
        with self._lock:
            self._allocator.allowed = int(fraction * self.total_bytes)
            self._fraction = fraction

    def get_per_process_memory_fraction(self) -> float:
        """The fraction set by ``set_per_process_memory_fraction`` (1.0 when none was)."""
        return getattr(self, "_fraction", 1.0)

    def empty_cache(self) -> None:
        """Release every fully free cached segment back to the device."""
        stack = _capture_stack(()) if self._mode else ()
        with self._lock:
            self._drain_pending()
            self._op_stack = stack
            self._allocator.empty_cache()

    def record_memory_history(
        self,
        enabled: HistoryMode,
        *,
        max_entries: int,
        stacks: Literal["python", "all"] = "python",
        clear_history: bool = False,
        context: HistoryContext | None = "all",
    ) -> None:
        """Start (``"all"``: trace and block frames; ``"state"``: block frames) or stop history.

        Stopping (``None``) also empties the trace, as torch's ``recordHistory`` does. Frees
        record their stack only with ``context="all"`` (torch's default), as in torch.
        """
        if enabled not in ("all", "state", None):
            raise ValueError(f"enabled must be 'all', 'state' or None, got {enabled!r}")
        if stacks not in ("python", "all"):
            raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
        with self._lock:
            self._drain_pending()
            keep = () if enabled is None or clear_history else self._trace
            self._trace = deque(keep, maxlen=max(1, max_entries))
            self._mode = enabled
            self._free_stacks = enabled is not None and context == "all"
            self._cpp = stacks == "all"

    def set_memory_metadata(self, text: str) -> None:
        """Tag later allocations and trace events with ``text`` (``user_metadata``)."""
        self._metadata = text

    def attach_out_of_memory_observer(self, observer: OomObserver) -> None:
        """Call ``observer(device, allocation_bytes, device_total_bytes, device_free_bytes)`` on
        every OOM; there is no detach."""
        with self._lock:
            self._observers.append(observer)

    def _on_trace(self, action: str, addr: int, size: int, stream: int, kept: object) -> None:
        """Model hook: append a trace event when recording ``"all"`` (lock held).

        The model passes an ``oom`` event's device free bytes as ``addr``, as torch's
        ``record_trace`` does; the snapshot shows them as ``device_free`` with ``addr`` 0.
        """
        if self._mode == "all":
            now = time.time_ns() // 1000
            device_free = None
            if action == "oom":
                addr, device_free = 0, addr
            stack, metadata = self._op_stack, self._metadata
            self._trace.append((action, addr, size, stream, now, stack, metadata, device_free))

    def snapshot(self) -> dict[str, Any]:
        """Allocator state and trace as ``torch.cuda.memory._snapshot()`` returns them.

        All fresh plain data: frame dicts and lists are shared inside one snapshot (torch does
        the same, and pickle then stores each once) but never with the allocator. The trace is
        rendered outside the lock, so a long one does not stall allocations.
        """
        frame_dicts: dict[fmt.Frame, dict[str, Any]] = {}
        frame_lists: dict[int, tuple[fmt.Stack, list[dict[str, Any]]]] = {}

        def frames(stack: fmt.Stack) -> list[dict[str, Any]]:
            found = frame_lists.get(id(stack))  # the value keeps the stack alive: ids stay unique
            if found is None:
                dicts = [
                    frame_dicts.get(f) or frame_dicts.setdefault(f, fmt.frame_dict(f))
                    for f in stack
                ]
                found = frame_lists[id(stack)] = (stack, dicts)
            return found[1]

        with self._lock:
            self._drain_pending()
            heads = self._allocator.segment_heads()
            segment_dicts = [fmt.segment_dict(head, self.index, frames) for head in heads]
            entries = list(self._trace)
        trace = [fmt.entry_dict(entry, frames) for entry in entries]
        return {
            "segments": segment_dicts,
            "device_traces": [[] for _ in range(self.index)] + [trace],
            "allocator_settings": self.settings.to_snapshot(),
            "external_annotations": [],
        }

    def memory_stats(self) -> dict[str, int]:
        """Allocator statistics under torch's ``memory_stats()`` key names, sorted by key."""
        with self._lock:
            self._drain_pending()
            return fmt.memory_stats(self._allocator)

    def allocator_pressure(self) -> tuple[int, int]:
        """``(num_alloc_retries, reserved bytes)``: what ``memory_stats_as_nested_dict()``'s
        ``num_alloc_retries`` and ``reserved_bytes.all.current`` say, without building it."""
        with self._lock:
            self._drain_pending()
            return self._allocator.num_alloc_retries, self._allocator.reserved_bytes.current

    def mem_get_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes of the device, like ``torch.cuda.mem_get_info``."""
        return self.total_bytes - self.reserved_bytes, self.total_bytes

    @property
    def reserved_bytes(self) -> int:
        """Bytes held in segments (``memory_reserved``)."""
        with self._lock:
            self._drain_pending()
            return self._allocator.reserved_bytes.current

    @property
    def allocated_bytes(self) -> int:
        """Bytes in allocated blocks (``memory_allocated``)."""
        with self._lock:
            self._drain_pending()
            return self._allocator.allocated_bytes.current

    def __repr__(self) -> str:
        conf = self.settings.to_conf()
        return f"SimDevice(total_bytes={self.total_bytes}, index={self.index}, settings={conf!r})"


# Users and tracebacks know these by their public home (``memforensics.backends.sim``).
SimDevice.__module__ = SimOutOfMemoryError.__module__ = SimTensor.__module__ = (
    "memforensics.backends.sim"
)
