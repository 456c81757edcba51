"""CUDA's default random number generators on the planned device.

A CUDA build makes one default generator per device (``torch.cuda.default_generators``), and
``torch.cuda``'s seeding and state functions read and write them. Libraries reach them directly
too: Megatron's and DeepSpeed's activation checkpointing save and restore a device's state
through ``default_generators[idx]`` (``get_state``/``set_state``, and CUDA graphs' safe
``graphsafe_get_state``/``graphsafe_set_state``/``clone_state``), and Hugging Face's Reformer
draws its seeds from them. The CPU build's tuple is empty, so each planned device gets one here.

A stand-in's random values are never drawn, so what a generator holds is only its state, as
CUDA's is laid out (``CUDAGeneratorImpl::get_state``): a 16-byte tensor, the 64-bit seed and the
64-bit offset of the Philox stream. A state a real GPU saved (a checkpoint's) sets it, and one it
gives sets a real GPU's. Underneath it is a CPU generator, so an operator given it as
``generator=`` accepts it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import torch

from memforensics.plan.emulate import names_planned_device

STATE = struct.Struct("<Qq")
"""A CUDA generator's state: the seed (unsigned) and the offset, 8 bytes each."""


class CudaGenerator(torch.Generator):  # type: ignore[misc, unused-ignore]  # torch's C type
    """Device ``index``'s default generator: its seed and Philox offset, read and written as
    CUDA's are."""

    def __new__(cls, index: int) -> CudaGenerator:
        return super().__new__(cls, device="cpu")  # type: ignore[no-any-return, unused-ignore]

    def __init__(self, index: int) -> None:
        self.index = index
        self.offset = 0

    @property
    def device(self) -> torch.device:  # type: ignore[override, unused-ignore]
        """The CUDA device it draws for."""
        return torch.device("cuda", self.index)

    def manual_seed(self, seed: int) -> CudaGenerator:
        """Seed it, its offset back to the stream's start."""
        super().manual_seed(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)
        self.offset = 0
        return self

    def seed(self) -> int:
        """Seed it from a random source, as ``Generator.seed`` does; the seed."""
        found = super().seed()
        self.offset = 0
        return int(found)

    def get_state(self) -> torch.Tensor:
        """The 16-byte state: seed, then offset."""
        packed = bytearray(STATE.pack(self.initial_seed(), self.offset))
        return torch.frombuffer(packed, dtype=torch.uint8).clone()

    def set_state(self, new_state: torch.Tensor) -> CudaGenerator:
        """Take a 16-byte state, as CUDA's ``set_state`` does (a wrong size fails as there)."""
        if new_state.dtype != torch.uint8 or new_state.numel() != STATE.size:
            raise RuntimeError("RNG state is wrong size")
        seed, offset = STATE.unpack(bytes(new_state.cpu().tolist()))
        super().manual_seed(seed)
        self.offset = offset
        return self

    def get_offset(self) -> int:
        """Where in the Philox stream the next draw starts."""
        return self.offset

    def set_offset(self, offset: int) -> CudaGenerator:
        """Move the next draw's start."""
        self.offset = int(offset)
        return self

    def clone_state(self) -> CudaGenerator:
        """A new generator holding this one's state, as CUDA graphs register one."""
        clone = CudaGenerator(self.index)
        clone.set_state(self.get_state())
        return clone

    def graphsafe_get_state(self) -> CudaGenerator:
        """The state, as a generator that holds it (CUDA hands back its state's owner)."""
        return self

    def graphsafe_set_state(self, new_state: torch.Generator) -> CudaGenerator:
        """Take the state another generator holds."""
        if isinstance(new_state, CudaGenerator):
            self.set_state(new_state.get_state())
        return self


class DefaultGenerators:
    """The planned devices' default generators, and ``torch.cuda``'s random functions over
    them, each as torch's own ``torch/cuda/random.py`` does it."""

    def __init__(self, count: int, current: Callable[[], int]) -> None:
        self.all = tuple(CudaGenerator(index) for index in range(max(count, 1)))
        self._current = current

    def of(self, device: Any = "cuda") -> CudaGenerator:
        """The generator of ``device`` (an index, a name, a ``torch.device``; the current one
        where it names no index)."""
        if isinstance(device, str):
            device = torch.device(device)
        index = device if isinstance(device, int) else device.index
        return self.all[self._current() if index is None else index]

    def generator_class(self) -> type:
        """``torch.Generator`` whose ``device="cuda"`` is a new :class:`CudaGenerator` of that
        device (the current one where it names no index), as CUDA's ``getNewGenerator`` makes
        it: its ``device`` is the planned one and its state CUDA's 16 bytes, so code that
        branches on ``generator.device`` (drawing on the host for a CPU generator, then
        copying) takes the GPU's branch. The device read off a stand-in
        (``torch.Generator(device=param.device)``) is the planned one too. Any generator passes
        ``isinstance`` as before."""
        original = torch.Generator
        of = self.of

        class Planned(type(original)):  # type: ignore[misc]  # torch's metaclass is untyped
            def __instancecheck__(cls, instance: object) -> bool:
                return isinstance(instance, original)

            def __subclasscheck__(cls, subclass: type) -> bool:
                return issubclass(subclass, original)

        class Generator(original, metaclass=Planned):  # type: ignore[misc, valid-type]
            def __new__(cls, device: Any = "cpu") -> Any:
                if names_planned_device(device):
                    return CudaGenerator(of(device).index)
                return original(device=device)

        return Generator

    def functions(self) -> dict[str, Callable[..., Any]]:
        """``torch.cuda``'s random functions by name."""

        def manual_seed(seed: int) -> None:
            self.of().manual_seed(seed)

        def manual_seed_all(seed: int) -> None:
            for generator in self.all:
                generator.manual_seed(seed)

        def seed() -> None:
            self.of().seed()

        def seed_all() -> None:
            first = self.all[0].seed()
            for generator in self.all[1:]:
                generator.manual_seed(first)

        def initial_seed() -> int:
            return int(self.of().initial_seed())

        def get_rng_state(device: Any = "cuda") -> torch.Tensor:
            return self.of(device).get_state()

        def get_rng_state_all() -> list[torch.Tensor]:
            return [generator.get_state() for generator in self.all]

        def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
            self.of(device).set_state(new_state)

        def set_rng_state_all(new_states: Any) -> None:
            for generator, state in zip(self.all, new_states, strict=False):
                generator.set_state(state)

        return {
            "manual_seed": manual_seed,
            "manual_seed_all": manual_seed_all,
            "seed": seed,
            "seed_all": seed_all,
            "initial_seed": initial_seed,
            "get_rng_state": get_rng_state,
            "get_rng_state_all": get_rng_state_all,
            "set_rng_state": set_rng_state,
            "set_rng_state_all": set_rng_state_all,
        }
