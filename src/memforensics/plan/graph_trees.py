"""CUDA graph trees in a plan: how ``torch.compile``'s ``mode="reduce-overhead"`` (and
``"max-autotune"``) runs its graphs on a GPU, and what that does to the allocator
(``torch/_inductor/cudagraph_trees.py``).

Every compiled graph of a device shares one private memory pool. A graph's first call is a
*warmup*: it runs as compiled, but its allocations go to the pool. Its next call, in a later
generation, is *recorded*: its inputs that are neither static (parameters and buffers, a
backward's saved tensors) nor already the pool's are first copied into the pool, then the
capture allocates into the pool. Every later call *replays* the recording: the inputs are
copied into the recording's buffers and the graph runs, allocating nothing; its outputs live
in the pool's memory without the allocator knowing them, so a replayed step's peak allocated
holds only what the eager code between the graphs makes, while the pool stays reserved beside
the rest. Warmup and recording run on the tree's own stream with cuBLAS's workspaces cleared
before and after (``clear_cublas_manager``): the graphs' products take their workspace inside
the pool, and the eager code's next product takes a new one.

Which call is which follows the tree's generations. A compiled call is a new generation
(dynamo counts them in ``GenerationTracker``) once no forward waits for its backward, or at
``torch.compiler.cudagraph_mark_step_begin()``, and starts a new path; so does a call made
once every output of the path so far is dead. The graphs called along a path are its nodes,
each recorded once; once one graph warms up, the rest of its path does too. A graph of dynamic
shapes is a new function of the tree for each set of sizes it is called with.

A new generation that follows a warmup or a recording frees the blocks of the outputs the
script still holds from it (``dealloc_current_path_weakrefs``): on a GPU reading one then
fails; in a plan it reads as ever, holding no block.

What the plan leaves out: re-recording where a static input moved, and the allocator state
the tree restores before recording after a replay (the replay's live outputs then count
again, and a new recording does not reuse their memory).
"""

from __future__ import annotations

import enum
import itertools
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from memforensics.plan.emulate import StorageMode
    from memforensics.plan.graphs import Graphs


class Kind(enum.Enum):
    """What AOTAutograd compiled a graph as: the tree's ``CompilationMode``."""

    FORWARD = "forward"
    BACKWARD = "backward"
    INFERENCE = "inference"


class Phase(enum.Enum):
    """How a call of a graph runs in the tree."""

    WARMUP = "warmup"
    RECORD = "record"
    REPLAY = "replay"


def _generation() -> int:
    """dynamo's count of compiled calls, which the tree's generations follow."""
    from torch._dynamo.mutation_guard import GenerationTracker

    return int(GenerationTracker.generation)


Function = tuple[int, tuple[int, ...]]
"""A graph as the tree knows it: the compiled graph, and the sizes a graph of dynamic shapes
is called with (Inductor makes the tree a function for each, ``cudagraphify_impl``'s
``fn_cache``)."""


class GraphTrees:
    """The CUDA graph tree of the planned device: its pool, its generations, and which graphs
    it has warmed up and recorded."""

    def __init__(self, graphs: Graphs, storage: StorageMode) -> None:
        self.graphs = graphs
        self.storage = storage
        self._ids = itertools.count()
        self._pool: tuple[int, int] | None = None
        self._stream: int | None = None
        self._warmed: set[Function] = set()
        self._recorded: set[tuple[Function, ...]] = set()
        self._path: tuple[Function, ...] = ()
        self._in_warmup = False
        self._last: Phase | None = None  # how the path's last graph ran
        self._current = -1  # the generation the tree last ran in
        self._pending_backward = False
        self._marked = 0  # ``cudagraph_mark_step_begin``'s count, as ``MarkStepBox`` keeps it
        self._managed: dict[int, None] = {}  # live storages the tree's graphs made (_cdata)
        self._path_outputs: set[int] = set()  # the storages the current path's graphs made

    def function(self) -> int:
        """An id for a newly compiled graph, the tree's ``FunctionID``."""
        return next(self._ids)

    def mark_step_begin(self) -> None:
        """``torch.compiler.cudagraph_mark_step_begin()``: the next compiled call starts a new
        generation whatever is pending."""
        self._marked -= 1

    def run(
        self,
        function: int,
        kind: Kind,
        static: frozenset[int],
        args: list[Any],
        compiled: Callable[[list[Any]], Any],
        replayed: Callable[[list[Any]], Any],
    ) -> Any:
        """A call of graph ``function`` with ``args`` (boxed): run by ``compiled`` with its
        allocations in the pool when warming up or recording (the recording's non-``static``
        inputs copied into the pool first), or by ``replayed``, which allocates nothing."""
        sizes = tuple(arg for arg in args if isinstance(arg, int))
        given = {arg.untyped_storage()._cdata for arg in _tensors(args)}
        phase = self._phase((function, sizes))
        try:
            if phase is Phase.REPLAY:
                out = replayed(args)
            else:
                with self._in_pool():
                    if phase is Phase.RECORD:
                        self._copy_inputs(args, static)
                    out = compiled(args)
            made = [t for t in _tensors(out) if t.untyped_storage()._cdata not in given]
            for tensor in made if phase is Phase.REPLAY else ():
                self.storage.outside_allocator(tensor)
            self._manage(made)
            return out
        finally:
            if kind is Kind.FORWARD:
                self._pending_backward = True
            elif kind is Kind.BACKWARD:
                self._pending_backward = False

    def _phase(self, function: Function) -> Phase:
        """Whether this call warms ``function`` up, records it, or replays its recording. A
        new generation starts a new path (``can_start_new_generation``), and so does a call
        once every output of the path so far is dead (``all_outputs_are_dead``). A new
        generation after a warmup or recording frees the blocks of the path's outputs the script
        still holds, as the tree frees their memory."""
        generation = self._marked or _generation()
        new = generation != self._current and (self._marked or not self._pending_backward)
        if new and self._last is not Phase.REPLAY:
            for key in list(self._path_outputs):
                self.storage.free_block(key)  # ``dealloc_current_path_weakrefs``
        if new or not self._path_outputs:
            self._path, self._in_warmup, self._path_outputs = (), False, set()
        self._current = generation
        node = (*self._path, function)
        self._path = node
        self._last = self._next(function, node)
        return self._last

    def _next(self, function: Function, node: tuple[Function, ...]) -> Phase:
        """How graph ``function`` runs as ``node`` of the path."""
        if self._in_warmup or function not in self._warmed:
            self._warmed.add(function)
            self._in_warmup = True
            return Phase.WARMUP
        if node in self._recorded:
            return Phase.REPLAY
        self._recorded.add(node)
        return Phase.RECORD

    @contextmanager
    def _in_pool(self) -> Iterator[None]:
        """Allocations inside go to the tree's pool, on its stream, with cuBLAS's workspaces
        cleared on entering and leaving (``_use_cuda_memory_pool_manager``,
        ``clear_cublas_manager``)."""
        device = self.graphs.device
        if self._pool is None:
            self._pool = self.graphs.handle()
            device.create_pool(self._pool)  # the tree's own use, for the process
            self._stream = int(torch.cuda.Stream().cuda_stream)  # the plan's stream class
        pool, outer = self._pool, device.stream
        self.storage.clear_workspaces()
        device.stream = self._stream or 0
        device.begin_pool(pool, lambda on: True)
        try:
            yield
        finally:
            device.end_pool(pool)
            device.release_pool(pool)
            device.stream = outer
            self.storage.clear_workspaces()

    def _copy_inputs(self, args: list[Any], static: frozenset[int]) -> None:
        """The recording's inputs that are neither static nor the pool's, copied into the pool
        (``_allocate_and_copy_recording_inputs``)."""
        for i, arg in enumerate(args):
            if (
                isinstance(arg, torch.Tensor)
                and arg.is_meta
                and i not in static
                and arg.untyped_storage()._cdata not in self._managed
            ):
                copy = torch.empty_strided(
                    arg.size(), arg.stride(), dtype=arg.dtype, device=arg.device
                )
                args[i] = copy.copy_(arg)

    def _manage(self, made: list[torch.Tensor]) -> None:
        """The storages a graph made (its outputs but those on its inputs' storages, which
        a forward returns as saved for its backward) known as the tree's: a later graph takes
        them as they are, and the path lives while one does."""
        for tensor in made:
            storage = tensor.untyped_storage()
            key = storage._cdata
            self._path_outputs.add(key)
            if key not in self._managed:
                self._managed[key] = None
                weakref.finalize(storage, self._forget, key)

    def _forget(self, key: int) -> None:
        """A storage the tree's graphs made is gone: its key (its address) may be a new
        storage's next."""
        self._managed.pop(key, None)
        self._path_outputs.discard(key)


def _tensors(out: Any) -> Iterable[torch.Tensor]:
    """The tensors among a graph's outputs."""
    items = out if isinstance(out, (list, tuple)) else (out,)
    return [item for item in items if isinstance(item, torch.Tensor) and item.is_meta]
