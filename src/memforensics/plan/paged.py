"""bitsandbytes' paged optimizer states on the planned device, outside PyTorch's allocator.

A paged optimizer (``PagedAdamW``, ``PagedAdamW8bit``, Trainer's ``optim="paged_adamw_32bit"``,
QLoRA's recipe) keeps the state of each parameter of 100,000 elements or more in CUDA managed
(unified) memory that bitsandbytes allocates itself (``functional.get_paged``:
``cudaMallocManaged``, wrapped by ``torch.frombuffer``, marked ``is_paged``), zeroes it with its
own kernel (``fill``) and migrates its pages to the GPU before each step (``prefetch_tensor``);
the driver evicts them to the host when the device runs short. That memory never passes
through PyTorch's caching allocator: ``memory_allocated()`` and ``memory_reserved()`` leave it
out, and it does not take from what ``cudaMalloc`` can give the allocator (the driver evicts
managed pages to make room). The native library is CUDA code the plan cannot run, so here a
paged state is a ``meta`` tensor the plan holds no block for, marked as bitsandbytes marks
one: the optimizer's kernels (their ``meta`` kernels) update it as they update a stand-in, and
the plan's figures leave it out, as the GPU's allocator figures do; that it is left out is said
once. Fills and multiplies on it are torch's, and its prefetch moves nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from memforensics.plan.emulate import is_cuda_device
from memforensics.plan.patches import LibraryReplacement
from memforensics.plan.values import Notes

FUNCTIONAL = "bitsandbytes.functional"
_CUDA = torch.device("cuda", 0)  # get_paged's default, its FIRST_CUDA_DEVICE

LEFT_OUT = (
    "bitsandbytes' paged optimizer states are CUDA managed memory outside PyTorch's allocator "
    "(paged in and out by the driver): they are not in the plan's figures, as they are not in "
    "torch.cuda.memory_allocated()/memory_reserved() on a GPU"
)


def _planned(device: Any) -> bool:
    """Whether ``device`` is the planned device: CUDA, or ``meta`` (a stand-in's ``.device``,
    which is what the optimizer passes: ``get_paged(..., device=p.device)``)."""
    return str(device) == "meta" or is_cuda_device(device)


def _paged(tensor: Any) -> bool:
    """A paged state the plan made: ``meta`` and marked paged."""
    return (
        isinstance(tensor, torch.Tensor)
        and tensor.is_meta
        and bool(getattr(tensor, "is_paged", False))
    )


def _saved_on_host(paged: torch.Tensor, protocol: int) -> Any:
    """A paged state pickled (``torch.save`` of the optimizer's ``state_dict``): on a GPU it is
    a host tensor over managed memory (``torch.frombuffer``), so it is saved as a host tensor
    and loads as one, which ``load_state_dict`` then moves to the device as an ordinary CUDA
    tensor. It holds zeros, as the plan's checkpoints hold for the device's values."""
    return torch.zeros(paged.shape, dtype=paged.dtype).__reduce_ex__(protocol)  # type: ignore[no-untyped-call, unused-ignore]


def paged_state(notes: Notes) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``get_paged`` for the planned device: a ``meta`` tensor of the shape and dtype asked,
    marked ``is_paged`` with its device index, holding no block of the plan's (managed memory
    is not the caching allocator's), said once; another device's is bitsandbytes' own."""

    def stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
        def get_paged(*shape: int, dtype: torch.dtype = torch.float32, device: Any = _CUDA) -> Any:
            if not _planned(device):
                return original(*shape, dtype=dtype, device=device)
            notes.once("paged", LEFT_OUT)
            out = torch.empty(shape, dtype=dtype, device="meta")
            out.is_paged = True  # type: ignore[attr-defined, unused-ignore]
            index = device if isinstance(device, int) else torch.device(device).index
            out.page_deviceid = 0 if index is None else index  # type: ignore[attr-defined, unused-ignore]
            out.__reduce_ex__ = functools.partial(_saved_on_host, out)  # type: ignore[method-assign, unused-ignore]
            return out

        return get_paged

    return stand_in


def prefetched(original: Callable[..., Any]) -> Callable[..., Any]:
    """``prefetch_tensor``: a paged state the plan made has no pages to move."""

    def prefetch_tensor(A: Any, to_cpu: bool = False) -> None:
        if not _paged(A):
            original(A, to_cpu)

    return prefetch_tensor


def filled(original: Callable[..., Any]) -> Callable[..., Any]:
    """``fill``: a paged state the plan made filled by torch."""

    def fill(A: Any, value: Any, device: Any = None, prefetch: bool = True) -> None:
        if _paged(A):
            A.fill_(value)
        else:
            original(A, value, device, prefetch)

    return fill


def multiplied(original: Callable[..., Any]) -> Callable[..., Any]:
    """``_mul``: a paged state the plan made multiplied in place by torch."""

    def _mul(A: Any, B: Any, device: Any = None) -> None:
        if _paged(A) or _paged(B):
            A.mul_(B)
        else:
            original(A, B, device)

    return _mul


def rows(notes: Notes) -> list[LibraryReplacement]:
    """bitsandbytes' paged memory on the planned device, where imported."""
    why = "paged states are CUDA managed memory from bitsandbytes' native CUDA library"
    return [
        LibraryReplacement(FUNCTIONAL, "get_paged", paged_state(notes), why),
        LibraryReplacement(FUNCTIONAL, "prefetch_tensor", prefetched, why),
        LibraryReplacement(FUNCTIONAL, "fill", filled, why),
        LibraryReplacement(FUNCTIONAL, "_mul", multiplied, why),
    ]
