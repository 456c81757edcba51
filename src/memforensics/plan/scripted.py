"""TorchScript under the plan: a scripted module moved to the device.

A scripted module's parameters are held by its C++ module as well as by Python, so
``torch.utils.swap_tensors`` (which the plan turns on for every ``Module._apply``, so that an
optimizer built before ``.cuda()`` keeps its parameters) refuses them. On a CUDA build a CPU
parameter moved to CUDA is rebound in place (``param.data = ...``); a ``meta`` one cannot be
(the types differ), so a scripted module's parameters are replaced through its parameter dict,
as ``Module._apply`` does for types that differ, and the C++ module holds the stand-ins.

Saved (``torch.jit.save``), such a module is written as CUDA writes it, and loaded back with no
``map_location`` its tensors are on the device again, where CUDA's loader restores them: e3nn's
modules copy and pickle themselves through exactly that round trip (``copy.deepcopy`` of a MACE
model), which on a GPU holds a second copy of their tensors on the device.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from memforensics.plan import rebound
from memforensics.plan.saved_files import SavedFiles, path_of

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


STAND_INS = "memforensics-plan-stand-ins.json"
"""The extra file a planned ``torch.jit.save`` adds to a module's archive: the stand-ins it wrote,
each as its module's path, ``parameter`` or ``buffer``, and its name."""


def _slots(part: Any, kind: str) -> Any:
    """A module's parameters (``kind`` ``parameter``) or buffers, as a dict its tensors can be
    replaced through (a scripted module's C++ module holds them too)."""
    return part._parameters if kind == "parameter" else part._buffers


def _stand_ins(
    module: Any, held: Callable[[torch.Tensor], bool]
) -> list[tuple[str, Any, str, str, torch.Tensor]]:
    """Each parameter and buffer of ``module`` and of its submodules that is a stand-in: its
    module's path, the module, ``parameter`` or ``buffer``, its name and the tensor."""
    found = []
    for path, part in module.named_modules():
        for kind in ("parameter", "buffer"):
            for name, tensor in _slots(part, kind).items():
                if isinstance(tensor, torch.Tensor) and held(tensor):
                    found.append((path, part, kind, name, tensor))
    return found


def _view_key(tensor: torch.Tensor) -> tuple[Any, ...]:
    """What makes two tensors the same view of the same storage."""
    return (
        tensor.untyped_storage()._cdata,
        tensor.storage_offset(),
        tuple(tensor.size()),
        tuple(tensor.stride()),
        tensor.dtype,
    )


def written(
    original: Callable[..., Any],
    held: Callable[[torch.Tensor], bool],
    files: SavedFiles,
) -> Callable[..., Any]:
    """``torch.jit.save`` and ``ScriptModule.save``: a module holding stand-ins is written as
    CUDA writes it, each stand-in's bytes zeros (the values a plan reads for unknown data), and
    the archive names them (:data:`STAND_INS`), so that ``torch.jit.load`` puts them back on
    the planned device as CUDA's loader does (:func:`loaded_onto_cuda`). TorchScript's writer
    reads each storage's bytes, which a stand-in does not have, so host zeros of its shape stand
    in the module while it writes, and the stand-ins are put back after. A file at a path is
    put back when the run ends (:mod:`~memforensics.plan.saved_files`); a module holding none
    is torch's own."""

    def save(module: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        found = _stand_ins(module, held)
        if not found:
            return original(module, f, *args, **kwargs)
        extra = kwargs.pop("_extra_files", args[0] if args else None)
        named = [[path, kind, name] for path, _, kind, name, _ in found]
        marked = {**(extra or {}), STAND_INS: json.dumps(named)}
        zeros: dict[tuple[Any, ...], torch.Tensor] = {}
        for _, part, kind, name, tensor in found:
            key = _view_key(tensor)
            if key not in zeros:
                host = torch.empty_strided(tensor.size(), tensor.stride(), dtype=tensor.dtype)
                zeros[key] = host.zero_().requires_grad_(tensor.requires_grad)
            _slots(part, kind)[name] = zeros[key]
        try:
            target = path_of(f)
            if target is None:
                return original(module, f, _extra_files=marked)
            return files.saving(
                target, lambda: original(module, f, _extra_files=marked), lambda: True
            )
        finally:
            for _, part, kind, name, tensor in found:
                _slots(part, kind)[name] = tensor

    return save


def _back_on_device(module: Any, named: str) -> None:
    """The stand-ins a planned save named (:data:`STAND_INS`) made again on the planned device,
    values unknown as a stand-in's are; views that shared a storage share one again."""
    made: dict[tuple[Any, ...], torch.Tensor] = {}
    for path, kind, name in json.loads(named):
        part = module.get_submodule(path) if path else module
        slots = _slots(part, kind)
        host = slots[name]
        key = _view_key(host)
        if key not in made:
            device = torch.empty_strided(
                host.size(), host.stride(), dtype=host.dtype, device="cuda"
            )
            made[key] = device.requires_grad_(host.requires_grad)
        slots[name] = made[key]


def _onto_cuda(location: Any) -> bool:
    """Whether ``map_location`` names a CUDA device (``"cuda"``, ``"cuda:0"``, a device)."""
    if isinstance(location, (str, torch.device)):
        return bool(torch.device(location).type == "cuda")
    return False


def loaded_onto_cuda(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.jit.load``: onto CUDA, the module is loaded onto the CPU and moved with
    ``.cuda()``, which holds the same tensors on the device that CUDA's loader puts there (the
    CPU build's loader refuses a CUDA location). With no location, the tensors a planned save
    wrote for stand-ins (:func:`written`) are stand-ins again, where CUDA's loader puts each
    tensor back on the device it was saved from (e3nn's modules copy and pickle themselves so).
    Any other location as torch loads it."""

    def load(
        f: Any, map_location: Any = None, _extra_files: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        asked = {} if _extra_files is None else _extra_files
        extra = {**asked, STAND_INS: ""}
        onto_cuda = _onto_cuda(map_location)
        module = original(f, "cpu" if onto_cuda else map_location, extra, *args, **kwargs)
        for key in asked:
            asked[key] = extra[key]
        if onto_cuda:
            for part in module.modules():
                for name, tensor in list(part._parameters.items()):
                    if not isinstance(tensor, torch.nn.Parameter):
                        # a loaded module's parameters come back as plain tensors, which
                        # ``Module._apply`` cannot replace across devices
                        part._parameters[name] = torch.nn.Parameter(tensor, tensor.requires_grad)
            return module.cuda()
        if map_location is None and extra[STAND_INS]:
            _back_on_device(module, extra[STAND_INS])
        return module

    return load
