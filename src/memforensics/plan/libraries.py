"""Libraries a script may import whose Python asks whether a tensor is on ``meta``, answered
for a stand-in as for the CUDA tensor it stands for.

A stand-in's ``.device`` reads ``meta`` (docs/plan.md, "The stand-ins' device"), and
Accelerate takes a ``meta`` weight for one not loaded yet: its ``set_module_tensor_to_device``
refuses to put one on a device without a value, and keeps one sent to ``meta`` where it is
(its device check sees ``meta`` already). That function is the one place its hooks move
weights through: placing the modules of a ``device_map`` on the device, and, where modules are
offloaded to the CPU or disk, bringing their weights on before each forward and sending them
back to ``meta`` after. The library is imported only where the script imports it
(:func:`~memforensics.plan.patches.replaced_where_imported`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from memforensics.plan.emulate import is_cuda_device
from memforensics.plan.patches import LibraryReplacement

ACCELERATE = "accelerate.utils.modeling"


def _held(module: Any, tensor_name: str) -> Any:
    """The parameter or buffer ``tensor_name`` (dotted, as Accelerate names it) of ``module``;
    None where there is none (Accelerate then says so itself)."""
    *path, name = tensor_name.split(".")
    for part in path:
        module = getattr(module, part, None)
        if module is None:
            return None
    tensors = {**getattr(module, "_buffers", {}), **getattr(module, "_parameters", {})}
    return tensors.get(name)


def set_on_device(
    holds: Callable[[Any], bool],
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Accelerate's ``set_module_tensor_to_device`` for a stand-in moved without a value, as
    for a CUDA tensor: sent to the planned device it stays (the device's cache emptied, as
    Accelerate empties it after a move there); sent anywhere else it moves with its value, the
    tensor ``.to()`` makes there (a ghost on ``meta``, freeing its block once nothing else holds
    it). The script's own ``meta`` tensors (``holds``) and moves with a value are Accelerate's."""

    def stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)

        def set_module_tensor_to_device(*args: Any, **kwargs: Any) -> Any:
            call = signature.bind(*args, **kwargs)
            call.apply_defaults()
            named = call.arguments
            tensor = _held(named["module"], named["tensor_name"])
            device = named["device"]
            if named["value"] is not None or tensor is None or not tensor.is_meta or holds(tensor):
                return original(*args, **kwargs)
            if is_cuda_device(device):
                if named.get("clear_cache", True):
                    torch.cuda.empty_cache()
                return None
            named["value"] = tensor.to(device)
            return original(*call.args, **call.kwargs)

        return set_module_tensor_to_device

    return stand_in


def rows(holds: Callable[[Any], bool]) -> list[LibraryReplacement]:
    """The libraries' functions a planned run replaces where the script imports them."""
    return [
        LibraryReplacement(
            ACCELERATE,
            "set_module_tensor_to_device",
            set_on_device(holds),
            "a stand-in is on the planned device, its .device reading meta: placed there it "
            "stays, offloaded it moves off and frees its block, as a CUDA weight does",
        ),
    ]
