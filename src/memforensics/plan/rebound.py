"""``tensor.data = other`` between the planned device and the host.

Offloading code moves a parameter between the GPU and the host in place, keeping the object an
optimizer and a module hold: ``param.data = param.data.to("cpu", non_blocking=True)`` and back
with ``.to("cuda")`` (verl's and DeepSpeed's offload between an RL step's phases; FSDP's
``flat_param_to``). torch's ``set_data`` (``VariableHooks::set_data``) allows it where the two
tensors' types are compatible (``TensorImpl::has_compatible_shallow_copy_type``: the same key
set, or both dense on a backend among CPU, CUDA, MPS, HIP, XPU, HPU and MTIA), and then gives
the variable the other's storage, sizes and dtype, keeping its own autograd state (its
``requires_grad``, gradient and hooks). A CUDA and a CPU tensor are compatible; ``meta`` is not
among those backends, so a stand-in and a host tensor are not, and the CPU build refused with
"incompatible tensor type" what a GPU does.

Here that one case, a stand-in (not a ``meta`` tensor of the script's own, which a GPU refuses
too) and a dense host tensor, is done by giving the variable the content of a tensor of its
class over the other's storage (:func:`take_content`): the object keeps its identity, Python
attributes and weak references, and its old storage is freed
when nothing else holds it, so a stand-in's block goes back to the planned device as the GPU's
memory does. A gradient stays with it where its device and dtype are the new data's (else
torch's own refusal stands); hooks on its autograd state are not carried over. Every other
assignment is torch's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_DATA: Any = vars(torch._C.TensorBase)["data"]  # the getset descriptor: .data and set_data
_CPU = torch.device("cpu")


def _dense_host(tensor: torch.Tensor) -> bool:
    return bool(tensor.device == _CPU and tensor.layout == torch.strided)


def rebinding(holds_ghost: Callable[[torch.Tensor], bool]) -> property:
    """``Tensor.data``: read as torch reads it; set as torch sets it, and, between a stand-in
    and a dense host tensor, as a CUDA build does. ``holds_ghost``: whether a ``meta`` tensor
    is the script's own (not on the planned device)."""

    def stand_in(tensor: torch.Tensor) -> bool:
        return tensor.is_meta and not holds_ghost(tensor)

    def across(tensor: torch.Tensor, new: torch.Tensor) -> bool:
        """Whether the two are a stand-in and a dense host tensor, which a GPU rebinds."""
        return (stand_in(tensor) and _dense_host(new)) or (_dense_host(tensor) and stand_in(new))

    def get(tensor: torch.Tensor) -> Any:
        return _DATA.__get__(tensor, type(tensor))

    def set_data(tensor: torch.Tensor, new: Any) -> None:
        if (
            not isinstance(new, torch.Tensor)
            or torch._has_compatible_shallow_copy_type(tensor, new)
            or not across(tensor, new)
        ):
            _DATA.__set__(tensor, new)
            return
        _swap_in(tensor, new)

    return property(get, set_data, doc=_DATA.__doc__)


def _swap_in(tensor: torch.Tensor, new: torch.Tensor) -> None:
    """``tensor`` given ``new``'s storage, sizes and dtype in place, keeping its class,
    ``requires_grad``, Python attributes and gradient. Where its gradient could not stay with
    it (another device or dtype than ``new``'s), or the new dtype cannot require one, torch's
    own assignment runs, and raises."""
    grad = tensor.grad
    kept = grad is None or (grad.device == new.device and grad.dtype == new.dtype)
    differentiable = new.is_floating_point() or new.is_complex()
    if not kept or (tensor.requires_grad and not differentiable):
        _DATA.__set__(tensor, new)
        return
    replacement = torch.Tensor._make_subclass(type(tensor), new, tensor.requires_grad)
    with torch.no_grad():
        take_content(tensor, replacement)
    if grad is not None:
        replacement.grad = None
        tensor.grad = grad


def take_content(tensor: torch.Tensor, content: torch.Tensor) -> None:
    """``tensor`` given ``content``'s tensor (storage, sizes, dtype, autograd state) in place,
    as ``tensor.data = content`` gives it on a CUDA build: the Python object stays as it is,
    with its class, its attributes and the weak references to it; ``content`` is left with
    ``tensor``'s old tensor. ``torch.utils.swap_tensors`` would move the class and attributes
    to ``content`` too, and refuses a tensor that has weak references."""
    torch._C._swap_tensor_impl(tensor, content)
