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

from memforensics.plan import values
from memforensics.plan.device import PlannedDevice

GRAPH = (
    "a CUDA graph's replay runs nothing in a plan: its capture's allocations are in the "
    "graph's private pool, as on CUDA, and a replay allocates nothing"
)
PoolId = tuple[int, int]


class Graphs:
    """The graphs and pools the script makes on the planned device."""

    def __init__(self, device: PlannedDevice, notes: values.Notes) -> None:
        self.device = device
        self.notes = notes
        self._ids = itertools.count(1)
        self.capture_streams: list[int] = []  # the streams captures are underway on

    def handle(self) -> PoolId:
        """``graph_pool_handle()``: a new pool's id, as a graph's own (``{uid, 0}``)."""
        return (next(self._ids), 0)

    def capturing(self) -> bool:
        """``is_current_stream_capturing()``: whether a capture is underway on the current
        stream."""
        return self.device.stream in self.capture_streams

    def graph_class(self) -> type:
        """``torch.cuda.CUDAGraph`` over these graphs."""
        graphs = self

        class CUDAGraph:
            """A CUDA graph in a plan: its capture allocates into its private pool; its replay
            runs nothing."""

            def __init__(self, keep_graph: bool = False) -> None:
                self._pool: PoolId | None = None
                self._stream: int | None = None

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
                graphs.capture_streams.append(stream)
                graphs.notes.once("graph", GRAPH)

            def capture_end(self) -> None:
                graphs.device.end_pool(self.pool())
                if self._stream in graphs.capture_streams:
                    graphs.capture_streams.remove(self._stream)

            def instantiate(self) -> None:
                return None

            def replay(self) -> None:
                return None

            def reset(self) -> None:
                """The graph gone: its pool has one use less."""
                pool, self._pool = self._pool, None
                if pool is not None:
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
