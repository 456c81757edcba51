"""The smallest and largest value of a large integer storage copied from the host.

A batch of graphs arrives on the device as integer tensors, which can be too large for their
values to be kept (:data:`~memforensics.plan.known.HOST_LIMIT`): a batch vector, one graph
index a node, and an edge index. Sizes on the device come from their extremes: PyTorch
Geometric's ``scatter`` (under ``global_mean_pool`` and the other poolings) makes
``int(index.max()) + 1`` rows, and ``maybe_num_nodes`` counts ``int(edge_index.max()) + 1``
nodes. Read as zero, such a pool would make one row where a GPU makes one a graph.

So a large integer or boolean storage copied from the host keeps its extremes, found on the host
copy at no host memory (two numbers), and ``max``/``min``/``amax``/``amin`` over all of its
elements (a view that lays out each of them once, in any order) is known. A write into the
storage forgets them, as it forgets kept values. Floating-point copies (a model's weights) keep
none: their extremes decide no size.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from memforensics.plan.periodic import covers

_CPU = torch.device("cpu")
_LARGEST = frozenset((torch.ops.aten.max.default, torch.ops.aten.amax.default))
_SMALLEST = frozenset((torch.ops.aten.min.default, torch.ops.aten.amin.default))


def integral(dtype: torch.dtype) -> bool:
    """Whether ``dtype`` holds integers (or flags): values that can decide a size."""
    return dtype == torch.bool or not (dtype.is_floating_point or dtype.is_complex)


class Extremes:
    """Extremes of large integer storages copied from the host, by storage, kept as long as the
    storage lives and is not written."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[Any, Any, torch.dtype, int]] = {}

    def __bool__(self) -> bool:
        return bool(self._kept)

    def copied(self, source: torch.Tensor, copy: torch.Tensor) -> None:
        """``copy``, a stand-in, now holds host tensor ``source``'s values, all of its storage."""
        if not integral(copy.dtype) or not covers(copy) or source.numel() != copy.numel():
            return
        if source.numel() == 0:
            return
        values = source.to(copy.dtype)
        storage = copy.untyped_storage()
        key = storage._cdata
        if key not in self._kept:
            weakref.finalize(storage, self._kept.pop, key, None)
        self._kept[key] = (values.min().item(), values.max().item(), copy.dtype, storage.nbytes())

    def reduced(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The value of ``max``/``min`` (or ``amax``/``amin`` over every dimension) of a whole
        storage whose extremes are kept, as a CPU scalar; None otherwise."""
        largest = func in _LARGEST
        if not (largest or func in _SMALLEST) or not args:
            return None
        tensor = args[0]
        if not isinstance(tensor, torch.Tensor) or not tensor.is_meta:
            return None
        dim = args[1] if len(args) > 1 else kwargs.get("dim", ())
        if dim not in ((), []):
            return None
        storage = tensor.untyped_storage()
        kept = self._kept.get(storage._cdata)
        if kept is None or kept[2] != tensor.dtype or kept[3] != storage.nbytes():
            return None
        if not covers(tensor):
            return None
        return torch.tensor(kept[1] if largest else kept[0], dtype=tensor.dtype, device=_CPU)

    def forget(self, tensors: list[torch.Tensor]) -> None:
        """``tensors`` were written: their storages' extremes are not known any more."""
        for tensor in tensors:
            self._kept.pop(tensor.untyped_storage()._cdata, None)
