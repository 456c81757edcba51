"""The emulation as one table: each torch attribute a planned run replaces, its stand-in, and
why; and :func:`emulated`, the one context manager that applies it, pushes the modes and puts
torch back as it was.

The stand-ins live with what they answer for: ``torch.cuda``'s and ``torch.accelerator``'s in
:mod:`~memforensics.plan.cuda`, a stand-in's own methods in :mod:`~memforensics.plan.standins`,
CUDA's choices in :mod:`~memforensics.plan.choices`, what values cannot say in
:mod:`~memforensics.plan.values`, the modes in :mod:`~memforensics.plan.emulate`. Functions of
libraries a script may import (Accelerate) are rows of their own, replaced where the script
imports them (:mod:`~memforensics.plan.libraries`).
"""

from __future__ import annotations

import builtins
import pickle
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from memforensics.plan import (
    attention,
    autocast_device,
    build,
    checkpoints,
    choices,
    compiled,
    cuda,
    deepcopies,
    deferred,
    distributed,
    dynamic_sizes,
    emulate,
    exported,
    generators,
    lazy,
    libraries,
    native_library,
    nvidia_smi,
    own_kernels,
    profiler,
    rebound,
    reference_kernels,
    samples,
    scratch,
    scripted,
    standins,
    subclass_like,
    toolkit,
    values,
    workers,
)
from memforensics.plan import (
    graphs as graph_stand_ins,
)
from memforensics.plan import (
    legacy as legacy_types,
)
from memforensics.plan.cuda import Answers, SnapshotWritten
from memforensics.plan.device import OutOfScope, PlannedDevice
from memforensics.plan.graph_trees import GraphTrees
from memforensics.plan.graphs import Graphs
from memforensics.plan.patches import (
    LibraryReplacement,
    Replacement,
    kept_state,
    replaced,
    replaced_where_imported,
)
from memforensics.plan.saved_files import SavedFiles
from memforensics.plan.triton_stand_in import imports as triton_stand_in

R = Replacement

DEVICE = "the planned device is CUDA device 0, there and ready"
LOCAL = (
    "a node of the planned job has a GPU per local rank; the planned rank's is its LOCAL_RANK "
    "(one device in the allocator model)"
)
NO_OP = "one timeline, no kernels: nothing to wait for, nothing to record"
MODEL = "the allocator model answers it"
POOLS = "the allocator model's private pool, as PyTorch's: only its allocations use it"
GRAPHS = (
    "a capture allocates into the graph's private pool, as on CUDA; a replay runs nothing and "
    "allocates nothing"
)
INITIALIZES = (
    "; it initializes CUDA, as on a GPU (torch.cuda._lazy_init), so the CUDA context is counted"
)
STREAMS = (
    "each stream has its own id; what is allocated while one is current is on it, in the "
    "allocator model's pool for that stream"
)


def _found(owner: Any, name: str) -> Any:
    """What a stand-in wraps; None where torch lacks it (the table then refuses to apply)."""
    return getattr(owner, name, None)


def _method(bound: Callable[..., Any]) -> Callable[..., Any]:
    """``bound`` as a method of a class: a bound method set on a class is not bound again to
    the instance it is read from, so ``tensor.method(x)`` would lose ``tensor``."""

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return bound(self, *args, **kwargs)

    return method


def _device_rows(
    answers: Answers,
    streams: cuda.Streams,
    world: distributed.World,
    storage: emulate.StorageMode,
    graphs: graph_stand_ins.Graphs,
) -> list[Replacement]:
    """``torch.cuda``'s device queries, streams, NVTX and RNG."""
    c = torch.cuda

    def initializing(answer: Callable[..., Any]) -> Callable[..., Any]:
        return cuda.initializing(answers.device, answer)

    return [
        R(c, "is_available", lambda: True, DEVICE),
        R(
            c,
            "is_initialized",
            lambda: answers.device.initialized,
            "whether the script initialized CUDA yet (what torch.cuda._lazy_init marks)",
        ),
        R(
            c,
            "_lazy_call",
            cuda.called_now,
            "what torch defers until CUDA is initialized runs at once: the planned "
            "device's state is there from the start",
        ),
        R(c, "_lazy_init", initializing(cuda.noop()), DEVICE + INITIALIZES),
        R(c, "init", initializing(cuda.noop()), DEVICE + INITIALIZES),
        R(c, "device_count", lambda: world.local_world_size, LOCAL),
        R(c, "current_device", initializing(lambda: world.local_rank), LOCAL + INITIALIZES),
        R(c, "set_device", initializing(cuda.noop()), DEVICE + INITIALIZES),
        R(c, "_exchange_device", lambda device: 0, "torch.cuda.device(n) as a context"),
        R(c, "_maybe_exchange_device", lambda device: 0, "torch.cuda.device(n) as a context"),
        R(c, "get_device_name", answers.name, "its name says the device is planned"),
        R(c, "get_device_capability", answers.capability, "--device-capability"),
        R(
            c,
            "get_device_properties",
            initializing(answers.properties),
            "--device-memory, --device-capability" + INITIALIZES,
        ),
        R(c, "is_bf16_supported", answers.bf16, "bf16 from capability 8.0, as on CUDA"),
        R(
            c,
            "device_memory_used",
            answers.used,
            "NVML's used memory, from the model",
            needed=False,
        ),
        *(
            R(c, name, answers.telemetry, cuda.TELEMETRY, needed=False)
            for name in ("utilization", "memory_usage", "temperature", "power_draw", "clock_rate")
        ),
        R(
            c,
            "synchronize",
            initializing(graphs.synchronize),
            "waits for nothing (the plan has one timeline), and fails where a CUDA graph "
            "capture forbids the wait, as cudaDeviceSynchronize does" + INITIALIZES,
        ),
        R(c, "ipc_collect", initializing(cuda.noop()), NO_OP + INITIALIZES),
        R(
            torch._C,
            "_cuda_clearCublasWorkspaces",
            storage.clear_workspaces,
            "cuBLAS's workspaces, one per stream, freed as the CUDA build frees them",
            added=True,
        ),
        R(
            torch._C,
            "_cuda_getCurrentRawStream",
            lambda device_index=None: streams.current().cuda_stream,
            "the current stream's handle, as torch.cuda.current_stream().cuda_stream gives it "
            "(bitsandbytes reads the binding when it is imported)",
            added=True,
        ),
        R(
            torch._C,
            "_cuda_getAllocator",
            cuda.current_allocator(),
            "the native caching allocator's handle: the plan models that allocator "
            "(torch.cuda.memory._get_current_allocator wraps it)",
            added=True,
        ),
        R(c, "_cudart", cuda.Cudart(), "the profiler's start and stop record nothing: " + NO_OP),
        *_rng_rows(world),
        R(c, "Stream", streams.kind, STREAMS),
        R(c, "ExternalStream", streams.external_kind, "the stream of that handle: " + STREAMS),
        R(
            c,
            "get_stream_from_external",
            initializing(streams.external),
            "the stream of that handle: " + STREAMS + INITIALIZES,
            needed=False,
        ),
        R(
            c,
            "Event",
            cuda.Event,
            "one timeline: waits do nothing; timing answers the host time between records",
        ),
        R(c, "current_stream", initializing(streams.current), STREAMS + INITIALIZES),
        R(c, "default_stream", initializing(streams.default), STREAMS + INITIALIZES),
        R(c, "stream", streams.using, STREAMS),
        R(c, "set_stream", streams.set, STREAMS),
        R(
            c.nvtx,
            "_nvtx",
            cuda.Nvtx(),
            "the CPU build's NVTX binding raises: torch's own range (a decorator too), "
            "range_push/pop and mark run over one that records nothing",
        ),
        *(
            R(
                torch.autograd.profiler.emit_nvtx,
                name,
                method,
                "the CPU build's profiler refuses NVTX: emit_nvtx's ranges record nothing, as "
                "torch.cuda.nvtx's",
            )
            for name, method in (
                ("__enter__", cuda.nvtx_emitted),
                ("__exit__", cuda.nvtx_emission_ended),
            )
        ),
        R(
            torch._C,
            "_cuda_attach_out_of_memory_observer",
            answers.device.attach_oom_observer,
            "memforensics.install() in the script observes the predicted OOM",
            added=True,
        ),
    ]


def _build_rows(answers: Answers) -> list[Replacement]:
    """What the CUDA build says about itself (:mod:`~memforensics.plan.build`): a CUDA build's
    own answers, as torch 2.13.0's CUDA wheel answers on the CPU build; scripts and libraries
    branch on these."""
    from torch.cuda import nccl

    facts = build.facts()
    wheel = "as the CUDA build answers: scripts and libraries branch on it"
    return [
        R(torch.version, "cuda", facts.cuda, "the CUDA the build is built with, " + wheel),
        R(
            torch.backends.cuda,
            "is_built",
            build.is_built(_found(torch.backends.cuda, "is_built")),
            "a CUDA build, " + wheel + "; torch's imports pick bindings by the installed one's",
        ),
        R(
            torch.backends.cudnn,
            "is_available",
            lambda: facts.cudnn is not None,
            "cuDNN is in the build, " + wheel,
        ),
        R(
            torch.backends.cudnn,
            "version",
            lambda: build.cudnn_version(answers.spec.capability),
            "the build's cuDNN, refused below capability 7.5 as torch refuses it, " + wheel,
        ),
        R(
            torch.backends.cuda,
            "is_flash_attention_available",
            lambda: facts.flash,
            "the build has flash attention, " + wheel,
        ),
        R(nccl, "version", build.nccl_version, "the build's NCCL, " + wheel),
        R(
            torch.distributed,
            "is_nccl_available",
            build.nccl_available(_found(torch.distributed, "is_nccl_available")),
            "the build has NCCL, " + wheel + "; torch's own code gets the installed one's",
        ),
    ]


def _attention_rows(capability: tuple[int, int]) -> list[Replacement]:
    """A CUDA build's answers on whether a fused attention kernel takes some inputs, which
    torch's Python asks of a jagged nested tensor's attention
    (:func:`~memforensics.plan.attention.asked_of_the_build`)."""
    why = (
        "the planned device's answer for stand-ins, as CUDA's build gives it: the CPU build's is "
        "no, so a jagged nested tensor's attention took the math path, which needs a strided one"
    )
    checks = (
        ("_can_use_flash_attention", attention.can_use_flash_attention),
        ("_can_use_mem_efficient_attention", attention.can_use_mem_efficient_attention),
        ("_can_use_cudnn_attention", attention.can_use_cudnn_attention),
    )
    return [
        R(
            torch._C,
            name,
            attention.asked_of_the_build(capability, check, getattr(torch._C, name)),
            why,
        )
        for name, check in checks
    ]


def _legacy_rows(storage: emulate.StorageMode) -> list[Replacement]:
    """The legacy CUDA tensor types (``torch.cuda.FloatTensor``, ...) and ``Tensor.type``
    (:mod:`~memforensics.plan.legacy`)."""
    held = standins.on_device(storage.address)
    rows = [
        R(torch.cuda, name, kind, "the legacy type makes, casts to and recognises stand-ins")
        for name, kind in legacy_types.types(held).items()
    ]
    rows.append(
        R(
            torch.Tensor,
            "type",
            legacy_types.tensor_type(held),
            "a stand-in's type is its CUDA type's; a legacy CUDA type moves to the device",
        )
    )
    return rows


def _graph_rows(graphs: Graphs) -> list[Replacement]:
    """CUDA graphs, under every name torch's own Python reads them by (``torch.cuda.graph``
    and ``make_graphed_callables`` call them as module globals of ``torch.cuda.graphs``)."""
    cuda_graphs = torch.cuda.graphs
    graph = graphs.graph_class()
    return [
        R(torch.cuda, "CUDAGraph", graph, GRAPHS),
        R(cuda_graphs, "CUDAGraph", graph, GRAPHS),
        R(cuda_graphs, "_graph_pool_handle", graphs.handle, GRAPHS),
        R(torch._C, "_graph_pool_handle", graphs.handle, GRAPHS),
        R(cuda_graphs, "_cuda_isCurrentStreamCapturing", graphs.capturing, GRAPHS),
        R(torch._C, "_cuda_isCurrentStreamCapturing", graphs.capturing, GRAPHS),
        R(
            torch._C,
            "_host_emptyCache",
            cuda.noop(),
            "pinned host memory is not modelled (torch.cuda.graph empties its cache)",
            added=True,
        ),
    ]


def _rng_rows(world: distributed.World) -> list[Replacement]:
    """CUDA's default random number generators, one per planned device, and the random
    functions over them under both names a script or library calls them by
    (``torch.cuda.get_rng_state`` and ``torch.cuda.random.get_rng_state``, which Hugging Face's
    checkpoints save): a stand-in's values are never drawn, only the states are kept."""
    found = generators.DefaultGenerators(world.local_world_size, lambda: world.local_rank)
    never = "a stand-in's values are never drawn; the states read and write as CUDA's"
    return [
        R(torch.cuda, "default_generators", found.all, "one per planned device; " + never),
        R(torch, "Generator", found.generator_class(), 'device="cuda" makes one; ' + never),
        *(
            R(owner, name, value, never)
            for owner in (torch.cuda, torch.cuda.random)
            for name, value in found.functions().items()
        ),
    ]


def _memory_rows(answers: Answers, graphs: Graphs) -> list[Replacement]:
    """Every memory function of ``torch.cuda.memory``, under both names a script calls it by."""
    a = answers
    functions: list[tuple[str, Any, str, bool]] = [
        ("memory_allocated", a.allocated, MODEL, True),
        ("max_memory_allocated", a.max_allocated, MODEL, True),
        ("memory_reserved", a.reserved, MODEL, True),
        ("max_memory_reserved", a.max_reserved, MODEL, True),
        ("memory_cached", a.reserved, MODEL, True),
        ("max_memory_cached", a.max_reserved, MODEL, True),
        ("memory_stats", a.stats, MODEL, True),
        ("memory_stats_as_nested_dict", a.nested, MODEL, True),
        ("memory_summary", a.summary, "PyTorch's own table over the model's statistics", True),
        ("memory_snapshot", a.segments, "the predicted snapshot's segments", True),
        ("reset_peak_memory_stats", a.reset_peaks, MODEL, True),
        ("reset_max_memory_allocated", a.reset_peaks, MODEL, True),
        ("reset_max_memory_cached", a.reset_peaks, MODEL, True),
        ("reset_accumulated_memory_stats", a.reset_accumulated, MODEL, True),
        ("empty_cache", a.empty_cache, MODEL, True),
        (
            "mem_get_info",
            cuda.initializing(a.device, a.mem_get_info),
            "the device less the context and what is reserved" + INITIALIZES,
            True,
        ),
        ("get_per_process_memory_fraction", a.fraction, MODEL, True),
        ("set_per_process_memory_fraction", a.set_fraction, MODEL, True),
        ("caching_allocator_alloc", a.raw_alloc, "a block of the model, by its address", True),
        ("caching_allocator_delete", a.raw_delete, "that block back to the model", True),
        ("list_gpu_processes", a.processes, "this process, from the model", True),
        ("get_allocator_backend", a.backend, "the model is the native caching allocator", True),
        ("CUDAPluggableAllocator", cuda.PluggableAllocator, cuda.PLUGGABLE, True),
        ("change_current_allocator", cuda.pluggable, cuda.PLUGGABLE, True),
        ("caching_allocator_enable", a.caching, cuda.NOT_CACHING, False),
        ("caching_allocator_disabled", a.caching_disabled, cuda.NOT_CACHING, False),
        ("host_memory_stats", a.host_stats, "pinned host memory is not modelled", False),
        (
            "host_memory_stats_as_nested_dict",
            a.host_stats,
            "pinned host memory is not modelled",
            False,
        ),
        (
            "reset_accumulated_host_memory_stats",
            a.nothing,
            "pinned host memory is not modelled",
            False,
        ),
        ("reset_peak_host_memory_stats", a.nothing, "pinned host memory is not modelled", False),
        ("MemPool", graphs.mem_pool_class(), POOLS, False),
        ("use_mem_pool", graphs.use_mem_pool, POOLS, False),
    ]
    rows = [
        R(module, name, value, why, needed)
        for module in (torch.cuda, torch.cuda.memory)
        for name, value, why, needed in functions
    ]
    memory = torch.cuda.memory
    rows += [
        R(memory, "_record_memory_history", a.record, "the model records the history"),
        R(memory, "_snapshot", a.snapshot, "the predicted snapshot"),
        R(memory, "_dump_snapshot", a.dump, "the predicted snapshot, at the script's path"),
        R(memory, "_set_memory_metadata", a.device.set_metadata, "tags later allocations"),
        R(
            memory,
            "_get_memory_metadata",
            a.device.metadata,
            "what _set_memory_metadata tags later allocations with",
            needed=False,
        ),
        R(
            memory,
            "_set_allocator_settings",
            a.device.set_allocator_settings,
            "the model follows the new settings from then on",
            needed=False,
        ),
    ]
    return rows


def _accelerator_rows(answers: Answers, streams: cuda.Streams) -> list[Replacement]:
    """The bindings ``torch.accelerator`` calls: it names CUDA, device 0, and answers memory
    from the model, so Accelerate and Hugging Face pick CUDA. (``get_device_capability`` is
    left alone: torch caches its answer for the process.)"""
    c, a = torch._C, answers
    why = "torch.accelerator names the planned device"
    event, stream = cuda.device_generic_kinds(streams)
    return [
        R(torch, "Event", event, "the current accelerator's event: " + NO_OP, needed=False),
        R(torch, "Stream", stream, "the current accelerator's stream: " + STREAMS, needed=False),
        R(c, "_accelerator_getAccelerator", a.accelerator, why, needed=False),
        R(c, "_get_accelerator", a.accelerator, why + " (FSDP's default mesh)", needed=False),
        R(c, "_accelerator_getDeviceIndex", a.index, why, needed=False),
        R(c, "_accelerator_setDeviceIndex", a.index, why, needed=False),
        R(c, "_accelerator_exchangeDevice", a.index, why, needed=False),
        R(c, "_accelerator_maybeExchangeDevice", a.index, why, needed=False),
        R(c, "_accelerator_getStream", streams.current, STREAMS, needed=False),
        R(c, "_accelerator_setStream", streams.set, STREAMS, needed=False),
        R(c, "_accelerator_synchronizeDevice", cuda.noop(), NO_OP, needed=False),
        R(c, "_accelerator_isAllocatorInitialized", a.initialized, MODEL, needed=False),
        R(c, "_accelerator_getDeviceStats", a.device_stats, MODEL, needed=False),
        R(c, "_accelerator_emptyCache", a.empty_cache, MODEL, needed=False),
        R(c, "_accelerator_resetAccumulatedStats", a.reset_accumulated, MODEL, needed=False),
        R(c, "_accelerator_resetPeakStats", a.reset_peaks, MODEL, needed=False),
        R(c, "_accelerator_getMemoryInfo", a.mem_get_info, MODEL, needed=False),
        R(
            c,
            "_accelerator_emptyHostCache",
            cuda.noop(),
            "pinned host memory is not modelled",
            needed=False,
        ),
    ]


def _autocast_rows() -> list[Replacement]:
    """Autocast's functions keyed by device type, asked with a stand-in's (``meta``)."""
    from torch.amp import autocast_mode

    why = "a stand-in's device type (meta) asks about CUDA's autocast, as its tensor's does"
    rows = [
        R(torch, name, autocast_device.asked_of_cuda(_found(torch, name)), why)
        for name in (
            "is_autocast_enabled",
            "get_autocast_dtype",
            "set_autocast_enabled",
            "set_autocast_dtype",
        )
    ]
    return [
        *rows,
        *(
            R(owner, "is_autocast_available", autocast_device.asked_of_cuda(available), why)
            for owner, available in (
                (torch.amp, _found(torch.amp, "is_autocast_available")),
                (autocast_mode, _found(autocast_mode, "is_autocast_available")),
            )
        ),
        R(
            autocast_mode.autocast,
            "__init__",
            autocast_device.asked_of_cuda(autocast_mode.autocast.__init__, at=1),
            why,
        ),
    ]


INDUCTOR = "torch._inductor"
EVAL_FRAME = "torch._dynamo.eval_frame"


def _refused(name: str) -> Callable[[Any], Any]:
    """A row's stand-in for AOTInductor's ``name``, whatever the original: the plan's refusal."""

    def stand_in(original: Any) -> Any:
        return exported.ahead_of_time(name, OutOfScope)

    return stand_in


def compiler_rows() -> list[LibraryReplacement]:
    """torch's compiler functions the plan answers, replaced when the script imports their
    modules rather than when the table is built: ``torch._inductor`` imports ``torch._dynamo``
    and sympy with it, about a second of CPU that a script which never compiles should not pay.
    ``explain`` is replaced in ``eval_frame``, where it is defined, before ``torch._dynamo``
    binds it."""
    return [
        *(
            LibraryReplacement(
                INDUCTOR,
                name,
                _refused(f"{INDUCTOR}.{name}"),
                "AOTInductor builds CUDA kernels and a shared library: one line instead",
            )
            for name in ("aoti_compile_and_package", "aoti_load_package", "aot_compile")
        ),
        LibraryReplacement(
            EVAL_FRAME,
            "explain",
            compiled.explain_stand_in,
            "dynamo's explanation of the script's code, traced as torch.compile's is, its "
            "graphs then run under the plan",
        ),
    ]


def _torch_rows(
    functions: emulate.DeviceMode,
    storage: emulate.StorageMode,
    notes: values.Notes,
    clear_autocast: Callable[[], None],
    files: SavedFiles,
    trees: GraphTrees,
) -> list[Replacement]:
    """Torch's own functions whose CUDA behaviour the plan re-makes, and a stand-in's methods."""
    import torch.fx.experimental._config as fx_config
    import torch.utils._foreach_utils as foreach_utils
    import torch.utils.data._utils.pin_memory as pinning
    from torch import autograd
    from torch.nn.modules.lazy import LazyModuleMixin
    from torch.optim import optimizer
    from torch.utils import checkpoint

    original_clear = torch.clear_autocast_cache

    def clear_autocast_cache() -> None:
        clear_autocast()
        original_clear()

    methods = standins.methods(storage.address, notes.once)
    functions.read_device_by(methods.device.__get__)
    held = standins.on_device(storage.address)
    saving = checkpoints.Checkpoints(storage.ghosts, files, functions.reads.made_up_on_host)
    rows = [
        R(
            torch.Tensor,
            "__deepcopy__",
            deepcopies.deepcopied(torch.Tensor.__deepcopy__, held),
            "a deep copy copies each device storage once, whole, as CUDA's does",
        ),
        R(
            torch,
            "set_default_device",
            cuda.default_device(torch.set_default_device),
            '"cuda" as the default device makes stand-ins',
        ),
        R(
            torch,
            "set_default_tensor_type",
            cuda.default_tensor_type(torch.set_default_tensor_type),
            "torch.cuda.HalfTensor: its dtype, and the planned device as the default",
        ),
        R(
            torch,
            "compile",
            compiled.stand_in(notes, storage, functions.autocast, trees),
            "Inductor's graphs run unfused, other backends eagerly",
        ),
        *(
            R(
                torch.export,
                name,
                exported.traced_aside(getattr(torch.export, name)),
                "the program is traced on fake copies with the emulation's modes set aside, as "
                "it takes no memory on a GPU; its graph then runs under the plan",
                needed=False,
            )
            for name in ("export", "draft_export")
            if hasattr(torch.export, name)
        ),
        *(
            R(
                owner,
                name,
                exported.ahead_of_time(f"{owner.__name__}.{name}", OutOfScope),
                "AOTInductor builds CUDA kernels and a shared library: one line instead",
                needed=False,
            )
            for owner, names in ((torch._export, ("aot_compile", "aot_load")),)
            for name in names
            if hasattr(owner, name)
        ),
        R(torch, "clear_autocast_cache", clear_autocast_cache, "the plan's autocast cache too"),
        R(
            torch.library,
            "get_ctx",
            dynamic_sizes.get_ctx(torch.library.get_ctx, notes),
            "a library's meta kernel gets data-dependent sizes as integers",
        ),
        R(
            torch.compiler,
            "cudagraph_mark_step_begin",
            trees.mark_step_begin,
            "the plan's CUDA graph tree starts a new generation",
        ),
        R(
            autograd,
            "_engine_run_backward",
            emulate.backward_under(functions, _found(autograd, "_engine_run_backward")),
            "the Python that backward runs (hooks, recomputes) runs under the emulation",
        ),
        R(
            torch._C._autograd,
            "_push_saved_tensors_default_hooks",
            emulate.saved_hooks_under(
                functions, _found(torch._C._autograd, "_push_saved_tensors_default_hooks")
            ),
            "saved_tensors_hooks' pack and unpack hooks (save_on_cpu, activation offloading) "
            "run under the emulation, not in the operator that saves",
        ),
        R(
            LazyModuleMixin,
            "_infer_parameters",
            lazy.initialized_under(functions, storage, LazyModuleMixin._infer_parameters),
            "a lazy module inside a compiled model is initialized while dynamo traces, with the "
            "emulation's modes set aside: its parameters are made under them, on the device",
        ),
        R(
            threading.Thread,
            "_bootstrap_inner",
            emulate.threads_under(functions, storage, _found(threading.Thread, "_bootstrap_inner")),
            "a thread the script starts reaches the planned device as the main thread does",
        ),
        R(
            checkpoint,
            "_infer_device_type",
            cuda.cuda_for_meta(_found(checkpoint, "_infer_device_type")),
            "checkpointing recomputes under CUDA's autocast state for a stand-in",
        ),
        R(
            checkpoint.DefaultDeviceType,
            "_default_device_type",
            "cuda",
            "checkpointing's default device is the accelerator's: CUDA",
        ),
        *_autocast_rows(),
        R(
            torch.distributions.Distribution,
            "_validate_sample",
            samples.validated(
                _found(torch.distributions.Distribution, "_validate_sample"), functions.reads.known
            ),
            "a sample the plan made up lies in the support it was drawn from, as on a GPU",
        ),
        R(
            torch.distributions.Distribution,
            "__init__",
            samples.made(
                _found(torch.distributions.Distribution, "__init__"), functions.reads.known
            ),
            "parameters the plan made up satisfy their constraints, as a GPU's values do",
        ),
        R(
            torch.storage,
            "_to",
            cuda.storage_to(_found(torch.storage, "_to")),
            'torch.load onto "cuda" restores each storage as a stand-in',
        ),
        R(
            torch,
            "save",
            saving.saved(torch.save),
            "a checkpoint holding a stand-in's zeros is put back when the run ends",
        ),
        R(
            pickle,
            "dump",
            saving.dumped(pickle.dump),
            "a pickle holding a stand-in's zeros is put back when the run ends",
        ),
        R(
            pickle._Pickler,
            "dump",
            saving.pickler_dumped(_found(pickle._Pickler, "dump")),
            "a pickle holding a stand-in's zeros (joblib's, dill's) is put back when the run ends",
        ),
        R(
            torch.Tensor,
            "_reduce_ex_internal",
            saving.pickled(_found(torch.Tensor, "_reduce_ex_internal")),
            "torch.save writes a stand-in as the CUDA tensor it stands for",
        ),
        R(
            torch.storage._StorageBase,
            "cpu",
            saving.host_copy(_found(torch.storage._StorageBase, "cpu")),
            "torch.save writes a stand-in's bytes as zeros, the values a plan reads",
        ),
        R(
            torch.UntypedStorage,
            "_write_file",
            saving.written(_found(torch.UntypedStorage, "_write_file")),
            "a stand-in's storage pickled on its own writes its bytes as zeros",
        ),
        R(
            torch.nn.Module,
            "_load_from_state_dict",
            saving.loading(torch.nn.Module._load_from_state_dict),
            "loading a host checkpoint copies onto the planned device: torch's warning that "
            "copying into a meta parameter is a no-op is not true of stand-ins",
        ),
        R(
            torch.serialization,
            "_load",
            cuda.load_onto_device(_found(torch.serialization, "_load")),
            'torch.load onto "cuda" reads no storage into host memory',
        ),
        R(
            torch.serialization,
            "location_tag",
            saving.tagged(storage.deferred.saved(_found(torch.serialization, "location_tag"))),
            "torch.save writes a deferred CPU tensor's values, made first, and tags a "
            "stand-in's storage with the planned CUDA device",
        ),
        R(
            torch.nn.DataParallel,
            "forward",
            cuda.one_device_forward,
            "over one device its scatter copies nothing",
        ),
        R(
            torch.backends.mha,
            "get_fastpath_enabled",
            lambda: False,
            "the fused inference path reads the padding mask's values",
        ),
        R(
            torch.__future__,
            "get_swap_module_params_on_conversion",
            scripted.swaps(torch.__future__.get_swap_module_params_on_conversion),
            "a module moved to the device keeps its parameters, frees their CPU storage",
        ),
        R(
            torch.utils,
            "swap_tensors",
            scripted.kept_objects(
                torch.utils.swap_tensors, torch.__future__.get_swap_module_params_on_conversion
            ),
            "a parameter moved to the device keeps its Python object, attributes and weak "
            "references, as a CUDA build's param.data = moved keeps them",
        ),
        R(
            torch.nn.Module,
            "_apply",
            lazy.kept_uninitialized(scripted.moving_apply(torch.nn.Module._apply)),
            "swapping is on while a module moves its tensors, and only then; a lazy module's "
            "uninitialized parameters stay uninitialized, to be made on the device at its first "
            "forward",
        ),
        R(
            torch.jit.ScriptModule,
            "_apply",
            scripted.scripted_apply(torch.nn.Module._apply),
            "a scripted or traced module's C++ module holds its parameters too, so they cannot be "
            "swapped: they are replaced, and the C++ module holds the stand-ins",
        ),
        R(
            torch.jit,
            "save",
            scripted.written(torch.jit.save, held, files),
            "a module holding stand-ins is written as CUDA writes it, their bytes zeros, the "
            "archive naming them for torch.jit.load; a file is put back when the run ends",
        ),
        R(
            torch.jit._script.RecursiveScriptModule,
            "save",
            scripted.written(torch.jit._script.RecursiveScriptModule.save, held, files),
            "a module holding stand-ins is written as CUDA writes it, their bytes zeros, the "
            "archive naming them for torch.jit.load; a file is put back when the run ends",
        ),
        R(
            torch.jit,
            "load",
            scripted.loaded_onto_cuda(torch.jit.load),
            "the CPU build's loader refuses a CUDA location: loaded onto the CPU, moved with "
            ".cuda(); with no location, the stand-ins a planned save wrote are stand-ins again",
        ),
        R(
            fx_config,
            "meta_nonzero_assume_all_nonzero",
            True,
            "a boolean mask's index takes its upper bound",
        ),
        R(
            pinning,
            "pin_memory",
            lambda data, device=None: data,
            "pinned host memory is not modelled: DataLoader's batches stay as they are",
        ),
        R(torch.Tensor, "data_ptr", methods.data_ptr, "a stand-in's address is its block's"),
        R(torch.Tensor, "get_device", methods.get_device, "a stand-in is on device 0"),
        R(
            torch.Tensor,
            "device",
            methods.device,
            "a stand-in is on cuda:0 to the script and its libraries, which choose their code "
            "by it; meta to torch's own, which chooses CUDA-only kernels by it",
        ),
        R(
            torch.Tensor,
            "_make_wrapper_subclass",
            staticmethod(standins.wrapper_subclass(torch.Tensor._make_wrapper_subclass)),
            "a library's wrapper subclass named on cuda (its inner stand-ins' device to it) is "
            "made on meta, which the CPU build can guard; to the script it is on cuda:0",
        ),
        R(torch.Tensor, "is_cuda", methods.is_cuda, "as .device: True to the script"),
        R(torch.Tensor, "is_meta", methods.is_meta, "as .device: False to the script"),
        R(
            torch.Tensor,
            "data",
            rebound.rebinding(storage.ghosts.holds),
            "a stand-in and a host tensor are rebound in place (param.data = ...), as a CUDA "
            "and a CPU tensor are",
        ),
        R(
            torch.UntypedStorage,
            "data_ptr",
            methods.untyped_data_ptr,
            "a stand-in's storage's address is its block's",
        ),
        R(
            torch.UntypedStorage,
            "share_memory_",
            methods.share_memory_,
            "a device storage is shared by CUDA's IPC as it is, never moved to shared memory",
        ),
        R(torch.UntypedStorage, "is_shared", methods.is_shared, "a device storage is shared"),
    ]
    init = torch.nn.init
    rows += [
        R(
            init,
            name,
            storage.deferred.initialiser(getattr(init, name)),
            "a CPU tensor built for a module records its initialiser until its values are read",
            needed=False,
        )
        for name in deferred.INITIALISERS
    ]
    for owner in (optimizer, foreach_utils):
        for name in choices.FOREACH_DEVICES:
            chooser = choices.with_meta(getattr(owner, name, list))
            rows.append(R(owner, name, chooser, "optimizers take CUDA's foreach default"))
    rows += [
        R(
            torch.Tensor,
            "record_stream",
            _method(storage.record_stream),
            "the block is used on that stream",
        ),
        R(
            torch.UntypedStorage,
            "resize_",
            storage.resized(torch.UntypedStorage.resize_),
            "a storage resized on the device frees its block or takes a new one (FSDP's "
            "unsharded parameters)",
        ),
    ]
    return rows


def _spawn_rows(notes: values.Notes) -> list[Replacement]:
    """``torch.multiprocessing``'s processes as the node's ranks: the planned one runs here."""
    import importlib

    import torch.multiprocessing as mp

    module = importlib.import_module("torch.multiprocessing.spawn")
    start = distributed.spawned(notes.once)

    def spawn(
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        nprocs: int = 1,
        join: bool = True,
        daemon: bool = False,
        start_method: str = "spawn",
    ) -> Any:
        return start(fn, args, nprocs, join, daemon, start_method)

    why = (
        "each spawned process is a rank with its own GPU, a fresh interpreter the plan does not "
        "reach: the planned rank's process runs in the plan's"
    )
    return [
        R(mp, "spawn", spawn, why),
        R(mp, "start_processes", start, why),
        R(module, "spawn", spawn, why),
        R(module, "start_processes", start, why),
    ]


def _worker_rows(
    device: PlannedDevice, storage: emulate.StorageMode, notes: values.Notes
) -> list[Replacement]:
    """``multiprocessing``'s processes given device tensors (Hogwild workers): each runs here
    on an allocator of its own."""
    from multiprocessing import process

    started = workers.Workers(device, storage, notes.once)
    why = (
        "a worker process given device tensors is a fresh interpreter the plan does not reach: "
        "it runs in the plan's, on its own allocator"
    )

    def start(self: Any) -> None:
        started.start(self)

    def join(self: Any, timeout: float | None = None) -> None:
        started.join(self, timeout)

    return [R(process.BaseProcess, "start", start, why), R(process.BaseProcess, "join", join, why)]


def _distributed_rows(
    device: PlannedDevice, storage: emulate.StorageMode, notes: values.Notes
) -> list[Replacement]:
    """``torch.distributed`` on torch's fake process group, for the planned rank and world."""
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        return []
    import torch.distributed.constants as dist_constants
    import torch.distributed.distributed_c10d as c10d
    import torch.distributed.utils as dist_utils
    from torch.distributed import device_mesh

    communicators = distributed.Communicators(device.take_outside)
    storage.communicators = communicators
    fake = distributed.fake_init(c10d.init_process_group, communicators)
    why = "the fake process group, with the planned rank and world size, whatever the backend"
    rows = [
        R(dist, "init_process_group", fake, why),
        R(c10d, "init_process_group", fake, why),
        R(device_mesh, "init_process_group", fake, why, needed=False),
        R(
            c10d,
            "_new_process_group_helper",
            distributed.counted_groups(c10d._new_process_group_helper, communicators),
            "every group on the fake backend; each NCCL group of two or more ranks is a "
            "communicator: its buffers are an allowance outside PyTorch",
        ),
        *(
            R(
                module,
                "default_pg_nccl_timeout",
                distributed.NCCL_TIMEOUT,
                "a group the script makes on NCCL times out as ProcessGroupNCCL's default; the "
                "CPU build has none (it warns that NCCL is not compiled)",
            )
            for module in (c10d, dist_constants)
        ),
        R(
            dist,
            "_verify_params_across_processes",
            distributed.same_params,
            "every rank runs the same program; the fake group gathers no shapes to compare",
        ),
        R(
            dist_utils,
            "_recursive_to",
            distributed.moved_inputs(dist_utils._recursive_to),
            "DDP's inputs: a stand-in is on its device already",
        ),
        *(
            R(
                module,
                name,
                distributed.received_objects(getattr(c10d, name), name),
                "a rank that receives another's Python object stops: the plan runs one rank",
            )
            for name in distributed.OBJECTS_RECEIVED
            for module in (dist, c10d)
        ),
        *(
            R(
                module,
                name,
                distributed.gathered_objects(getattr(c10d, name), notes),
                "every rank's object is this rank's on the fake group: said once",
            )
            for name in distributed.OBJECTS_GATHERED
            for module in (dist, c10d)
        ),
        R(
            c10d.ProcessGroup,
            "_get_backend",
            distributed.standins_backend(c10d.ProcessGroup._get_backend),
            "a stand-in's backend is its CUDA device's (batch_isend_irecv asks for it)",
            needed=False,
        ),
    ]
    from torch._subclasses.fake_tensor import FakeTensorMode

    rows.append(
        R(
            FakeTensorMode,
            "__torch_dispatch__",
            distributed.fake_uniform_unguarded(FakeTensorMode.__torch_dispatch__),
            "DTensor's sharding propagation runs uniform_ on fake CUDA tensors, whose Python "
            "decomposition's copy_ needs a CUDA device guard the CPU build lacks",
        )
    )
    ddp = torch.nn.parallel.DistributedDataParallel
    register = distributed.ddp_register(ddp.register_comm_hook)
    hooked = "the fake group's futures carry no tensors: the plan's hook reduces each bucket"
    rows += [
        R(ddp, "register_comm_hook", register, hooked),
        R(ddp, "__init__", distributed.ddp_init(ddp.__init__, notes.once), hooked),
    ]
    return rows


def table(
    device: PlannedDevice,
    answers: Answers,
    functions: emulate.DeviceMode,
    storage: emulate.StorageMode,
    notes: values.Notes,
    clear_autocast: Callable[[], None],
    files: SavedFiles,
) -> list[Replacement]:
    """Every attribute a planned run replaces, in the order it applies them."""
    streams = cuda.Streams(answers.device)
    world = distributed.World.from_env()
    graphs = graph_stand_ins.Graphs(
        answers.device,
        notes,
        storage.clear_stream_workspaces if scratch.graph_reset_clears_workspaces() else None,
    )
    return [
        *_device_rows(answers, streams, world, storage, graphs),
        *_build_rows(answers),
        *_attention_rows(answers.spec.capability),
        *_legacy_rows(storage),
        *_graph_rows(graphs),
        R(
            cuda.Stream,
            "captures",
            graphs,
            "a stream's or an event's wait, query or timing fails while a CUDA graph capture "
            "forbids it, as CUDA fails it",
        ),
        R(
            functions.reads,
            "waited",
            graphs.forbid_sync,
            "a read of a stand-in's values to the host fails while a CUDA graph capture forbids "
            "the wait, as CUDA fails it",
        ),
        *_memory_rows(answers, graphs),
        *_accelerator_rows(answers, streams),
        *_torch_rows(functions, storage, notes, clear_autocast, files, GraphTrees(graphs, storage)),
        *_distributed_rows(answers.device, storage, notes),
        *_spawn_rows(notes),
        *_worker_rows(device, storage, notes),
        *profiler.rows(device),
        *_triton_rows(notes, storage.reads.known.written),
    ]


def _triton_rows(notes: values.Notes, written: Callable[[list[Any]], None]) -> list[Replacement]:
    """The script's imports of Triton, by statement and by name, and its questions whether
    Triton is installed (its spec, its distribution), answered by the plan's (``written``: a
    launch's arguments no longer of known values)."""
    import importlib
    import importlib.metadata
    import importlib.util

    triton = triton_stand_in.Triton(notes, written)
    why = (
        "the script's Triton (which a CUDA build of torch brings) is the plan's: kernels launch "
        "without running, autotuning and do_bench take what they take on a GPU"
    )
    return [
        R(builtins, "__import__", triton_stand_in.importing(builtins.__import__, triton), why),
        R(
            importlib,
            "import_module",
            triton_stand_in.imported_by_name(importlib.import_module, triton),
            why,
        ),
        R(
            importlib.util,
            "find_spec",
            triton_stand_in.found_spec(importlib.util.find_spec, triton),
            why,
        ),
        R(
            importlib.metadata,
            "distribution",
            triton_stand_in.distributed(importlib.metadata.distribution),
            why,
        ),
    ]


def _smi_reading(device: PlannedDevice, answers: Answers) -> nvidia_smi.Reading:
    """What the plan's ``nvidia-smi`` shows when the script starts it: the planned node's GPUs,
    each using what this rank's process holds (``device_memory_used``)."""

    def reading() -> dict[str, Any]:
        major, minor = device.spec.capability
        return {
            "name": answers.name(),
            "total_bytes": device.spec.total_bytes,
            "used_bytes": answers.used(),
            "count": distributed.World.from_env().local_world_size,
            "capability": f"{major}.{minor}",
        }

    return reading


@contextmanager
def emulated(
    device: PlannedDevice, written: SnapshotWritten, *, defer: bool = True
) -> Iterator[None]:
    """CUDA emulated on ``device`` inside: the table applied and both modes pushed; after,
    every attribute back and torch's defaults (dtype, default device, device contexts) as they
    were before. ``defer``: large CPU tensors made while a module is built hold no host memory
    until read (:mod:`~memforensics.plan.deferred`)."""
    autocast = choices.Autocast()
    notes = values.Notes(device.said)
    workspace = scratch.workspace_bytes_for(device.spec.capability)
    functions, storage = emulate.modes(device, workspace, autocast, notes, defer=defer)
    answers = Answers(device, written, notes, storage.malloc)
    files = SavedFiles()
    rows = table(device, answers, functions, storage, notes, autocast.clear, files)
    cuda_toolkit = toolkit.Toolkit(lambda: build.facts().cuda)
    imported = [
        *libraries.rows(storage.ghosts.holds, functions.reads.made_up_on_host, notes, files),
        cuda_toolkit.row(),
        *compiler_rows(),
    ]
    try:
        with (
            kept_state(),
            compiled.dynamo_as_found(),
            replaced(rows),
            cuda_toolkit.installed(),
            replaced_where_imported(imported),
            native_library.quiet_failed_load(),
            own_kernels.on_meta(),
            subclass_like.gpu_paths(),
            reference_kernels.unwrapped_until_dynamo(),
            nvidia_smi.on_path(_smi_reading(device, answers)),
            functions,
            storage,
        ):
            try:
                yield
            finally:
                distributed.close()
    finally:
        storage.deferred.settle()
        put_back = files.put_back()
        if put_back is not None:
            device.said.append(put_back)
