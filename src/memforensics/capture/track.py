"""What the process knows about its own memory: the tensors of the models and optimizers it tracks.

``install(model=..., optimizer=...)`` and ``mf.track(...)`` hand capture the modules and
optimizers of a training run; ``mf.track(finder=...)`` hands it a callable that finds them when
a dump is written (``memforensics plan`` finds every module and optimizer alive then). Capture
keeps only weak references to them, so tracking never keeps a model alive, and reads them only
when a dump is written: at each window, OOM, near-OOM
and manual dump the sidecar's ``tensors`` lists every tracked tensor on the dumped device, one
entry per tensor:

``address``  the tensor's storage's address (what ``untyped_storage().data_ptr()`` returns,
             read as ``data_ptr()`` less the offset): the allocator block that holds it
``offset``   bytes from the storage's start to the tensor's first element
``bytes``    the tensor's own bytes (``numel() * itemsize``)
``kind``     ``parameter``, ``gradient``, ``optimizer_state`` or ``buffer``
``name``     the parameter's qualified name (``layers.0.weight``), its gradient's with ``.grad``,
             an optimizer state's with its key (``layers.0.weight.exp_avg``)

A tensor a module holds as a plain attribute (``self.cos = torch.zeros(..., device="cuda")``
in its ``__init__``, as rotary tables are often kept) is a ``buffer`` too: the module's state
in all but registration, never a parameter. It comes last, so a tensor the module also holds as
a parameter, buffer or optimizer state keeps that kind.

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

Finder = Callable[[], "tuple[list[Any], list[Any]]"]
"""Finds ``(modules, optimizers)`` alive now: called at each dump, its answer never kept."""

PARAMETER = "parameter"
GRADIENT = "gradient"
OPTIMIZER_STATE = "optimizer_state"
BUFFER = "buffer"
"""The kinds a sidecar's ``tensors`` entry carries: the words analysis uses for them."""

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
        self.finders: list[Finder] = []

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

    def find_with(self, finder: Finder) -> None:
        """Also walk what ``finder`` finds at each dump (once, however often it is given)."""
        if not callable(finder):
            raise ConfigError(
                f"memforensics: finder must be callable, got {type(finder).__name__}",
                field="finder",
            )
        if finder not in self.finders:
            self.finders.append(finder)

    @property
    def modules(self) -> list[Any]:
        """The tracked modules still alive."""
        return list(_alive(self._modules))

    @property
    def optimizers(self) -> list[Any]:
        """The tracked optimizers still alive."""
        return list(_alive(self._optimizers))

    def tensors(self, device_type: str | None) -> TrackedTensors | None:
        """Every tracked tensor on the device a dump is about, bounded; None when nothing
        tracked is alive. ``device_type``: ``"cpu"`` for CPU tensors, None for all, any other
        (``"cuda"``, ``"npu"``, ``"sim"``) for tensors on an accelerator: a process drives one
        kind, and the snapshot's addresses tell its devices apart."""
        modules, optimizers = self.modules, self.optimizers
        for finder in self.finders:
            found_modules, found_optimizers = finder()
            modules += _new(found_modules, modules)
            optimizers += _new(found_optimizers, optimizers)
        if not modules and not optimizers:
            return None
        return bounded(walk(modules, optimizers, device_type))


def _new(found: list[Any], known: list[Any]) -> list[Any]:
    """What of ``found`` is not in ``known`` already (by identity)."""
    seen = {id(item) for item in known}
    return [item for item in found if id(item) not in seen]


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
) -> list[dict[str, Any]]:
    """Entries for the modules' parameters, gradients and buffers, then the optimizers' state
    (and any parameter an optimizer holds that no tracked module has), then the tensors the
    modules hold as plain attributes (buffers), each tensor once."""
    walker = _Walker(device_type)
    names: dict[int, str] = {}
    for module in modules:
        for name, param in module.named_parameters():
            names.setdefault(id(param), name)
            walker.parameter(param, name)
        for name, buffer in module.named_buffers():
            walker.add(buffer, BUFFER, name)
    for number, optimizer in enumerate(optimizers):
        for group_index, group in enumerate(optimizer.param_groups):
            for index, param in enumerate(group.get("params", ())):
                name = names.get(id(param))
                if name is None:
                    name = names[id(param)] = f"optimizer{number}.group{group_index}.{index}"
                    walker.parameter(param, name)
                state = optimizer.state.get(param)
                if state:
                    for key, value in state.items():
                        walker.add(value, OPTIMIZER_STATE, f"{name}.{key}")
    for module in modules:
        for name, tensor in _attribute_tensors(module):
            walker.add(tensor, BUFFER, name)
    return walker.entries


def _attribute_tensors(module: Any) -> Iterator[tuple[str, Any]]:
    """The tensors ``module`` and its submodules hold as plain attributes (neither parameters
    nor registered buffers, which torch keeps apart from the instance's ``__dict__``), each
    with its qualified name."""
    named = getattr(module, "named_modules", None)
    if not callable(named):
        return
    tensors: dict[type, bool] = {}
    for prefix, sub in named():
        for attribute, value in getattr(sub, "__dict__", {}).items():
            kind = type(value)
            found = tensors.get(kind)
            if found is None:
                found = tensors[kind] = callable(getattr(kind, "data_ptr", None)) and callable(
                    getattr(kind, "storage_offset", None)
                )
            if found:
                yield (f"{prefix}.{attribute}" if prefix else attribute), value


class _Walker:
    """Turns tensors into entries: each tensor once, only those on the device asked for.

    Every read is one of torch's cheapest (``data_ptr()``, ``storage_offset()``, ``itemsize``,
    ``numel()``, ``get_device()``: about 0.1 µs each); the storage's address is the tensor's
    less its offset, as torch lays a strided tensor out, without building a storage object.
    """

    def __init__(self, device_type: str | None) -> None:
        self.entries: list[dict[str, Any]] = []
        self._seen: set[int] = set()
        self._cpu = device_type == "cpu"
        self._any = device_type is None
        self._local: dict[type, bool] = {}

    def parameter(self, param: Any, name: str) -> None:
        """A parameter, its gradient, and Megatron's ``main_grad`` (a view into its buffer)."""
        self.add(param, PARAMETER, name)
        self.add(getattr(param, "grad", None), GRADIENT, f"{name}.grad")
        main = getattr(param, "main_grad", None)
        if main is not None:
            self.add(main, GRADIENT, f"{name}.main_grad")

    def add(self, tensor: Any, kind: str, name: str) -> None:
        """An entry for ``tensor`` (its local shard for a DTensor); none for a non-tensor (an
        optimizer's scalar state), a tensor on another device, without memory, or seen before."""
        if tensor is None or id(tensor) in self._seen:
            return
        self._seen.add(id(tensor))
        local = self._local.get(type(tensor))
        if local is None:
            local = self._local[type(tensor)] = hasattr(type(tensor), "to_local")
        try:
            if local:  # a DTensor: the shard this rank holds
                tensor = tensor._local_tensor  # to_local() would record an autograd op
            if not self._any and (tensor.get_device() < 0) != self._cpu:
                return
            size = tensor.itemsize
            offset = tensor.storage_offset() * size
            address = tensor.data_ptr() - offset
            nbytes = tensor.numel() * size
        except Exception:  # noqa: BLE001 - not a tensor (a float, a meta tensor): nothing to record
            return
        if address <= 0 or not nbytes:
            return
        if len(name) > MAX_NAME:
            name = "…" + name[-(MAX_NAME - 1) :]
        self.entries.append(
            {"address": address, "offset": offset, "bytes": nbytes, "kind": kind, "name": name}
        )
