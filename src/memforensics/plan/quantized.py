"""bitsandbytes' quantized parameters on the planned device.

A ``Params4bit`` (``load_in_4bit``, QLoRA) is quantized when it is first moved to a device
other than ``meta``: ``Params4bit.to`` packs two 4-bit values a byte and keeps their block
statistics (``quantize_4bit``). Hugging Face's loader makes each quantized weight by moving it
to the device its checkpoint tensor was loaded onto (``Params4bit(value, ...).to(value.device)``).
A stand-in's ``.device`` reads ``meta`` (docs/plan.md, "The stand-ins' device"), so without this
rule bitsandbytes takes the move for one to ``meta`` and keeps the full-precision weight: the
plan counts a model loaded in 4 bits at its 16- or 32-bit size. Here a stand-in (not the
script's own ``meta`` tensor) sent to ``meta`` and not yet quantized is quantized onto the
planned device, as the CUDA weight it stands for is; bitsandbytes' own operators (their
``meta`` kernels) give the packed weight and statistics their real shapes and dtypes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from memforensics.plan.patches import LibraryReplacement

MODULES = "bitsandbytes.nn.modules"
_CUDA = torch.device("cuda", 0)


def _to_meta(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``Tensor.to``'s arguments name the ``meta`` device."""
    device, _, _, _ = torch._C._nn._parse_to(*args, **kwargs)
    return device is not None and device.type == "meta"


def quantized_on_device(
    holds: Callable[[Any], bool], quantized: Callable[[Any], bool]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A quantized parameter class's ``to``: a stand-in not yet ``quantized`` sent to ``meta``
    (its own ``.device``) is quantized onto the planned device (the class's ``_quantize``), as
    the CUDA tensor it stands for is; every other move is bitsandbytes' own."""

    def stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
        def to(self: Any, *args: Any, **kwargs: Any) -> Any:
            if self.is_meta and not holds(self) and not quantized(self) and _to_meta(args, kwargs):
                return self._quantize(_CUDA)
            return original(self, *args, **kwargs)

        return to

    return stand_in


def _packed(param: Any) -> bool:
    return bool(getattr(param, "bnb_quantized", False))


def rows(holds: Callable[[Any], bool]) -> list[LibraryReplacement]:
    """bitsandbytes' 4-bit parameters moved to the planned device, where imported. (Its 8-bit
    ``Int8Params`` is not covered: the loader copies each weight to the host first and moves the
    copy to ``meta``, a move the plan cannot tell from one the script means.)"""
    why = "a stand-in's .device reads meta; bitsandbytes quantizes a weight moved to CUDA"
    return [
        LibraryReplacement(MODULES, "Params4bit.to", quantized_on_device(holds, _packed), why),
    ]
