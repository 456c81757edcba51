"""What a stand-in cannot know: its values. Where the script asks for them, the plan answers
zeros, takes a data-dependent shape at its upper bound, and says once where it happened.

``torch.compile`` runs eagerly (compiled memory differs, and the plan says so).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch

from memforensics.plan.device import PlannedRunWarning

_TORCH = os.path.dirname(torch.__file__)
_HERE = os.path.dirname(os.path.abspath(__file__))
_META = torch.device("meta")


def where() -> str:
    """``file:line`` of the innermost frame of the script's own code (not torch's, not ours)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith((_TORCH, _HERE)) or name.startswith("<")):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return "an unknown place"


class Notes:
    """Says each kind of difference once, naming where it first happened."""

    def __init__(self) -> None:
        self.said: set[str] = set()

    def once(self, kind: str, message: str) -> None:
        """Warn ``message`` (with where it happened) the first time ``kind`` is seen."""
        if kind not in self.said:
            self.said.add(kind)
            warnings.warn(f"{message} (first at {where()})", PlannedRunWarning, stacklevel=2)


def _zeros_like(tensor: torch.Tensor) -> torch.Tensor:
    """Zeros of ``tensor``'s shape and dtype on the CPU, with no memory behind the shape."""
    return torch.zeros((), dtype=tensor.dtype).expand(tensor.shape)


READ = "values read from the device are zeros in a plan"


def item(notes: Notes, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """``.item()`` of a stand-in: zero of its dtype."""
    notes.once("read", READ)
    return torch.zeros((), dtype=tensor.dtype).item()


def tolist(notes: Notes, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """``.tolist()`` of a stand-in: zeros of its shape."""
    notes.once("read", READ)
    return _zeros_like(tensor).tolist()


def to_host(notes: Notes, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """``.cpu()``/``.numpy()``-bound copies of a stand-in: zeros on the CPU, allocated there
    as the real copy would be."""
    notes.once("read", READ)
    return torch.zeros(tensor.shape, dtype=tensor.dtype)


def text(notes: Notes, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> str:
    """How a stand-in prints: zeros, on the CUDA device the script put it on."""
    notes.once("read", READ)
    shown = repr(_zeros_like(tensor))
    return shown[:-1] + ", device='cuda:0')" if shown.endswith(")") else shown


def formatted(notes: Notes, tensor: torch.Tensor, spec: str) -> str:
    """``f"{t:.3f}"``: a scalar's zero formatted, else the printed zeros."""
    if tensor.dim() == 0:
        return format(item(notes, tensor), spec)
    return text(notes, tensor)


def to_numpy(notes: Notes, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """``.numpy()`` of a stand-in: zeros."""
    return to_host(notes, tensor).numpy()


def scalar(notes: Notes, tensor: torch.Tensor) -> Any:
    """A scalar read below Python (``bool(t)``, ``int(t)``, a data-dependent branch)."""
    notes.once("read", READ)
    return torch.zeros((), dtype=tensor.dtype).item()


BOUND = "a data-dependent shape takes its upper bound in a plan"


def nonzero(notes: Notes, tensor: torch.Tensor) -> torch.Tensor:
    """``nonzero``: every element counted, ``(numel, ndim)`` indices."""
    notes.once("bound", BOUND)
    return torch.empty((tensor.numel(), tensor.dim()), dtype=torch.long, device=_META)


def masked_select(notes: Notes, tensor: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``masked_select``: every element of the broadcast shape selected."""
    notes.once("bound", BOUND)
    numel = torch.broadcast_shapes(tensor.shape, mask.shape).numel()
    return torch.empty((numel,), dtype=tensor.dtype, device=_META)


def unique(
    notes: Notes,
    tensor: torch.Tensor,
    sorted: bool = True,
    return_inverse: bool = False,
    return_counts: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``unique``: every element distinct."""
    notes.once("bound", BOUND)
    numel = tensor.numel()
    out = torch.empty((numel,), dtype=tensor.dtype, device=_META)
    inverse = torch.empty(tensor.shape if return_inverse else (0,), dtype=torch.long, device=_META)
    counts = torch.empty((numel if return_counts else 0,), dtype=torch.long, device=_META)
    return out, inverse, counts


def eager_compile(notes: Notes) -> Callable[..., Any]:
    """``torch.compile`` that returns what it was given: the plan runs it eagerly."""

    def compile(model: Any = None, **options: Any) -> Any:
        notes.once(
            "compile",
            "torch.compile runs eagerly in a plan: a compiled graph's memory differs (fused "
            "kernels keep fewer intermediates)",
        )
        if model is None:
            return lambda fn: fn
        return model

    return compile
