"""TorchScript under the plan: a scripted module moved to the device.

A scripted module's parameters are held by its C++ module as well as by Python, so
``torch.utils.swap_tensors`` (which the plan turns on for every ``Module._apply``, so that an
optimizer built before ``.cuda()`` keeps its parameters) refuses them. On a CUDA build a CPU
parameter moved to CUDA is rebound in place (``param.data = ...``); a ``meta`` one cannot be
(the types differ), so a scripted module's parameters are replaced through its parameter dict,
as ``Module._apply`` does for types that differ, and the C++ module holds the stand-ins.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from memforensics.plan import rebound

_INSIDE = threading.local()
"""Whether this thread is inside a module's ``_apply`` (``moving``), and inside a scripted
module's (``scripted``)."""


def swaps(original: Callable[[], bool]) -> Callable[[], bool]:
    """``torch.__future__.get_swap_module_params_on_conversion``: on while a module applies a
    function to its tensors (``.cuda()``, ``.to()``), except a scripted module's and a module
    whose parameters are stand-ins already, one of a class torch cannot swap
    (:func:`_unswappable`); elsewhere (``load_state_dict`` reads it too, and swapping there
    would drop each parameter's gradient) the script's own setting. Such a module rebinds its
    parameters (``param.data = ...``) as on a CUDA build, where the moved tensors' types are
    compatible, as two stand-ins' are: bitsandbytes' ``Params4bit`` so moves when ``Trainer``
    puts a model loaded in 4 bits on the device. A plain function, as torch's own
    replacement of it for ``torch.compile`` requires of what it replaces."""

    def get_swap_module_params_on_conversion() -> bool:
        moving = getattr(_INSIDE, "moving", False) and not getattr(_INSIDE, "scripted", False)
        if moving and not _unswappable(getattr(_INSIDE, "module", None)):
            return True
        return original()

    return get_swap_module_params_on_conversion


def kept_objects(
    original: Callable[[torch.Tensor, torch.Tensor], None], script_swaps: Callable[[], bool]
) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """``torch.utils.swap_tensors``: inside a module's move that the plan turned to swapping
    (:func:`swaps`), ``t1`` takes ``t2``'s tensor and keeps its own Python object, as a CUDA
    build's ``param.data = moved`` keeps it (:func:`~memforensics.plan.rebound.take_content`).
    torch's swap moves the parameter's attributes to the temporary (a tag a library sets on a
    parameter before ``.cuda()`` would be gone) and refuses a parameter with weak references
    (DeepSpeed keeps a ``weakref.finalize`` on each, then its engine moves the model). Where the
    script turned swapping on itself (``script_swaps``), or a tensor is a subclass that wraps
    others (which torch swaps on a GPU too), and outside a move: torch's own."""

    def swap_tensors(t1: torch.Tensor, t2: torch.Tensor) -> None:
        moving = getattr(_INSIDE, "moving", False) and not getattr(_INSIDE, "scripted", False)
        wrapped = is_traceable_wrapper_subclass(t1) or is_traceable_wrapper_subclass(t2)
        if not moving or script_swaps() or wrapped:
            original(t1, t2)
            return
        rebound.take_content(t1, t2)

    return swap_tensors


def _unswappable(module: Any) -> bool:
    """Whether one at least of ``module``'s own parameters is of a ``Parameter`` subclass
    whose ``detach()`` leaves the class, which ``Module._apply``'s swap refuses (it makes a
    ``Parameter`` of the moved tensor, and torch requires that of a subclass), wherever it
    lies: a stand-in already, or on the host, where a CUDA build rebinds it as it moves
    (bitsandbytes' ``Linear4bit(...).cuda()``, whose ``Params4bit`` quantizes itself)."""
    held = getattr(module, "_parameters", None)
    if not isinstance(held, dict):
        return False
    params = [p for p in held.values() if p is not None]
    for param in params:
        kind = type(param)
        if kind is not torch.nn.Parameter and issubclass(kind, torch.nn.Parameter):
            with torch.no_grad():
                if type(param.detach()) is not kind:
                    return True
    return False


def _inside(flag: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (a module's ``_apply``) with ``flag`` set on this thread while it runs,
    and the module kept as the one applying (its children's ``_apply`` run first and give it
    back)."""

    def _apply(module: Any, fn: Callable[..., Any], recurse: bool = True) -> Any:
        before = getattr(_INSIDE, flag, False)
        applying = getattr(_INSIDE, "module", None)
        setattr(_INSIDE, flag, True)
        _INSIDE.module = module
        try:
            return original(module, fn, recurse)
        finally:
            setattr(_INSIDE, flag, before)
            _INSIDE.module = applying

    return _apply


def moving_apply(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Module._apply``: ``original``, its tensors swapped rather than rebound."""
    return _inside("moving", original)


def scripted_apply(original: Callable[..., Any]) -> Callable[..., Any]:
    """``ScriptModule._apply`` (scripted and traced modules): ``original``
    (``Module._apply``) without swapping."""
    return _inside("scripted", original)


SAVE = (
    "torch.jit.save of a module holding tensors on the planned device is not modelled: "
    "TorchScript's writer reads each storage's bytes, which a planned tensor does not have "
    "(save it with torch.save, or script the module on the CPU)"
)


def refused_save(
    original: Callable[..., Any], held: Callable[[Any], bool], why: Callable[[str], Exception]
) -> Callable[..., Any]:
    """``torch.jit.save`` and ``ScriptModule.save``: ``original``, except for a module holding a
    stand-in, which TorchScript's writer would read past its missing data (the process dies
    with no message); the plan stops there with one line instead."""

    def save(module: Any, *args: Any, **kwargs: Any) -> Any:
        tensors = [*module.parameters(), *module.buffers()]
        if any(held(tensor) for tensor in tensors):
            raise why(SAVE)
        return original(module, *args, **kwargs)

    return save


def _onto_cuda(location: Any) -> bool:
    """Whether ``map_location`` names a CUDA device (``"cuda"``, ``"cuda:0"``, a device)."""
    if isinstance(location, (str, torch.device)):
        return bool(torch.device(location).type == "cuda")
    return False


def loaded_onto_cuda(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.jit.load``: onto CUDA, the module is loaded onto the CPU and moved with
    ``.cuda()``, which holds the same tensors on the device that CUDA's loader puts there (the
    CPU build's loader refuses a CUDA location); any other location as torch loads it."""

    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        if not _onto_cuda(map_location):
            return original(f, map_location, *args, **kwargs)
        module = original(f, "cpu", *args, **kwargs)
        for part in module.modules():
            for name, tensor in list(part._parameters.items()):
                if not isinstance(tensor, torch.nn.Parameter):
                    # a loaded module's parameters come back as plain tensors, which
                    # ``Module._apply`` cannot replace across devices
                    part._parameters[name] = torch.nn.Parameter(tensor, tensor.requires_grad)
        return module.cuda()

    return load
