"""A training loop and an inference server on the sim device that label every allocation with
its true kind.

The truth for the kinds classifier: parameters made before the first step, activations kept by
forward and freed by backward, temporaries, gradients (the first micro-batch's persist; later
micro-batches' partial gradients are added in place and freed), Adam's two state tensors per
parameter made in the optimizer's first step, and Adam's temporaries. Backward and the optimizer
run under files laid out like torch's own (``torch/autograd/graph.py``'s
``_engine_run_backward``, ``torch/optim/adam.py``), so the frames in the dump have the shape a
real CPU/GPU dump has; :func:`engine_thread_frames` then strips backward's Python frames, as
CUDA and NPU dumps record them (the autograd engine runs on a device thread).

:class:`InferenceLoop` serves a model instead: weights made by module constructors, a KV cache
sized up front (``vllm/worker/cache_engine.py``'s ``_allocate_kv_cache``), cuBLAS's workspace,
and decode steps whose tensors die within each forward, until a last forward still under way.
"""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from memforensics.analysis.dump import is_native_frame
from memforensics.backends.sim import SimDevice, SimTensor

MiB = 1 << 20
KiB = 1 << 10

_RUNNER = "def {name}(run):\n    return run()\n"


def _runner_modules(files: dict[Path, str]) -> list[ModuleType]:
    """Import each file (written first) as a module of its own."""
    modules = []
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(f"labelled_{path.stem}_{len(text)}", path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules.append(module)
    return modules


def torch_shaped_modules(root: Path) -> tuple[ModuleType, ModuleType, ModuleType]:
    """``site-packages/torch/autograd/graph.py``, ``torch/optim/adam.py`` and
    ``torch/nn/modules/module.py`` (``_apply``: ``model.to(device)``) stand-ins."""
    site = root / "lib" / "python3.12" / "site-packages" / "torch"
    files = {
        site / "autograd" / "graph.py": _RUNNER.format(name="_engine_run_backward"),
        site / "optim" / "adam.py": _RUNNER.format(name="_init_group")
        + _RUNNER.format(name="_single_tensor_adam"),
        site / "nn" / "modules" / "module.py": _RUNNER.format(name="_apply"),
    }
    modules = _runner_modules(files)
    return modules[0], modules[1], modules[2]


@dataclass
class Workload:
    """What the loop allocated: one label per ``alloc`` event, in order, and the live tensors."""

    labels: list[str] = field(default_factory=list)
    live: dict[int, str] = field(default_factory=dict)  # address -> label of live tensors
    sizes: dict[int, int] = field(default_factory=dict)  # address -> block bytes of live tensors
    requested: dict[int, int] = field(default_factory=dict)  # address -> bytes asked for
    peak_bytes: int = 0  # the most block bytes live at once
    peak_requested: int = 0  # the most requested bytes live at once
    peak_kinds: dict[str, int] = field(default_factory=dict)  # bytes per label at the peak

    def note_peak(self) -> None:
        """Remember the live bytes per label when they reach a new high."""
        self.peak_requested = max(self.peak_requested, sum(self.requested.values()))
        total = sum(self.sizes.values())
        if total > self.peak_bytes:
            self.peak_bytes = total
            self.peak_kinds = {}
            for address, label in self.live.items():
                self.peak_kinds[label] = self.peak_kinds.get(label, 0) + self.sizes[address]


class Labelling:
    """Allocates and frees on the sim device, keeping the truth of every tensor's kind."""

    device: SimDevice
    truth: Workload

    def alloc(self, label: str, nbytes: int) -> SimTensor:
        """Allocate and record the truth."""
        tensor = self.device.empty(nbytes)
        self.truth.labels.append(label)
        self.truth.live[tensor.address] = label
        self.truth.sizes[tensor.address] = tensor.block_size
        self.truth.requested[tensor.address] = nbytes
        self.truth.note_peak()
        return tensor

    def free(self, tensor: SimTensor) -> None:
        """Free and forget the truth of a live tensor."""
        self.truth.live.pop(tensor.address, None)
        self.truth.sizes.pop(tensor.address, None)
        self.truth.requested.pop(tensor.address, None)
        tensor.free()


class TrainingLoop(Labelling):
    """A small model with ``layers`` layers trained with Adam on the sim device."""

    def __init__(
        self,
        device: SimDevice,
        root: Path,
        *,
        layers: int = 6,
        micro_batches: int = 1,
        zero_grad_at_end: bool = False,
        seed: int = 0,
    ) -> None:
        self.device = device
        self.autograd, self.adam, self.module = torch_shaped_modules(root)
        self.rng = random.Random(seed)
        self.layers = layers
        self.micro_batches = micro_batches
        self.zero_grad_at_end = zero_grad_at_end
        self.truth = Workload()
        self.params: list[SimTensor] = []
        self.grads: list[SimTensor | None] = [None] * layers
        self.state: list[SimTensor] = []
        self._kept: list[tuple[SimTensor, str]] = []

    def build_model(self) -> None:
        """Parameters, before any step, moved to the device as ``model.to(device)`` does."""
        for _ in range(self.layers):
            size = self.rng.randint(1, 6) * MiB
            self.params.append(self.module._apply(lambda n=size: self.alloc("parameter", n)))

    def step(self, number: int, tag: Callable[[str], None]) -> None:
        """One optimizer step: zero_grad, micro-batches of forward and backward, Adam."""
        tag(f"step={number}")
        if not self.zero_grad_at_end:
            self.zero_grad()
        for micro in range(self.micro_batches):
            activations = self.forward()
            self.autograd._engine_run_backward(lambda a=activations, m=micro: self.backward(a, m))
        self.optimizer_step()
        if self.zero_grad_at_end:
            self.zero_grad()
        tag("")

    def forward(self) -> list[SimTensor]:
        """Each layer: a temporary or two, then its kept activation."""
        kept = []
        for _ in range(self.layers):
            scratch = self.alloc("temporary", self.rng.randint(64, 512) * KiB)
            kept.append(self.alloc("activation", self.rng.randint(2, 8) * MiB))
            self.free(scratch)
            if self.rng.random() < 0.5:
                self.free(self.alloc("temporary", self.rng.randint(16, 256) * KiB))
        loss = self.alloc("temporary", 4 * KiB)
        self.free(loss)
        return kept

    def backward(self, activations: list[SimTensor], micro: int) -> None:
        """Reverse order: a gradient-of-input temporary, the weight gradient, free activation."""
        upstream = self.alloc("temporary", self.rng.randint(1, 4) * MiB)
        for layer in reversed(range(self.layers)):
            grad_input = self.alloc("temporary", self.rng.randint(1, 4) * MiB)
            self.free(upstream)
            upstream = grad_input
            size = self.params[layer].nbytes
            if self.grads[layer] is None:
                self.grads[layer] = self.alloc("gradient", size)
            else:  # accumulation: the partial gradient is added in place, then freed
                self.free(self.alloc("temporary", size))
            self.free(activations[layer])
        self.free(upstream)

    def optimizer_step(self) -> None:
        """Adam: state on the first step, then a temporary per parameter."""
        if not self.state:
            for param in self.params:
                self.adam._init_group(lambda p=param: self._init_state(p))
        for param in self.params:
            self.adam._single_tensor_adam(
                lambda p=param: self.free(self.alloc("temporary", p.nbytes))
            )

    def _init_state(self, param: SimTensor) -> None:
        self.state.append(self.alloc("optimizer_state", param.nbytes))
        self.state.append(self.alloc("optimizer_state", param.nbytes))

    def zero_grad(self) -> None:
        """``set_to_none=True``: the gradients go."""
        for layer, grad in enumerate(self.grads):
            if grad is not None:
                self.free(grad)
                self.grads[layer] = None


class InferenceLoop(Labelling):
    """A model with ``layers`` layers served on the sim device (no backward, no optimizer)."""

    def __init__(self, device: SimDevice, root: Path, *, layers: int = 6, seed: int = 0) -> None:
        site = root / "lib" / "python3.12" / "site-packages"
        self.linear, self.cache_engine, self.blas = _runner_modules(
            {
                site / "torch" / "nn" / "modules" / "linear.py": _RUNNER.format(name="__init__"),
                site / "vllm" / "worker" / "cache_engine.py": _RUNNER.format(
                    name="_allocate_kv_cache"
                ),
                site / "torch" / "cuda" / "blas.py": _RUNNER.format(name="getNewWorkspace"),
            }
        )
        self.device = device
        self.rng = random.Random(seed)
        self.layers = layers
        self.truth = Workload()
        self.workspace: SimTensor | None = None
        self.held: list[SimTensor] = []  # weights, cache, the last step's outputs

    def build(self, cache_blocks: int = 8) -> None:
        """Weights from each layer's constructor, then the KV cache in equal blocks."""
        for _ in range(self.layers):
            size = self.rng.randint(1, 6) * MiB
            self.held.append(self.linear.__init__(lambda n=size: self.alloc("parameter", n)))
        for _ in range(cache_blocks):
            self.held.append(
                self.cache_engine._allocate_kv_cache(lambda: self.alloc("kv_cache", 16 * MiB))
            )

    def forward(self, *, last: bool = False) -> None:
        """One decode step: each layer's scratch and output die within the step; the ``last``
        step is still under way at the dump, its outputs live (activations)."""
        kept = []
        for _ in range(self.layers):
            if self.workspace is None:  # cuBLAS makes its workspace at the first matmul
                self.workspace = self.blas.getNewWorkspace(
                    lambda: self.alloc("workspace", 8_519_680)
                )
            scratch = self.alloc("temporary", self.rng.randint(64, 512) * KiB)
            kept.append(
                self.alloc("activation" if last else "temporary", self.rng.randint(1, 4) * MiB)
            )
            self.free(scratch)
        if last:
            self.held += kept
        else:
            for tensor in kept:
                self.free(tensor)


def engine_thread_frames(snapshot: dict[str, Any]) -> dict[str, Any]:
    """Drop every Python frame from backward's entries, as a CUDA dump records them."""

    def strip(frames: object) -> object:
        if isinstance(frames, list) and any(
            isinstance(f, dict) and f.get("name") == "_engine_run_backward" for f in frames
        ):
            return [
                f
                for f in frames
                if is_native_frame(str(f.get("filename", "")), str(f.get("name", "")))
            ]
        return frames

    for trace in snapshot["device_traces"]:
        for entry in trace:
            entry["frames"] = strip(entry.get("frames"))
    for segment in snapshot["segments"]:
        for block in segment["blocks"]:
            if "frames" in block:
                block["frames"] = strip(block["frames"])
    return snapshot
