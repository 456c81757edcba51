"""CUDA graphs and memory pools in a plan: what ``torch.cuda.CUDAGraph``,
``graph_pool_handle``, ``is_current_stream_capturing``, ``MemPool`` and ``use_mem_pool`` answer
for the planned device.

On CUDA a graph's capture allocates into the graph's private pool: blocks freed during the
capture are reused by the capture only, and the pool's segments stay reserved while the graph
lives (its outputs are static: each replay writes the same blocks). A replay allocates nothing.
The plan does the same with the allocator model's private pools: the operators the capture
runs allocate into the pool, a replay runs nothing, and a graph reset or collected gives the
pool back (its free segments go back to the device at the next ``empty_cache``, or when the
allocator needs them). ``use_mem_pool`` routes the script's own allocations (not backward's,
which runs on autograd's thread) to a ``MemPool``'s private pool, as PyTorch does.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from memforensics.plan import values
from memforensics.plan.device import PlannedDevice

GRAPH = (
    "a CUDA graph's replay runs nothing in a plan: its capture's allocations are in the "
    "graph's private pool, as on CUDA, and a replay allocates nothing"
)
PoolId = tuple[int, int]
STREAM_CAPTURE_UNSUPPORTED = 900
"""``cudaErrorStreamCaptureUnsupported``: what CUDA answers a synchronization during capture."""
CAPTURE_MESSAGE = (
    "CUDA error: operation not permitted when stream is capturing\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)


CAPTURED_EVENT = 907
"""``cudaErrorCapturedEvent``: what CUDA answers a wait on, or a query or timing of, an event
last recorded in a capturing stream."""
CAPTURED_EVENT_MESSAGE = CAPTURE_MESSAGE.replace(
    "operation not permitted when stream is capturing",
    "operation not permitted on an event last recorded in a capturing stream",
)


def capture_error(
    code: int = STREAM_CAPTURE_UNSUPPORTED, message: str = CAPTURE_MESSAGE
) -> RuntimeError:
    """The error torch raises for a CUDA error ``code`` (``cudaErrorStreamCaptureUnsupported``
    by default): an ``AcceleratorError`` carrying the code, where this torch has the class."""
    kind = getattr(torch, "AcceleratorError", RuntimeError)
    error: RuntimeError = kind(message)
    with contextlib.suppress(AttributeError, TypeError):
        error.error_code = code  # type: ignore[attr-defined]
    return error


class Graphs:
    """The graphs and pools the script makes on the planned device."""

    def __init__(
        self,
        device: PlannedDevice,
        notes: values.Notes,
        clear_stream_workspaces: Callable[[int], None] | None = None,
    ) -> None:
        self.device = device
        self.notes = notes
        self.clear_stream_workspaces = clear_stream_workspaces
        """What a graph's reset does to its capture stream's cuBLAS workspaces first (None:
        the installed torch leaves them)."""
        self._ids = itertools.count(1)
        self.underway: list[tuple[int, str]] = []  # (stream, capture_error_mode) of each capture

    def handle(self) -> PoolId:
        """``graph_pool_handle()``: a new pool's id, as a graph's own (``{uid, 0}``)."""
        return (next(self._ids), 0)

    def capturing(self) -> bool:
        """``is_current_stream_capturing()``: whether a capture is underway on the current
        stream."""
        return any(stream == self.device.stream for stream, _ in self.underway)

    def forbid_sync(self) -> None:
        """Raise CUDA's error where the host would wait on the device (a value read to the
        host) while a capture forbids it: on the capturing stream, or anywhere while a capture
        in ``"global"`` or ``"thread_local"`` mode is underway (the plan's script runs on one
        thread), as ``cudaStreamSynchronize`` fails during capture. Torch's own reads are left
        alone: its code checks for a capture before it synchronizes."""
        forbidden = any(
            stream == self.device.stream or mode != "relaxed" for stream, mode in self.underway
        )
        if forbidden and not values.by_torch():
            raise capture_error()

    def capture_of(self, stream: object = None) -> tuple[int, str] | None:
        """The capture underway on ``stream`` (a stream or its handle; the current stream by
        default): where an event recorded now belongs."""
        handle: Any = getattr(stream, "cuda_stream", stream)
        on = self.device.stream if handle is None else int(handle or 0)
        return next((c for c in self.underway if c[0] == on), None)

    def forbid_stream_wait(self, stream: int) -> None:
        """``Stream.synchronize()``/``query()`` fail as ``cudaStreamSynchronize`` and
        ``cudaStreamQuery`` do: on a capturing stream, whatever the mode; on any stream
        while a ``"global"`` or ``"thread_local"`` capture is underway."""
        if any(on == stream or mode != "relaxed" for on, mode in self.underway):
            raise capture_error()

    def forbid_event_wait(self, capture: object) -> None:
        """``Event.synchronize()``/``query()`` of a recorded event fail as
        ``cudaEventSynchronize`` and ``cudaEventQuery`` do: on an event recorded in a capture
        still underway (``cudaErrorCapturedEvent``); on any other while a ``"global"`` or
        ``"thread_local"`` capture is underway."""
        if capture is not None and any(c is capture for c in self.underway):
            raise capture_error(CAPTURED_EVENT, CAPTURED_EVENT_MESSAGE)
        if any(mode != "relaxed" for _, mode in self.underway):
            raise capture_error()

    def forbid_elapsed_time(self, *captures: object) -> None:
        """``Event.elapsed_time`` fails as ``cudaEventElapsedTime`` does on an event recorded
        in a capture still underway (``cudaErrorCapturedEvent``)."""
        if any(c is not None and any(c is u for u in self.underway) for c in captures):
            raise capture_error(CAPTURED_EVENT, CAPTURED_EVENT_MESSAGE)

    def synchronize(self, device: object = None) -> None:
        """``torch.cuda.synchronize()``: the host waits for the device, refused as
        :meth:`forbid_sync` refuses it (the plan has one timeline: nothing else to wait for)."""
        self.forbid_sync()

    def graph_class(self) -> type:
        """``torch.cuda.CUDAGraph`` over these graphs."""
        graphs = self

        class CUDAGraph:
            """A CUDA graph in a plan: its capture allocates into its private pool; its replay
            runs nothing."""

            def __init__(self, keep_graph: bool = False) -> None:
                self._pool: PoolId | None = None
                self._stream: int | None = None
                self._underway: tuple[int, str] | None = None

            def capture_begin(
                self,
                pool: Any = None,
                capture_error_mode: str = "global",
                check_input_liveness: bool = False,
            ) -> None:
                self.reset()
                self._pool = (pool[0], pool[1]) if pool is not None else graphs.handle()
                stream = self._stream = graphs.device.stream
                graphs.device.begin_pool(self.pool(), lambda on: on == stream)
                self._underway = (stream, capture_error_mode)
                graphs.underway.append(self._underway)
                graphs.notes.once("graph", GRAPH)

            def capture_end(self) -> None:
                graphs.device.end_pool(self.pool())
                if self._underway in graphs.underway:
                    graphs.underway.remove(self._underway)

            def instantiate(self) -> None:
                return None

            def replay(self) -> None:
                return None

            def reset(self) -> None:
                """The graph gone: its capture stream's cuBLAS workspaces freed, where the
                installed torch's ``CUDAGraph::reset`` frees them, and its pool has one use
                less."""
                pool, self._pool = self._pool, None
                if pool is not None:
                    if graphs.clear_stream_workspaces is not None and self._stream is not None:
                        graphs.clear_stream_workspaces(self._stream)
                    graphs.device.release_pool(pool)

            def pool(self) -> PoolId:
                if self._pool is None:
                    raise RuntimeError("Called CUDAGraph::pool() without a preceding capture.")
                return self._pool

            def enable_debug_mode(self) -> None:
                return None

            def debug_dump(self, debug_path: str) -> None:
                return None

            def raw_cuda_graph(self) -> int:
                return 0

            def raw_cuda_graph_exec(self) -> int:
                return 0

            def __del__(self) -> None:
                with contextlib.suppress(Exception):  # never raise under the collector
                    self.reset()

        return CUDAGraph

    def mem_pool_class(self) -> type:
        """``torch.cuda.MemPool`` over these pools: a user pool's id (``{0, uid}``), used once
        while it lives; gone, its free segments go back to the device."""
        graphs = self
        ids = itertools.count(1)

        class MemPool:
            """A private memory pool of the planned device."""

            def __init__(
                self, allocator: object = None, use_on_oom: bool = False, no_split: bool = False
            ) -> None:
                self.id: PoolId = (0, next(ids))
                self.allocator = allocator
                graphs.device.create_pool(self.id)

            def use_count(self) -> int:
                return graphs.device.pool_use_count(self.id)

            def snapshot(self, include_traces: bool = True) -> list[Any]:
                import torch

                segments: Callable[..., list[Any]] = torch.cuda.memory_snapshot  # the plan's
                return segments(self.id)

            def __del__(self) -> None:
                with contextlib.suppress(Exception):  # never raise under the collector
                    graphs.device.release_pool(self.id, empty=True)

        return MemPool

    @contextlib.contextmanager
    def use_mem_pool(self, pool: Any, device: object = None) -> Iterator[None]:
        """``use_mem_pool(pool)``: the script's own allocations go to ``pool``; backward's,
        on autograd's thread, do not."""
        planned = self.device
        planned.begin_pool(pool.id, lambda on: not planned.backward)
        try:
            yield
        finally:
            planned.end_pool(pool.id)
            planned.release_pool(pool.id)
