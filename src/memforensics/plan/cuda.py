"""``torch.cuda`` answering for the planned device, patched for the run and put back after.

Device queries describe the planned device; memory statistics, ``mem_get_info``,
``empty_cache`` and the history calls (``_record_memory_history``, ``_snapshot``,
``_dump_snapshot``) answer from the allocator model; synchronisation, streams, events, NVTX and
the CUDA RNG are harmless no-ops. ``torch._C._cuda_attach_out_of_memory_observer`` attaches to
the model, so ``memforensics.install()`` inside the script captures as on a GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._device

from memforensics.plan import choices, values
from memforensics.plan.device import PlannedDevice
from memforensics.plan.patches import replaced

SnapshotWritten = Callable[[str, dict[str, Any]], None]
"""Writes each snapshot the script dumps itself (``_dump_snapshot(path)``) at its path."""


@dataclass(frozen=True)
class _Props:
    """``torch.cuda.get_device_properties()`` for the planned device."""

    name: str
    total_memory: int
    major: int
    minor: int
    multi_processor_count: int = 132
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


class _Stream:
    """A stream or event that does nothing: the plan has one timeline."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.device = torch.device("cuda", 0)
        self.cuda_stream = 0

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return _nothing

    def query(self) -> bool:
        return True

    def elapsed_time(self, other: object) -> float:
        return 0.0


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


def _noop() -> Callable[..., None]:
    """A fresh no-op for one name: torch._dynamo, if the script imports it, indexes
    ``torch.cuda``'s functions and refuses one object under names it treats differently."""

    def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    return nothing


def _patches(
    device: PlannedDevice, written: SnapshotWritten, clear_autocast: Callable[[], None]
) -> dict[tuple[Any, str], Any]:
    """Every attribute the run replaces, by (object, name)."""
    spec = device.spec
    props = _Props(spec.name, spec.total_bytes, *spec.capability)
    cuda, memory = torch.cuda, torch.cuda.memory

    def allocated(device_index: object = None) -> int:
        return device.figure("allocated_bytes", "current")

    def max_allocated(device_index: object = None) -> int:
        return device.figure("allocated_bytes", "peak")

    def reserved(device_index: object = None) -> int:
        return device.figure("reserved_bytes", "current")

    def max_reserved(device_index: object = None) -> int:
        return device.figure("reserved_bytes", "peak")

    def stats(device_index: object = None) -> dict[str, int]:
        return device.stats()

    def nested(device_index: object = None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in device.stats().items():
            node = out
            *path, last = key.split(".")
            for part in path:
                node = node.setdefault(part, {})
            node[last] = value
        return out

    def record(
        enabled: Any = "all",
        context: Any = "all",
        stacks: str = "all",
        max_entries: int = 2**63 - 1,
        device: object = None,
        clear_history: bool = False,
        **kwargs: Any,
    ) -> None:
        mode: str | None = ("all" if enabled else None) if isinstance(enabled, bool) else enabled
        planned.record_history(
            mode, max_entries=max_entries, context=context, stacks=stacks, clear=clear_history
        )

    planned = device

    def snapshot(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return planned.snapshot()

    def dump(filename: str = "dump_snapshot.pickle") -> None:
        written(str(filename), planned.snapshot())  # the caller writes it, at the script's path

    def capability(device_index: object = None) -> tuple[int, int]:
        return spec.capability

    found: dict[tuple[Any, str], Any] = {
        (cuda, "is_available"): lambda: True,
        (cuda, "is_initialized"): lambda: True,
        (cuda, "_lazy_init"): _noop(),
        (cuda, "init"): _noop(),
        (cuda, "device_count"): lambda: 1,
        (cuda, "current_device"): lambda: 0,
        (cuda, "set_device"): _noop(),
        (cuda, "_exchange_device"): lambda device: 0,  # torch.cuda.device(n) as a context
        (cuda, "_maybe_exchange_device"): lambda device: 0,
        (cuda, "get_device_name"): lambda device=None: spec.name,
        (cuda, "get_device_capability"): capability,
        (cuda, "get_device_properties"): lambda device=None: props,
        (cuda, "is_bf16_supported"): lambda including_emulation=True: spec.capability >= (8, 0),
        (cuda, "synchronize"): _noop(),
        (cuda, "ipc_collect"): _noop(),
        (cuda, "manual_seed"): _noop(),
        (cuda, "manual_seed_all"): _noop(),
        (cuda, "seed"): _noop(),
        (cuda, "seed_all"): _noop(),
        (cuda, "initial_seed"): lambda: 0,
        (cuda, "get_rng_state"): lambda device="cuda": torch.zeros(16, dtype=torch.uint8),
        (cuda, "get_rng_state_all"): lambda: [torch.zeros(16, dtype=torch.uint8)],
        (cuda, "set_rng_state"): _noop(),
        (cuda, "set_rng_state_all"): _noop(),
        (cuda, "Stream"): _Stream,
        (cuda, "Event"): _Stream,
        (cuda, "current_stream"): lambda device=None: _Stream(),
        (cuda, "default_stream"): lambda device=None: _Stream(),
        (cuda, "stream"): lambda stream=None: contextlib.nullcontext(),
        (cuda, "set_stream"): _noop(),
        (cuda.nvtx, "range_push"): lambda msg: 0,
        (cuda.nvtx, "range_pop"): lambda: 0,
        (cuda.nvtx, "mark"): _noop(),
        (cuda.nvtx, "range"): lambda msg, *a, **k: contextlib.nullcontext(),
        (cuda, "set_per_process_memory_fraction"): lambda f, device=None: (
            planned.set_memory_fraction(f)
        ),
        (cuda, "get_per_process_memory_fraction"): lambda device=None: planned.fraction,
        (torch._C, "_cuda_attach_out_of_memory_observer"): planned.attach_oom_observer,
        (torch, "set_default_device"): _default_device(torch.set_default_device),
        (torch, "set_default_tensor_type"): _default_tensor_type(torch.set_default_tensor_type),
        (torch, "compile"): values.eager_compile(values.Notes()),
    }
    import torch.fx.experimental._config as fx_config
    from torch.utils import checkpoint

    # activation checkpointing replays the forward under the autocast state of the device its
    # inputs are on: a stand-in's is CUDA's, not meta's (which would recompute in float32)
    found[(checkpoint, "_infer_device_type")] = _cuda_for_meta(checkpoint._infer_device_type)
    # torch.load(map_location="cuda") and a checkpoint saved on a GPU restore each storage with
    # Storage.to(device=cuda), which would allocate a real CUDA storage
    found[(torch.storage, "_to")] = _storage_to(torch.storage._to)
    # DataParallel over the one planned device calls its module on the inputs as they are (its
    # scatter to one device copies nothing); its own check would find the stand-ins on meta
    found[(torch.nn.DataParallel, "forward")] = _one_device_forward
    found[(torch, "Generator")] = _generator_class()
    # the fused inference path of nn.TransformerEncoder / MultiheadAttention checks its padding
    # mask's values and builds nested tensors, neither of which a stand-in has: the regular path
    found[(torch.backends.mha, "get_fastpath_enabled")] = lambda: False

    original_clear = torch.clear_autocast_cache

    def clear_autocast_cache() -> None:
        clear_autocast()
        original_clear()

    found[(torch, "clear_autocast_cache")] = clear_autocast_cache
    # a module moved to the device keeps its parameters (an optimizer built before the move
    # steps them) and releases their CPU storage: CPU and meta tensors cannot share .data, so
    # the move swaps each parameter's contents, as PyTorch's swap-on-conversion does
    found[(torch.__future__, "get_swap_module_params_on_conversion")] = lambda: True
    found.update(choices.foreach_patches())

    # a boolean mask's index takes every element: the upper bound (the plan warns where)
    found[(fx_config, "meta_nonzero_assume_all_nonzero")] = True
    distributed = getattr(torch, "distributed", None)
    if distributed is not None and hasattr(distributed, "init_process_group"):
        found[(distributed, "init_process_group")] = values.no_process_group
    for module in (cuda, memory):
        found.update(
            {
                (module, "memory_allocated"): allocated,
                (module, "max_memory_allocated"): max_allocated,
                (module, "memory_reserved"): reserved,
                (module, "max_memory_reserved"): max_reserved,
                (module, "memory_cached"): reserved,
                (module, "max_memory_cached"): max_reserved,
                (module, "memory_stats"): stats,
                (module, "memory_stats_as_nested_dict"): nested,
                (module, "reset_peak_memory_stats"): lambda device=None: planned.reset_peaks(),
                (module, "reset_max_memory_allocated"): lambda device=None: planned.reset_peaks(),
                (module, "reset_max_memory_cached"): lambda device=None: planned.reset_peaks(),
                (module, "reset_accumulated_memory_stats"): _noop(),
                (module, "empty_cache"): planned.empty_cache,
                (module, "mem_get_info"): lambda device=None: planned.mem_get_info(),
                (module, "memory_summary"): lambda *a, **k: "memforensics planned device",
            }
        )
    found.update(
        {
            (memory, "_record_memory_history"): record,
            (memory, "_snapshot"): snapshot,
            (memory, "_dump_snapshot"): dump,
            (memory, "_set_memory_metadata"): planned.set_metadata,
        }
    )
    return found


def _generator_class() -> type:
    """``torch.Generator`` whose ``device="cuda"`` is a CPU generator: the CPU build has no CUDA
    generator, and a stand-in's random values are never drawn. Any generator passes
    ``isinstance`` as before."""
    original = torch.Generator

    class Planned(type(original)):  # type: ignore[misc]  # torch's metaclass is untyped
        def __instancecheck__(cls, instance: object) -> bool:
            return isinstance(instance, original)

        def __subclasscheck__(cls, subclass: type) -> bool:
            return issubclass(subclass, original)

    class Generator(original, metaclass=Planned):  # type: ignore[misc, valid-type]
        def __new__(cls, device: Any = "cpu") -> Any:
            if torch.device(device).type == "cuda":
                device = "cpu"
            return original(device=device)

    return Generator


def _one_device_forward(self: Any, *inputs: Any, **kwargs: Any) -> Any:
    return self.module(*inputs, **kwargs)


def _storage_to(original: Callable[..., Any]) -> Callable[..., Any]:
    def to(storage: Any, device: Any, non_blocking: bool = False) -> Any:
        if torch.device(device).type == "cuda" and storage.device.type != "meta":
            return torch.empty(storage.nbytes(), dtype=torch.uint8, device="cuda").untyped_storage()
        return original(storage, device, non_blocking)

    return to


def _cuda_for_meta(original: Callable[..., str]) -> Callable[..., str]:
    def device_type(*args: Any) -> str:
        found = original(*args)
        return "cuda" if found == "meta" else found

    return device_type


def _default_tensor_type(original: Callable[[Any], None]) -> Callable[[Any], None]:
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


def _default_device(original: Callable[[Any], None]) -> Callable[[Any], None]:
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


@contextlib.contextmanager
def patched_cuda(
    device: PlannedDevice, written: SnapshotWritten, clear_autocast: Callable[[], None]
) -> Iterator[None]:
    """``torch.cuda`` answers for ``device`` inside; every attribute is put back after."""
    with replaced(_patches(device, written, clear_autocast)):
        yield
