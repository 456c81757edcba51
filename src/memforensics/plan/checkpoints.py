"""``torch.save`` of planned tensors: written as the CUDA tensors they stand for.

A stand-in is a ``meta`` tensor, and torch pickles a ``meta`` tensor as its shape alone
(``_rebuild_meta_tensor_no_storage``): a checkpoint saved in a plan and loaded back in the same
run (the best model reloaded at the end, a resume) came back as the script's own ``meta``
tensors, on no device, so loading it added nothing to the device where on a GPU it holds a
second copy of the weights. Under the plan a stand-in is pickled as torch pickles a CUDA tensor:
its storage, once however many views share it, tagged ``cuda:0``, with its bytes (zeros, the
values a plan reads for unknown data), so the file is an ordinary CUDA checkpoint that
``torch.load`` restores onto the planned device, or onto the host with ``map_location="cpu"``,
as on a GPU.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from memforensics.plan.emulate import Ghosts

SAVED_ON = torch.device("cuda", 0)
"""The location a saved stand-in's storage is tagged with: the planned device, as CUDA tags it."""


class Checkpoints:
    """The two stand-ins ``torch.save`` meets: a planned tensor pickled, and its storage
    copied to the host for its bytes. ``ghosts`` tells the script's own ``meta`` storages,
    which torch saves as it always does, from the plan's stand-ins."""

    def __init__(self, ghosts: Ghosts) -> None:
        self._ghosts = ghosts

    def _stands_in(self, storage: Any) -> bool:
        return storage.device.type == "meta" and storage._cdata not in self._ghosts.keys

    def pickled(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``Tensor._reduce_ex_internal`` for a stand-in: torch's own pickling of a dense
        tensor, its storage tagged with the planned CUDA device (torch's tag for a storage it
        cannot see the device of). Every other tensor is torch's."""

        def _reduce_ex_internal(tensor: torch.Tensor, proto: int) -> Any:
            if (
                type(tensor) is not torch.Tensor
                or tensor.layout != torch.strided
                or tensor.dtype in torch.storage._new_dtypes()
                or not self._stands_in(tensor.untyped_storage())
            ):
                return original(tensor, proto)
            storage = torch.storage.TypedStorage(
                wrap_storage=tensor.untyped_storage(), dtype=tensor.dtype, _internal=True
            )
            storage._fake_device = SAVED_ON  # type: ignore[attr-defined, unused-ignore]
            args: tuple[Any, ...] = (
                storage,
                tensor.storage_offset(),
                tuple(tensor.size()),
                tensor.stride(),
                tensor.requires_grad,
                OrderedDict(),
            )
            metadata = torch._utils.get_tensor_metadata(tensor)
            return (torch._utils._rebuild_tensor_v2, (*args, metadata) if metadata else args)

        return _reduce_ex_internal

    def host_copy(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``UntypedStorage.cpu`` of a stand-in's storage (``torch.save`` copies each storage to
        the host to write it): its size in zeros, the values a plan reads for unknown data."""

        def cpu(storage: Any) -> Any:
            if not self._stands_in(storage):
                return original(storage)
            return torch.zeros(storage.nbytes(), dtype=torch.uint8).untyped_storage()

        return cpu
