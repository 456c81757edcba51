"""What a stand-in cannot know: the values the script's own values do not decide. Where the
script reads them, the plan answers zeros (and the values it knows where the script made them:
:mod:`memforensics.plan.known`), takes a data-dependent shape at its upper bound, and says once
where it happened.

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
from memforensics.plan.known import Known

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


READ = (
    "values read from the device that the script's own values do not decide are zeros in a "
    "plan; a loop that ends on one (an end-of-sequence test, early stopping) runs to its own "
    "bound"
)
KNOWN = (
    "values read from the device are computed on the CPU where the script's own values decide "
    "them (shapes, ranges, fills; a random draw is drawn again within its bounds)"
)


class Reads:
    """What a stand-in answers when the script reads its values: the values the script's own
    decide (:class:`~memforensics.plan.known.Known`), else zeros; each said once, with where."""

    def __init__(self, notes: Notes, known: Known | None = None) -> None:
        self.notes = notes
        self.known = known if known is not None else Known()

    def values(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor``'s values on the CPU, known or zeros (a zero-stride view: no memory)."""
        found = self.known.value(tensor)
        if found is not None:
            self.notes.once("known", KNOWN)
            return found
        self.notes.once("read", READ)
        return _zeros_like(tensor)

    def item(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        """``.item()`` of a stand-in."""
        return self.values(tensor).item()

    def tolist(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        """``.tolist()`` of a stand-in."""
        return self.values(tensor).tolist()

    def to_host(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        """``.cpu()``/``.numpy()``-bound copies of a stand-in: allocated on the CPU as the real
        copy would be."""
        return self.values(tensor).clone(memory_format=torch.contiguous_format)

    def text(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> str:
        """How a stand-in prints: its values, on the CUDA device the script put it on."""
        shown = repr(self.values(tensor))
        return shown[:-1] + ", device='cuda:0')" if shown.endswith(")") else shown

    def formatted(self, tensor: torch.Tensor, spec: str) -> str:
        """``f"{t:.3f}"``: a scalar formatted, else the printed values."""
        if tensor.dim() == 0:
            return format(self.item(tensor), spec)
        return self.text(tensor)

    def to_numpy(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        """``.numpy()`` of a stand-in."""
        return self.to_host(tensor).numpy()

    def scalar(self, tensor: torch.Tensor) -> Any:
        """A scalar read below Python (``bool(t)``, ``int(t)``, a data-dependent branch)."""
        return self.values(tensor).item()


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
