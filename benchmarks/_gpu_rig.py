"""The device under test for ``gpu_truth.py``: one small interface, a CUDA and a sim implementation.

Every step of the real-GPU check is written once against ``Rig``; ``CudaRig`` runs it on a real
device through torch, ``SimRig`` on memforensics's simulated caching allocator (so the check runs
in ``nox -s tests`` without a GPU and cannot rot). Only ``CudaRig`` imports torch, lazily, and
``SimRig`` uses nothing but the sim's public surface (``reset_device``, ``get_device``).

Also here: torch's wording of an OOM error, parsed, and its ``format_size``, so that a sidecar's
byte counts can be compared with the error text exactly as PyTorch prints them.
"""

from __future__ import annotations

import gc
import os
import platform
import re
import sys
from typing import Any, Protocol

MiB = 1 << 20
GiB = 1 << 30

_SIZE = r"([\d.]+ (?:bytes|KiB|MiB|GiB))"
_OOM_TEXT = re.compile(
    rf"Tried to allocate {_SIZE}\. (?:GPU|Device) (\d+) has a total capacity of {_SIZE}"
    rf" of which {_SIZE} is free"
)
_ALLOWED = re.compile(rf"{_SIZE} allowed;")


def format_size(nbytes: int) -> str:
    """Bytes as PyTorch's ``format_size`` prints them in OOM messages (its ``<=`` thresholds)."""
    if nbytes <= 1024:
        return f"{nbytes} bytes"
    if nbytes <= MiB:
        return f"{nbytes / 1024:.2f} KiB"
    if nbytes <= GiB:
        return f"{nbytes / MiB:.2f} MiB"
    return f"{nbytes / GiB:.2f} GiB"


def parse_oom_text(text: str) -> dict[str, Any] | None:
    """The facts an OOM message states, as printed: allocation, device, total, free, and the
    per-process limit (``allowed``, None where the version does not print it)."""
    match = _OOM_TEXT.search(text)
    if match is None:
        return None
    allowed = _ALLOWED.search(text)  # newer torch prints the per-process limit too
    return {
        "allocation": match[1],
        "device": int(match[2]),
        "total": match[3],
        "free": match[4],
        "allowed": allowed[1] if allowed else None,
    }


def block_size(nbytes: int) -> int:
    """The allocator's ``round_size``: what the trace's ``oom`` entry records for a request."""
    return max(512, -(-nbytes // 512) * 512)


def allocation_size(size: int) -> int:
    """The allocator's ``get_allocation_size``: what it asks the driver for (observer's 2nd arg)."""
    if size <= MiB:
        return 2 * MiB
    if size < 10 * MiB:
        return 20 * MiB
    return -(-size // (2 * MiB)) * (2 * MiB)


class Trainer(Protocol):
    """A training loop's body: one optimizer step at a given batch size."""

    def step(self, batch: int) -> None:
        """Forward, backward and optimizer step (nothing is synchronized)."""
        ...

    def close(self) -> None:
        """Drop the model and optimizer so their memory goes back to the allocator."""
        ...


class Rig(Protocol):
    """What a step needs from the device; ``name`` is also the ForensicsConfig ``device``."""

    name: str
    oom_error: type[BaseException]

    def describe(self) -> dict[str, Any]:
        """The machine: device names, totals, framework versions (goes into the JSON)."""
        ...

    def device_count(self) -> int:
        """Devices this process can use."""
        ...

    def use_device(self, index: int) -> None:
        """Make ``index`` the current device (``torch.cuda.set_device``)."""
        ...

    def current_device(self) -> int:
        """Index of the current device."""
        ...

    def cap(self, nbytes: int | None) -> list[int] | None:
        """Limit the allocator to about ``nbytes`` (None: no limit); the limit it may enforce.

        A list because torch computes the limit as ``fraction * total`` with ``total`` from
        ``cudaMemGetInfo`` in older versions and from the device properties in newer ones; the
        two can differ. Call before ``install()``: on the sim this replaces the device, and the
        OOM observer attaches to the device that exists at install.
        """
        ...

    def mem_get_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes of the current device, as the driver reports them."""
        ...

    def empty(self, nbytes: int) -> Any:
        """An uninitialised buffer of ``nbytes`` on the current device."""
        ...

    def empty_cache(self) -> None:
        """Collect garbage and release every wholly free cached segment."""
        ...

    def synchronize(self) -> None:
        """Wait for the device (the benchmark's own timing needs it, never the library)."""
        ...

    def allocator_settings(self) -> dict[str, Any]:
        """``allocator_settings`` as the allocator reports them in a snapshot."""
        ...

    def trainer(self, *, width: int, layers: int, seq: int) -> Trainer:
        """A small randomly initialised transformer (or its sim stand-in) on the current device."""
        ...


class CudaRig:
    """A real CUDA device through torch (imported here, never by the sim path)."""

    name = "cuda"

    def __init__(self, torch: Any = None) -> None:
        if torch is None:  # tests pass a torch whose cuda calls bind to the real signatures
            import torch
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device: run with --device sim")
        torch.cuda.init()
        self.torch = torch
        self.oom_error: type[BaseException] = torch.OutOfMemoryError

    def describe(self) -> dict[str, Any]:
        """GPU names and totals, torch/CUDA versions."""
        torch = self.torch
        devices = []
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            devices.append(
                {"index": index, "name": props.name, "total_bytes": int(props.total_memory)}
            )
        return {
            "device": "cuda",
            "gpu_name": devices[0]["name"] if devices else None,
            "devices": devices,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        }

    def device_count(self) -> int:
        """``torch.cuda.device_count()``."""
        return int(self.torch.cuda.device_count())

    def use_device(self, index: int) -> None:
        """``torch.cuda.set_device``."""
        self.torch.cuda.set_device(index)

    def current_device(self) -> int:
        """``torch.cuda.current_device()``."""
        return int(self.torch.cuda.current_device())

    def cap(self, nbytes: int | None) -> list[int] | None:
        """``set_per_process_memory_fraction``; the limit is ``int(fraction * total)`` as in C++,
        for either total torch may use (``mem_get_info``'s, or the device properties')."""
        device = self.current_device()
        total = self.mem_get_info()[1]
        fraction = 1.0 if nbytes is None else min(nbytes / total, 1.0)
        self.torch.cuda.set_per_process_memory_fraction(fraction, device)
        if nbytes is None:
            return None
        props = int(self.torch.cuda.get_device_properties(device).total_memory)
        return sorted({int(fraction * total), int(fraction * props)})

    def mem_get_info(self) -> tuple[int, int]:
        """``torch.cuda.mem_get_info()``."""
        free, total = self.torch.cuda.mem_get_info()
        return int(free), int(total)

    def empty(self, nbytes: int) -> Any:
        """``torch.empty(nbytes, dtype=uint8)`` on the current device."""
        torch = self.torch
        return torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{self.current_device()}")

    def empty_cache(self) -> None:
        """``gc.collect()`` then ``torch.cuda.empty_cache()``."""
        gc.collect()
        self.torch.cuda.empty_cache()

    def synchronize(self) -> None:
        """``torch.cuda.synchronize()``."""
        self.torch.cuda.synchronize()

    def allocator_settings(self) -> dict[str, Any]:
        """From ``torch.cuda.memory._snapshot()`` (the same call the library makes)."""
        settings = self.torch.cuda.memory._snapshot().get("allocator_settings")
        return dict(settings) if isinstance(settings, dict) else {}

    def trainer(self, *, width: int, layers: int, seq: int) -> Trainer:
        """A decoder-sized ``nn.TransformerEncoder`` language model with AdamW."""
        from _gpu_models import CudaTransformer

        device = self.torch.device("cuda", self.current_device())
        return CudaTransformer(self.torch, device, width=width, layers=layers, seq=seq)


class SimRig:
    """memforensics's ``sim`` device, through its public surface only."""

    name = "sim"
    roomy = 64 * GiB
    """Size of the device when no cap is asked for (the sim's memory is bookkeeping only)."""

    def __init__(self) -> None:
        from memforensics.testing import SimOutOfMemoryError, get_device, reset_device

        self._get = get_device
        self._reset = reset_device
        self.oom_error: type[BaseException] = SimOutOfMemoryError
        self._reset(self.roomy)

    def describe(self) -> dict[str, Any]:
        """The simulated device (no GPU name: figures from it are a dry run)."""
        return {
            "device": "sim",
            "gpu_name": "sim",
            "devices": [{"index": 0, "name": "sim", "total_bytes": self._get().total_bytes}],
            "torch": None,
            "cuda": None,
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        }

    def device_count(self) -> int:
        """One: the process-wide sim device."""
        return 1

    def use_device(self, index: int) -> None:
        """Only device 0 exists."""
        if index != 0:
            raise ValueError(f"the sim has one device, not {index + 1}")

    def current_device(self) -> int:
        """The sim device's index."""
        return int(self._get().index)

    def cap(self, nbytes: int | None) -> list[int] | None:
        """A fresh device of ``nbytes`` (its total is the limit the observer reports)."""
        self._reset(self.roomy if nbytes is None else nbytes)
        return None if nbytes is None else [nbytes]

    def mem_get_info(self) -> tuple[int, int]:
        """The sim's ``mem_get_info()``."""
        free, total = self._get().mem_get_info()
        return int(free), int(total)

    def empty(self, nbytes: int) -> Any:
        """A ``SimTensor`` (freed when collected, like a tensor)."""
        return self._get().empty(nbytes)

    def empty_cache(self) -> None:
        """``gc.collect()`` then the sim's ``empty_cache()``."""
        gc.collect()
        self._get().empty_cache()

    def synchronize(self) -> None:
        """Nothing runs asynchronously on the sim."""

    def allocator_settings(self) -> dict[str, Any]:
        """From the sim's snapshot."""
        settings = self._get().snapshot().get("allocator_settings")
        return dict(settings) if isinstance(settings, dict) else {}

    def trainer(self, *, width: int, layers: int, seq: int) -> Trainer:
        """Allocations shaped like the CUDA transformer's, on the sim device."""
        from _gpu_models import SimTransformer

        return SimTransformer(self, width=width, layers=layers, seq=seq)
