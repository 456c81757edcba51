"""What a stand-in answers about its own memory: its block's address and device 0, as CUDA does.

A stand-in is a ``meta`` tensor, and a ``meta`` tensor says ``data_ptr() == 0`` and
``get_device() == -1``. A CUDA tensor says where its storage's block starts (plus its offset)
and which device holds it. Both answers matter to real code: capture's tracker reads them to
list the model's and optimizer's tensors in a sidecar (so a planned dump knows its kinds as a
GPU dump does), and scripts tell storages apart by address (``safetensors``' shared-tensor
check, de-duplicating tied weights by ``data_ptr()``), which all-zero addresses would merge.

Only tensors whose storage the plan put on the device answer so; the script's own ``meta``
tensors keep ``meta``'s answers. ``.device`` and ``.is_cuda`` stay ``meta``'s: torch's own Python
branches on them to call CUDA-only kernels (cuDNN's RNN weights, fused attention) that the
``meta`` device does not implement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

Address = Callable[[int], int | None]
"""The start of the block holding a storage (by ``_cdata``); 0 for an empty storage on the
device, None for a storage the plan does not hold."""


def on_device(address: Address) -> Callable[[torch.Tensor], bool]:
    """Whether a tensor is a stand-in: ``meta`` over a storage the plan put on the device (the
    script's own ``meta`` tensors are not)."""

    def held(tensor: torch.Tensor) -> bool:
        return bool(tensor.is_meta) and address(tensor.untyped_storage()._cdata) is not None

    return held


class Methods(NamedTuple):
    """``Tensor.data_ptr``, ``Tensor.get_device``, ``UntypedStorage.data_ptr`` and the
    storage's sharing answering from the planned device for its storages, as torch's own for
    every other."""

    data_ptr: Callable[[torch.Tensor], int]
    get_device: Callable[[torch.Tensor], int]
    untyped_data_ptr: Callable[[torch.UntypedStorage], int]
    share_memory_: Callable[[torch.UntypedStorage], torch.UntypedStorage]
    is_shared: Callable[[torch.UntypedStorage], bool]


SHARED = (
    "a device tensor was shared for other processes (model.share_memory()): multiprocessing's "
    "processes given it, started with spawn or forkserver, are planned as workers; other "
    "processes that use it run outside the plan, and what they allocate on the GPU is not counted"
)
"""Said once where the script shares a stand-in's storage: on CUDA, other processes (Hogwild
training, A3C workers) open it by IPC and allocate on the same GPU through their own
allocators; the plan runs those started as ``multiprocessing`` processes
(:mod:`~memforensics.plan.workers`), not others."""


def methods(address: Address, say: Callable[[str, str], None]) -> Methods:
    """The methods over ``address``: torch's own for what the plan does not hold. ``say``
    keeps a note once."""
    tensor_ptr = torch._C.TensorBase.data_ptr
    tensor_device = torch._C.TensorBase.get_device
    storage_ptr = torch._C.StorageBase.data_ptr  # type: ignore[attr-defined, unused-ignore]  # not in the stub
    storage_share = torch.UntypedStorage.share_memory_
    storage_shared = torch.UntypedStorage.is_shared
    held = on_device(address)

    def data_ptr(self: torch.Tensor) -> int:
        if self.is_meta:
            start = address(self.untyped_storage()._cdata)
            if start is not None:
                return start + int(self.storage_offset()) * self.itemsize if start else 0
        return int(tensor_ptr(self))

    def get_device(self: torch.Tensor) -> int:
        if held(self):
            return 0
        return int(tensor_device(self))

    def untyped_data_ptr(self: torch.UntypedStorage) -> int:
        if self.device.type == "meta":
            start = address(self._cdata)
            if start is not None:
                return start
        return int(storage_ptr(self))

    def share_memory_(self: torch.UntypedStorage) -> torch.UntypedStorage:
        """A device storage is shared as it is (``model.share_memory()`` of a CUDA model:
        only CPU storages move to POSIX shared memory; CUDA's go to other processes by IPC)."""
        if self.device.type == "meta" and address(self._cdata) is not None:
            say("shared", SHARED)
            return self
        shared: torch.UntypedStorage = storage_share(self)
        return shared

    def is_shared(self: torch.UntypedStorage) -> bool:
        """A device storage is always shared, as torch says of CUDA's."""
        if self.device.type == "meta" and address(self._cdata) is not None:
            return True
        return bool(storage_shared(self))

    return Methods(data_ptr, get_device, untyped_data_ptr, share_memory_, is_shared)
