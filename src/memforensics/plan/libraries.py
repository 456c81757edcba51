"""Libraries a script may import whose Python a planned run cannot take as it is: it asks
whether a tensor is on ``meta`` (answered for a stand-in as for the CUDA tensor it stands for),
or it fetches compiled CUDA code from the Hub.

A stand-in's ``.device`` reads ``meta`` (docs/plan.md, "The stand-ins' device"), and
Accelerate takes a ``meta`` weight for one not loaded yet: its ``set_module_tensor_to_device``
refuses to put one on a device without a value, and keeps one sent to ``meta`` where it is
(its device check sees ``meta`` already). That function is the one place its hooks move
weights through: placing the modules of a ``device_map`` on the device, and, where modules are
offloaded to the CPU or disk, bringing their weights on before each forward and sending them
back to ``meta`` after. Lightning's Fabric takes a model whose parameters are on ``meta`` for
one to materialise (``to_empty`` and ``reset_parameters`` again in ``setup``) and refuses an
optimizer over such parameters (``setup_optimizers``): only the script's own ``meta`` tensors
are on ``meta`` to it.

Hugging Face's ``kernels`` library (which transformers 5.25 calls from every
``from_pretrained`` onto a GPU) swaps layers' forwards for kernels it downloads from the Hub,
built for CUDA; the plan runs on the CPU, so those layers keep their PyTorch forward, said once.
safetensors' ``save_file`` writes the zeros a stand-in's host copy reads: a checkpoint of a
model with no weights, put back when the run ends (:mod:`~memforensics.plan.saved_files`).

Each library is imported only where the script imports it
(:func:`~memforensics.plan.patches.replaced_where_imported`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from memforensics.plan import (
    attention,
    distributed,
    distributed_checkpoint,
    early_stopping,
    flex,
    fused_optimizers,
    paged,
)
from memforensics.plan.emulate import is_cuda_device
from memforensics.plan.patches import LibraryReplacement
from memforensics.plan.saved_files import SavedFiles, path_of
from memforensics.plan.values import Notes

ACCELERATE = "accelerate.utils.modeling"
FABRIC_INIT = ("lightning.fabric.utilities.init", "lightning_fabric.utilities.init")
"""Lightning Fabric's initialisation helpers, in the ``lightning`` package and the standalone
``lightning_fabric`` one."""
SAFETENSORS = "safetensors.torch"
HUB_KERNELS = "kernels"

NOT_KERNELIZED = (
    "Hub kernels (the kernels library, which transformers applies on a GPU) are compiled CUDA "
    "code the plan cannot run: {layers} keep their PyTorch forward, whose temporaries a fused "
    "kernel may not make"
)


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


def meta_held_by_script(
    holds: Callable[[Any], bool],
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Fabric's ``_has_meta_device_parameters_or_buffers(obj, recurse=True)``: whether a module's
    parameters or buffers, or an optimizer's parameters, include one of the script's own ``meta``
    tensors (a model built under ``fabric.init_module(empty_init=True)`` on several devices);
    a stand-in is the CUDA tensor it stands for, not one."""

    def stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
        def has_meta(obj: Any, recurse: bool = True) -> bool:
            if isinstance(obj, torch.optim.Optimizer):
                found = [t for group in obj.param_groups for t in group["params"]]
                tensors: list[torch.Tensor] = [
                    t for t in found if isinstance(t, torch.nn.Parameter)
                ]
            elif isinstance(obj, torch.nn.Module):
                tensors = [*obj.parameters(recurse=recurse), *obj.buffers(recurse=recurse)]
            else:
                return bool(original(obj, recurse))  # Fabric's own TypeError
            return any(t.is_meta and holds(t) for t in tensors)

        return has_meta

    return stand_in


def _on_planned_device(model: Any, device: Any, holds: Callable[[Any], bool]) -> bool:
    """Whether ``kernelize`` would load kernels for the planned device: ``device`` names CUDA,
    or it names none or ``meta`` (a stand-in's ``.device``, which is where transformers reads
    it) and the model's first parameter is a stand-in, not the script's own ``meta`` tensor."""
    if device is not None and str(device) != "meta":
        return is_cuda_device(device)
    first = next(iter(model.parameters()), None)
    return first is not None and first.is_meta and not holds(first)


def _extensible(model: Any) -> list[str]:
    """The kinds of ``model``'s layers ``kernelize`` may give a Hub kernel, as the library
    finds them: a module whose class names a kernel layer, or one with kernel functions."""
    kinds: dict[str, None] = {}
    for module in model.modules():
        if hasattr(type(module), "kernel_layer_name") or getattr(module, "_kernel_funcs", None):
            kinds[type(module).__name__] = None
    return list(kinds)


def kept_forward(
    holds: Callable[[Any], bool], notes: Notes
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``kernels.kernelize`` for the planned device: the model returned with its own forwards
    (what ``kernelize`` does where no kernel exists for a device), said once where it has
    layers a kernel could replace; any other device's call is the library's."""

    def stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)

        def kernelize(*args: Any, **kwargs: Any) -> Any:
            named = signature.bind(*args, **kwargs).arguments
            model = named["model"]
            if not _on_planned_device(model, named.get("device"), holds):
                return original(*args, **kwargs)
            kinds = _extensible(model)
            if kinds:
                shown = ", ".join(kinds[:3]) + (", …" if len(kinds) > 3 else "")
                notes.once("kernels", NOT_KERNELIZED.format(layers=f"the model's {shown} layers"))
            return model

        return kernelize

    return stand_in


def saved_tensors(
    holds: Callable[[Any], bool], made_up: Callable[[Any], bool], files: SavedFiles
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """safetensors' ``save_file`` (and ``save_model``, which calls it) to a path, given a
    stand-in or a host copy of one (``made_up``) among its tensors: the file written as
    safetensors writes it, the values a plan reads, and put back when the run ends
    (:mod:`~memforensics.plan.saved_files`). A save of the script's own values, or into bytes,
    is safetensors' alone."""

    def stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)

        def save_file(*args: Any, **kwargs: Any) -> Any:
            named = signature.bind(*args, **kwargs).arguments
            path = path_of(named.get("filename"))
            tensors = named.get("tensors")
            values = tensors.values() if isinstance(tensors, dict) else ()
            planned = any(
                isinstance(tensor, torch.Tensor)
                and ((tensor.is_meta and not holds(tensor)) or made_up(tensor))
                for tensor in values
            )
            if path is None or not planned:
                return original(*args, **kwargs)
            return files.saving(path, lambda: original(*args, **kwargs), lambda: True)

        return save_file

    return stand_in


def rows(
    holds: Callable[[Any], bool], made_up: Callable[[Any], bool], notes: Notes, files: SavedFiles
) -> list[LibraryReplacement]:
    """The libraries' functions a planned run replaces where the script imports them."""
    return [
        LibraryReplacement(
            SAFETENSORS,
            "save_file",
            saved_tensors(holds, made_up, files),
            "a checkpoint holding a stand-in's zeros is put back when the run ends",
        ),
        LibraryReplacement(
            ACCELERATE,
            "set_module_tensor_to_device",
            set_on_device(holds),
            "a stand-in is on the planned device, its .device reading meta: placed there it "
            "stays, offloaded it moves off and frees its block, as a CUDA weight does",
        ),
        LibraryReplacement(
            HUB_KERNELS,
            "kernelize",
            kept_forward(holds, notes),
            "the kernels it would put in a layer's forward are CUDA binaries from the Hub, "
            "which neither load nor run on the CPU the plan runs on",
        ),
        LibraryReplacement(
            attention.NESTED_SDPA,
            "_is_computing_meta_flops",
            attention.no_meta_flops(holds),
            "a stand-in's attention is not counted on meta, as a CUDA tensor's is not",
        ),
        *(
            LibraryReplacement(
                module,
                "_has_meta_device_parameters_or_buffers",
                meta_held_by_script(holds),
                "a stand-in's .device reads meta, but it is the CUDA tensor Fabric set up, not "
                "one to materialise",
            )
            for module in FABRIC_INIT
        ),
        *distributed.rows(holds),
        *distributed_checkpoint.rows(files, holds),
        *early_stopping.rows(notes),
        *fused_optimizers.rows(notes),
        *flex.rows(holds),
        *paged.rows(notes),
    ]
