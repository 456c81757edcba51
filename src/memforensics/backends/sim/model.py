"""A model and an optimizer on the sim device, shaped as torch's are where memforensics reads them.

Tests and demos that track a model (``install(model=..., optimizer=...)``) need one whose
tensors sit in sim allocations: a :class:`SimArray` is a tensor as torch shows it (a view of a
storage: ``data_ptr()``, ``untyped_storage().data_ptr()``, ``storage_offset()``,
``itemsize``, ``numel()``, ``get_device()``, ``device.type``), a :class:`SimModule` has
``named_parameters`` / ``named_buffers`` and allocates its gradients in ``backward()``, and
:class:`SimAdam` has ``param_groups`` / ``state`` and allocates ``exp_avg`` and
``exp_avg_sq`` on its first ``step()``. Every allocation is a real one on a
:class:`~memforensics.backends.sim.SimDevice`, so its address is a block of the device's
snapshot. Elements are bytes (``itemsize`` is 1). Plain Python: this module never imports
torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from memforensics.backends.sim.device import SimDevice, SimTensor


@dataclass(frozen=True, slots=True)
class SimDeviceName:
    """``tensor.device`` of a sim tensor: ``type`` ``"sim"`` and the device's index."""

    type: str
    index: int


@dataclass(frozen=True, slots=True)
class SimStorage:
    """``tensor.untyped_storage()`` of a sim tensor: its allocation's address and size."""

    address: int
    size: int

    def data_ptr(self) -> int:
        """The storage's address, as torch's ``UntypedStorage.data_ptr()``."""
        return self.address

    def nbytes(self) -> int:
        """The storage's bytes."""
        return self.size


class SimArray:
    """A tensor of bytes on the sim device: ``nbytes`` at ``offset`` in one allocation.

    ``SimArray.empty`` allocates; ``view`` makes another tensor on the same storage (a flat
    buffer's parameters). ``grad`` is the gradient, as on a parameter.
    """

    __slots__ = ("__weakref__", "_base", "device", "grad", "nbytes", "offset")

    def __init__(self, base: SimTensor, device: SimDeviceName, offset: int, nbytes: int) -> None:
        self._base = base
        self.device = device
        self.offset = offset
        self.nbytes = nbytes
        self.grad: SimArray | None = None

    @classmethod
    def empty(cls, device: SimDevice, nbytes: int) -> SimArray:
        """A fresh allocation of ``nbytes`` on ``device``."""
        return cls(device.empty(nbytes), SimDeviceName("sim", device.index), 0, nbytes)

    def view(self, offset: int, nbytes: int) -> SimArray:
        """``nbytes`` of this tensor's storage from ``offset`` (bytes from the storage's start)."""
        if offset < 0 or offset + nbytes > self._base.nbytes:
            raise ValueError(f"view [{offset}, {offset + nbytes}) outside the storage")
        return SimArray(self._base, self.device, offset, nbytes)

    @property
    def block_size(self) -> int:
        """Bytes of the allocator block holding the storage."""
        return self._base.block_size

    def data_ptr(self) -> int:
        """The address of the first element: the storage's plus the offset."""
        return self._base.address + self.offset

    def get_device(self) -> int:
        """The sim device's index (torch: -1 for a CPU tensor, the index otherwise)."""
        return self.device.index

    @property
    def itemsize(self) -> int:
        """Bytes per element: 1."""
        return 1

    def untyped_storage(self) -> SimStorage:
        """The storage: its address is the allocator block's."""
        return SimStorage(self._base.address, self._base.nbytes)

    def storage_offset(self) -> int:
        """Elements (bytes) from the storage's start."""
        return self.offset

    def element_size(self) -> int:
        """One byte per element."""
        return 1

    def numel(self) -> int:
        """Elements (bytes) of this tensor."""
        return self.nbytes

    def __repr__(self) -> str:
        return f"SimArray(nbytes={self.nbytes}, address={self._base.address:#x}+{self.offset})"


class SimModule:
    """A model on the sim device: named parameters and buffers of given sizes in bytes.

    ``flat=True`` puts every parameter in one allocation (as Megatron's contiguous buffers and
    FSDP1's flat parameter do), each a view at its own offset.
    """

    def __init__(
        self,
        device: SimDevice,
        parameters: dict[str, int],
        buffers: dict[str, int] | None = None,
        *,
        flat: bool = False,
    ) -> None:
        self.device = device
        self._parameters: dict[str, SimArray] = {}
        if flat:
            storage = SimArray.empty(device, sum(parameters.values()))
            offset = 0
            for name, size in parameters.items():
                self._parameters[name] = storage.view(offset, size)
                offset += size
        else:
            for name, size in parameters.items():
                self._parameters[name] = SimArray.empty(device, size)
        self._buffers = {
            name: SimArray.empty(device, size) for name, size in (buffers or {}).items()
        }

    def named_parameters(self) -> Iterator[tuple[str, SimArray]]:
        """``(qualified name, parameter)`` pairs, as ``torch.nn.Module.named_parameters``."""
        yield from self._parameters.items()

    def parameters(self) -> Iterator[SimArray]:
        """The parameters."""
        yield from self._parameters.values()

    def named_buffers(self) -> Iterator[tuple[str, SimArray]]:
        """``(qualified name, buffer)`` pairs, as ``torch.nn.Module.named_buffers``."""
        yield from self._buffers.items()

    def backward(self) -> None:
        """Give every parameter without a gradient one of its size (accumulate into the rest)."""
        for param in self._parameters.values():
            if param.grad is None:
                param.grad = SimArray.empty(self.device, param.nbytes)

    def zero_grad(self) -> None:
        """Drop the gradients (``set_to_none=True``, torch's default): their blocks are freed."""
        for param in self._parameters.values():
            param.grad = None


class SimAdam:
    """Adam on the sim device: ``exp_avg`` and ``exp_avg_sq`` per parameter, made by the first
    ``step()``; ``step`` is a plain count, as a non-tensor state is."""

    def __init__(self, params: Iterable[SimArray], device: SimDevice) -> None:
        self.device = device
        self.param_groups: list[dict[str, Any]] = [{"params": list(params), "lr": 1e-3}]
        self.state: dict[SimArray, dict[str, Any]] = {}

    def step(self) -> None:
        """Update every parameter with a gradient; create its state the first time."""
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state.get(param)
                if state is None:
                    state = self.state[param] = {
                        "step": 0,
                        "exp_avg": SimArray.empty(self.device, param.nbytes),
                        "exp_avg_sq": SimArray.empty(self.device, param.nbytes),
                    }
                state["step"] += 1

    def zero_grad(self) -> None:
        """Drop the gradients of every parameter it updates."""
        for group in self.param_groups:
            for param in group["params"]:
                param.grad = None
