"""``copy.deepcopy`` of a tensor on the planned device copies its whole storage once.

On a GPU, ``Tensor.__deepcopy__`` copies a tensor's storage, whole, once per deep copy:
tensors that share a storage (the keys of a ``state_dict`` under which a tied or shared layer
appears, a view and its base) come out sharing one copy, as ``UntypedStorage.__deepcopy__``
keeps each copy in the memo under the storage's ``_cdata``. A stand-in is a ``meta`` tensor,
for which torch's own code clones each tensor alone, copying a layer shared under four keys
four times (pytorch-tabnet's early stopping keeps ``deepcopy(network.state_dict())``) and a
view at its own size rather than its storage's; so a stand-in takes CUDA's path here.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import handle_torch_function, has_torch_function_unary

MEMO_KEY = "memforensics.plan.deepcopies"
"""The memo entry that keeps, per storage copied (by ``_cdata``), a tensor over its whole copy."""


def deepcopied(
    original: Callable[[torch.Tensor, dict[Any, Any]], torch.Tensor],
    held: Callable[[torch.Tensor], bool],
) -> Callable[[torch.Tensor, dict[Any, Any]], torch.Tensor]:
    """``Tensor.__deepcopy__``: a plain leaf stand-in (``held``) takes CUDA's path, its
    storage copied once per memo, and the copy holds that storage's copy at the tensor's own
    offset, sizes and strides, no view of it (its ``_base`` is None, and it may be written in
    place under grad mode, as a GPU's copy may); every other tensor, and a storage read in two
    dtypes, is copied by ``original``."""

    def __deepcopy__(tensor: torch.Tensor, memo: dict[Any, Any]) -> torch.Tensor:
        if has_torch_function_unary(tensor):
            return handle_torch_function(__deepcopy__, (tensor,), tensor, memo)  # type: ignore[no-any-return, unused-ignore]
        if (
            type(tensor) is not torch.Tensor
            or not tensor.is_leaf
            or id(tensor) in memo
            or not held(tensor)
        ):
            return original(tensor, memo)
        storage = tensor.untyped_storage()
        numel, rest = divmod(storage.nbytes(), tensor.itemsize)
        copies = memo.setdefault(MEMO_KEY, {})
        whole: torch.Tensor | None = copies.get(storage._cdata)
        if rest or (whole is not None and whole.dtype != tensor.dtype):
            return original(tensor, memo)
        with torch.no_grad():
            if whole is None:
                # a view and a clone keep the values the plan knows; ``set_`` would forget them
                whole = tensor.as_strided((numel,), (1,), 0).clone()
                copies[storage._cdata] = whole
            # detached, the copy is no view: in place under grad mode, as a GPU's copy is
            new = whole.as_strided(tensor.size(), tensor.stride(), tensor.storage_offset())
            new = new.detach()
        if tensor.requires_grad:
            new.requires_grad_()
        if tensor.grad is not None:
            new.grad = copy.deepcopy(tensor.grad, memo)
        new.__dict__ = copy.deepcopy(tensor.__dict__, memo)
        memo[id(tensor)] = new
        return new

    return __deepcopy__
