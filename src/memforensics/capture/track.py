"""What the process knows about its own memory: the tensors of the models and optimizers it tracks.

``install(model=..., optimizer=...)`` and ``mf.track(...)`` hand capture the modules and
optimizers of a training run. Capture keeps only weak references to them, so tracking never
keeps a model alive, and reads them only when a dump is written: at each window, OOM, near-OOM
and manual dump the sidecar's ``tensors`` lists every tracked tensor on the dumped device, one
entry per tensor:

``address``  the tensor's storage's address (``untyped_storage().data_ptr()``): the allocator
             block that holds it
``offset``   bytes from the storage's start to the tensor's first element
``bytes``    the tensor's own bytes (``numel() * element_size()``)
``kind``     ``parameter``, ``gradient``, ``optimizer_state`` or ``buffer``
``name``     the parameter's qualified name (``layers.0.weight``), its gradient's with ``.grad``,
             an optimizer state's with its key (``layers.0.weight.exp_avg``)

One entry per tensor, not per storage, so a flat buffer (Megatron's contiguous buffers, FSDP1's
flat parameter with ``use_orig_params``) keeps the name of every tensor in it. A DTensor (FSDP2)
is recorded by its local shard (``_local_tensor``), the memory this rank holds. Megatron's
``main_grad`` is recorded as a gradient beside ``.grad``.

The walk is plain attribute reads and method calls on the objects the user passed: capture
never imports torch, the walk never synchronizes the device nor allocates on it, and it costs
O(number of tensors), paid only when a dump is written (docs/performance.md has the figure).
At most :data:`MAX_TENSORS` entries are written, the largest tensors first past that bound; the
count left out is ``tensors_dropped``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from memforensics._errors import ConfigError

PARAMETER = "parameter"
GRADIENT = "gradient"
OPTIMIZER_STATE = "optimizer_state"
BUFFER = "buffer"
TENSOR_KINDS = (PARAMETER, GRADIENT, OPTIMIZER_STATE, BUFFER)
"""The kinds a sidecar's ``tensors`` entry may carry: the words analysis uses for them."""

MAX_TENSORS = 10_000
"""Entries one sidecar holds at most: under 3 MiB of JSON with names at their longest, within
the 4 MiB readers accept. Past it the smallest tensors are left out and counted."""

MAX_NAME = 120
"""Characters of a name kept; a longer one keeps its end (the part that tells tensors apart)."""


@dataclass(frozen=True, slots=True)
class TrackedTensors:
    """The sidecar's ``tensors`` (entries, at most :data:`MAX_TENSORS`) and ``tensors_dropped``."""

    entries: list[dict[str, Any]]
    dropped: int = 0


def _is_module(value: object) -> bool:
    return callable(getattr(value, "named_parameters", None)) and callable(
        getattr(value, "named_buffers", None)
    )


def _inner_optimizer(value: object) -> object | None:
    """``value`` when it is an optimizer (``param_groups`` and ``state``), or the optimizer a
    framework wraps in it (Lightning's, accelerate's: ``.optimizer``); None otherwise."""
    for candidate in (value, getattr(value, "optimizer", None)):
        if candidate is None:
            continue
        groups = getattr(candidate, "param_groups", None)
        state = getattr(candidate, "state", None)
        if isinstance(groups, list) and hasattr(state, "get"):
            return candidate
    return None


def _flatten(value: object, accept: Callable[[object], object | None], what: str) -> list[object]:
    """``value`` as a list of what ``accept`` takes: one object, or any iterable of them (nested
    iterables too); ConfigError on anything else, so a wrong argument fails at the call."""
    if value is None:
        return []
    found = accept(value)
    if found is not None:
        return [found]
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ConfigError(
            f"memforensics: {what} must be {_WHAT[what]}, or an iterable of them; "
            f"got {type(value).__name__}",
            field=what,
        )
    out: list[object] = []
    for item in value:
        out.extend(_flatten(item, accept, what))
    return out


_WHAT = {
    "model": "a module (named_parameters and named_buffers, as torch.nn.Module has)",
    "optimizer": "an optimizer (param_groups and state, as torch.optim.Optimizer has)",
}


class Tracker:
    """The modules and optimizers a process told capture about, held by weak reference.

    ``add`` validates at once (a bad argument is a config error, raised where it was passed);
    ``tensors`` walks them at dump time and never raises past its caller's guard.
    """

    def __init__(self) -> None:
        self._modules: list[weakref.ref[Any]] = []
        self._optimizers: list[weakref.ref[Any]] = []

    def add(self, model: object = None, optimizer: object = None) -> None:
        """Track ``model`` (modules) and ``optimizer`` (optimizers): one each, or iterables of
        them; already tracked ones are kept once. Raises ConfigError on anything else."""
        modules = _flatten(model, lambda m: m if _is_module(m) else None, "model")
        optimizers = _flatten(optimizer, _inner_optimizer, "optimizer")
        for found, refs in ((modules, self._modules), (optimizers, self._optimizers)):
            alive = {id(o) for o in _alive(refs)}
            for item in found:
                if id(item) not in alive:
                    try:
                        refs.append(weakref.ref(item))
                    except TypeError:
                        raise ConfigError(
                            f"memforensics: cannot track a {type(item).__name__}: it takes no "
                            "weak reference, and tracking must never keep a model alive",
                            field="model" if refs is self._modules else "optimizer",
                        ) from None
                    alive.add(id(item))

    @property
    def modules(self) -> list[Any]:
        """The tracked modules still alive."""
        return list(_alive(self._modules))

    @property
    def optimizers(self) -> list[Any]:
        """The tracked optimizers still alive."""
        return list(_alive(self._optimizers))

    def tensors(self, device_type: str | None) -> TrackedTensors | None:
        """Every tracked tensor on devices of ``device_type`` (``"cuda"``, ``"npu"``, ``"sim"``;
        None: all), bounded; None when nothing tracked is alive."""
        modules, optimizers = self.modules, self.optimizers
        if not modules and not optimizers:
            return None
        entries = list(walk(modules, optimizers, device_type))
        return bounded(entries)


def _alive(refs: list[weakref.ref[Any]]) -> Iterator[Any]:
    dead = False
    for ref in refs:
        target = ref()
        if target is None:
            dead = True
        else:
            yield target
    if dead:
        refs[:] = [ref for ref in refs if ref() is not None]


def bounded(entries: list[dict[str, Any]], limit: int = MAX_TENSORS) -> TrackedTensors:
    """``entries`` cut to ``limit``: the largest tensors kept, in their walk order."""
    if len(entries) <= limit:
        return TrackedTensors(entries)
    order = sorted(range(len(entries)), key=lambda i: -entries[i]["bytes"])[:limit]
    return TrackedTensors([entries[i] for i in sorted(order)], len(entries) - limit)


def walk(
    modules: list[Any], optimizers: list[Any], device_type: str | None
) -> Iterator[dict[str, Any]]:
    """Entries for the modules' parameters, gradients and buffers, then the optimizers' state
    (and any parameter an optimizer holds that no tracked module has), each tensor once."""
    seen: set[int] = set()
    names: dict[int, str] = {}
    for module in modules:
        for name, param in module.named_parameters():
            names.setdefault(id(param), name)
            yield from _parameter(param, name, device_type, seen)
        for name, buffer in module.named_buffers():
            yield from _entry(buffer, BUFFER, name, device_type, seen)
    for number, optimizer in enumerate(optimizers):
        for group_index, group in enumerate(optimizer.param_groups):
            for index, param in enumerate(group.get("params", ())):
                name = names.get(id(param))
                if name is None:
                    name = f"optimizer{number}.group{group_index}.{index}"
                    names[id(param)] = name
                    yield from _parameter(param, name, device_type, seen)
                state = optimizer.state.get(param)
                if not state:
                    continue
                for key, value in state.items():
                    yield from _entry(value, OPTIMIZER_STATE, f"{name}.{key}", device_type, seen)


def _parameter(
    param: Any, name: str, device_type: str | None, seen: set[int]
) -> Iterator[dict[str, Any]]:
    yield from _entry(param, PARAMETER, name, device_type, seen)
    yield from _entry(getattr(param, "grad", None), GRADIENT, f"{name}.grad", device_type, seen)
    main = getattr(param, "main_grad", None)  # Megatron's gradient, a view into its grad buffer
    if main is not None:
        yield from _entry(main, GRADIENT, f"{name}.main_grad", device_type, seen)


def _entry(
    tensor: Any, kind: str, name: str, device_type: str | None, seen: set[int]
) -> Iterator[dict[str, Any]]:
    """One entry for ``tensor`` (its local shard for a DTensor); nothing for a non-tensor (an
    optimizer's scalar state), a tensor on another device, without storage, or seen before."""
    if tensor is None or id(tensor) in seen:
        return
    seen.add(id(tensor))
    local = getattr(tensor, "_local_tensor", None)  # DTensor: the shard this rank holds
    if local is not None:
        tensor = local
    try:
        if device_type is not None and tensor.device.type != device_type:
            return
        address = tensor.untyped_storage().data_ptr()
        size = tensor.element_size()
        offset = tensor.storage_offset() * size
        nbytes = tensor.numel() * size
    except Exception:  # noqa: BLE001 - not a tensor (a float, a meta tensor): nothing to record
        return
    if not address or not nbytes:
        return
    if len(name) > MAX_NAME:
        name = "…" + name[-(MAX_NAME - 1) :]
    yield {"address": address, "offset": offset, "bytes": nbytes, "kind": kind, "name": name}
