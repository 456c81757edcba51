"""CPU tensors made for the device, deferred: host memory and time independent of the model.

Scripts build their model on the CPU and move it (``model.to("cuda")``). Under a plan the move
makes stand-ins that hold no values, so the CPU weights the script builds first are thrown
away; initialising them costs the time and host memory of the whole model for nothing.

A large CPU tensor a factory makes while an ``nn.Module`` is being constructed (its
``__init__`` on the stack) is therefore *deferred*: a real CPU tensor of the right shape, dtype
and device, whose storage is fresh memory from the operating system that nobody has written
(pages untouched are not resident), and whose initialisers are recorded instead of run: the
factory's own fill (``zeros``, ``ones``, ``full``, ``rand``, ``randn``), every ``nn.init``
function, and any operator that writes only into it (``normal_``, ``uniform_``, ``fill_``,
``zero_``, ``mul_``, ``copy_`` from another deferred tensor or a small one). Views share the
record, since it belongs to the storage. Moving the tensor to the device reads nothing (a
stand-in has no values), so the record dies with the CPU storage at the move.

Anything else that reads the tensor's values on the CPU (an operator, ``tolist``, ``numpy``,
``torch.save``) *materialises* it first: the record replayed in place. Random initialisers
replay from a seed drawn, at the time of the call, from the generator they would have used, so
the values are deterministic and follow the same distribution, but are not the numbers an
unplanned run draws (and later draws from that generator differ from an unplanned run's): the
first such read is said once, naming the script's line. A record without random steps (a
causal mask's ``torch.ones``, a buffer of zeros) replays to python's own values, silently.
"""

from __future__ import annotations

import functools
import gc
import inspect
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch

from memforensics.plan.values import Notes

THRESHOLD_BYTES = 1 << 20
"""Smaller tensors are made as usual: what they hold does not grow with the model's width."""

MATERIALISED = (
    "a CPU tensor built for a module with random initial values was read on the CPU: they are "
    "drawn anew (deterministic under the script's seed, not an unplanned run's numbers), and "
    "it now holds host memory"
)

INITIALISERS = (
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "ones_",
    "zeros_",
    "eye_",
    "dirac_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
    "sparse_",
)
"""``torch.nn.init``'s in-place initialisers: recorded whole on a deferred tensor (some read
the values they draw, as ``trunc_normal_``'s rejection loop does)."""

_aten = torch.ops.aten
_FILLS: dict[Any, tuple[Any, tuple[Any, ...]]] = {
    _aten.zeros.default: (_aten.zero_.default, ()),
    _aten.zeros_like.default: (_aten.zero_.default, ()),
    _aten.ones.default: (_aten.fill_.Scalar, (1,)),
    _aten.ones_like.default: (_aten.fill_.Scalar, (1,)),
    _aten.full.default: (_aten.fill_.Scalar, ()),
    _aten.full_like.default: (_aten.fill_.Scalar, ()),
    _aten.rand.default: (_aten.uniform_.default, (0.0, 1.0)),
    _aten.rand.generator: (_aten.uniform_.default, (0.0, 1.0)),
    _aten.rand_like.default: (_aten.uniform_.default, (0.0, 1.0)),
    _aten.randn.default: (_aten.normal_.default, (0.0, 1.0)),
    _aten.randn.generator: (_aten.normal_.default, (0.0, 1.0)),
    _aten.randn_like.default: (_aten.normal_.default, (0.0, 1.0)),
}
"""Factories that fill what they make, and the in-place operator that fills it the same way
(``full``'s value is its second argument)."""
_EMPTY = frozenset(
    (_aten.empty.memory_format, _aten.empty_strided.default, _aten.empty_like.default)
)
FACTORIES = frozenset(_FILLS) | _EMPTY
_LIKE = frozenset(
    (
        _aten.empty_like.default,
        _aten.zeros_like.default,
        _aten.ones_like.default,
        _aten.full_like.default,
        _aten.rand_like.default,
        _aten.randn_like.default,
    )
)
_VALUE_FROM_ARGS = frozenset((_aten.full.default, _aten.full_like.default))
_COPIES = frozenset((_aten._to_copy.default, _aten.clone.default))
"""Copies on the CPU of a deferred tensor, deferred in turn."""
_RESIZES = frozenset(("resize_", "resize_as_", "_resize_output_", "set_"))

RUN = object()
""":meth:`Deferred.dispatch`'s answer for an operator that runs as usual."""


@dataclass(frozen=True)
class View:
    """Where a tensor lies in its storage, so a step replays on the same elements."""

    dtype: torch.dtype
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int

    @classmethod
    def of(cls, tensor: torch.Tensor) -> View:
        shape, stride = tuple(tensor.shape), tuple(tensor.stride())
        return cls(tensor.dtype, shape, stride, int(tensor.storage_offset()))

    def on(self, storage: torch.UntypedStorage) -> torch.Tensor:
        """This view of ``storage``, as a plain tensor."""
        return torch.empty(0, dtype=self.dtype).set_(storage, self.offset, self.size, self.stride)


@dataclass(frozen=True)
class Step:
    """One recorded initialiser: ``func(view, *args, **kwargs)``, with a fresh generator seeded
    ``seed`` where it draws random values."""

    func: Callable[..., Any]
    view: View
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    seed: int | None

    @property
    def drawn(self) -> bool:
        """Whether replaying draws random values (its own, or a snapshot's it copies)."""
        return self.seed is not None or any(
            isinstance(a, Snapshot) and any(s.drawn for s in a.steps)
            for a in (*self.args, *self.kwargs.values())
        )

    def run(self, storage: torch.UntypedStorage) -> None:
        kwargs = {name: _thawed(value) for name, value in self.kwargs.items()}
        if self.seed is not None:
            kwargs["generator"] = torch.Generator().manual_seed(self.seed)
        self.func(self.view.on(storage), *(_thawed(a) for a in self.args), **kwargs)


@dataclass(frozen=True)
class Snapshot:
    """A deferred tensor's values as a later step read them: its storage's steps until then."""

    nbytes: int
    steps: tuple[Step, ...]
    view: View

    def value(self) -> torch.Tensor:
        storage = torch.UntypedStorage(self.nbytes)  # type: ignore[no-untyped-call,unused-ignore]
        replay(storage, self.steps)
        return self.view.on(storage)


def replay(storage: torch.UntypedStorage, steps: tuple[Step, ...] | list[Step]) -> None:
    """Run ``steps`` on ``storage`` in the order they were recorded."""
    with torch.no_grad():
        for step in steps:
            step.run(storage)


def _thawed(value: Any) -> Any:
    if isinstance(value, Snapshot):
        return value.value()
    if isinstance(value, (list, tuple)):
        return type(value)(_thawed(v) for v in value)
    return value


def _in_module_init() -> bool:
    """Whether an ``nn.Module``'s ``__init__`` is running (the caller builds a module)."""
    module = torch.nn.Module
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if (
            code.co_name == "__init__"
            and code.co_argcount
            and isinstance(frame.f_locals.get(code.co_varnames[0]), module)
        ):
            return True
        frame = frame.f_back
    return False


def _on_cpu(device: Any) -> bool:
    return device is None or torch.device(device).type == "cpu"


def _touches_device(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether an operator involves the device (a stand-in among its inputs, or ``meta``
    named): moving a deferred tensor there reads no values, a stand-in has none."""
    device = kwargs.get("device")
    if device is not None and torch.device(device).type == "meta":
        return True
    for value in (*args, *kwargs.values()):
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, torch.Tensor) and item.is_meta:
                return True
    return False


def _seed(generator: Any) -> int:
    """A seed drawn from ``generator`` (the CPU's default when None), advancing it."""
    found = generator if generator is not None else torch.default_generator
    return int(torch.randint(0, 1 << 62, (), generator=found).item())


class Deferred:
    """The deferred storages of a run and their recorded steps, by storage (``_cdata``)."""

    def __init__(self, notes: Notes, *, enabled: bool = True) -> None:
        self.notes = notes
        self.enabled = enabled
        self.steps: dict[int, list[Step]] = {}
        self._storages: dict[int, weakref.ref[torch.UntypedStorage]] = {}
        self._writes_self: dict[Any, bool] = {}
        self._random: dict[Any, bool] = {}

    def holds(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is a view of a deferred storage."""
        return bool(self.steps) and tensor.untyped_storage()._cdata in self.steps

    def among(self, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
        """Whether an operator's tensor inputs include a deferred one."""
        steps = self.steps
        for value in (*args, *(kwargs or {}).values()):
            if isinstance(value, (list, tuple)):
                for item in value:
                    if isinstance(item, torch.Tensor) and item.untyped_storage()._cdata in steps:
                        return True
            elif isinstance(value, torch.Tensor) and value.untyped_storage()._cdata in steps:
                return True
        return False

    def _add(self, tensor: torch.Tensor, steps: list[Step]) -> torch.Tensor:
        storage = tensor.untyped_storage()
        key = storage._cdata
        self.steps[key] = steps
        self._storages[key] = weakref.ref(storage)
        weakref.finalize(storage, self._forget, key)
        return tensor

    def _forget(self, key: int) -> None:
        self.steps.pop(key, None)
        self._storages.pop(key, None)

    def settle(self) -> None:
        """At the end of the run: every deferred tensor something still holds (the caller of
        an in-process plan) materialised, so it reads its values after the plan too. The
        script's own objects are collected first; what it freed is never materialised."""
        if not self.steps:
            return
        gc.collect()
        for key, ref in list(self._storages.items()):
            storage = ref()
            steps = self.steps.pop(key, None)
            if storage is not None and steps is not None:
                replay(storage, steps)

    # -- made

    def make(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A factory's tensor, deferred when it is a large CPU tensor made while a module is
        built; None to run the factory as usual."""
        if (
            not self.enabled
            or kwargs.get("pin_memory")
            or kwargs.get("layout")
            not in (
                None,
                torch.strided,
            )
        ):
            return None
        like = func in _LIKE
        if like:
            source = args[0]
            if not isinstance(source, torch.Tensor) or source.device.type != "cpu":
                return None
            if source.layout != torch.strided or not _on_cpu(kwargs.get("device")):
                return None
            numel, dtype = source.numel(), kwargs.get("dtype") or source.dtype
        else:
            if not _on_cpu(kwargs.get("device")):
                return None
            dtype = kwargs.get("dtype")
            if dtype is None:  # full's value decides, as torch.full infers it
                fill = args[1] if func in _VALUE_FROM_ARGS else 0.0
                dtype = torch.full((), fill).dtype
            numel = _numel(args[0])
        if numel * dtype.itemsize < THRESHOLD_BYTES or not _in_module_init():
            return None
        if func in _EMPTY:
            return self._add(func(*args, **kwargs), [])
        fill, fill_args = _FILLS[func]
        if func in _VALUE_FROM_ARGS:
            fill_args = (args[1],)
        made_kwargs = {k: v for k, v in kwargs.items() if k != "generator"}
        if like:
            made = _aten.empty_like.default(args[0], **made_kwargs)
        else:
            made = _aten.empty.memory_format(args[0], **made_kwargs)
        seed = _seed(kwargs.get("generator")) if self._draws(fill) else None
        return self._add(made, [Step(fill, View.of(made), fill_args, {}, seed)])

    # -- written or read

    def dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
        """What an operator makes of deferred tensors, before it runs: a factory's deferred
        tensor; an operator that only writes into one recorded (its result returned); else
        :data:`RUN`, after materialising every deferred tensor it reads."""
        kwargs = kwargs or {}
        if func in FACTORIES:
            made = self.make(func, args, kwargs)
            return RUN if made is None else made
        if not (self.steps and self.among(args, kwargs)):
            return RUN
        return self._written_or_read(func, args, kwargs)

    def _written_or_read(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        first = args[0] if args else None
        if func.is_view:
            return RUN
        if _touches_device(args, kwargs):
            if isinstance(first, torch.Tensor) and self._writes_only_self(func):
                self.steps.pop(first.untyped_storage()._cdata, None)  # the device's values
            return RUN
        if isinstance(first, torch.Tensor) and self.holds(first):
            if func in _COPIES and _on_cpu(kwargs.get("device")):
                return self._copied(first, kwargs)
            if self._writes_only_self(func):
                step = self._step(func, first, args[1:], kwargs, self._draws(func))
                if step is not None:
                    self.steps[first.untyped_storage()._cdata].append(step)
                    return first
                if func is _aten.copy_.default and _whole(first):
                    self.steps.pop(first.untyped_storage()._cdata, None)  # overwritten whole
        for value in (*args, *kwargs.values()):
            for item in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(item, torch.Tensor):
                    self.materialise(item)
        return RUN

    def _copied(self, source: torch.Tensor, kwargs: dict[str, Any]) -> torch.Tensor:
        """A CPU copy of a deferred tensor (``clone``, ``.to(torch.bfloat16)``, ``.half()``):
        deferred too, its one step a copy of the source's values as they are now."""
        options = {k: kwargs[k] for k in ("dtype", "memory_format") if kwargs.get(k) is not None}
        made = _aten.empty_like.default(source, **options)
        storage = source.untyped_storage()
        snapshot = Snapshot(storage.nbytes(), tuple(self.steps[storage._cdata]), View.of(source))
        return self._add(made, [Step(_aten.copy_.default, View.of(made), (snapshot,), {}, None)])

    def initialiser(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``torch.nn.init``'s ``original``, recorded on a deferred tensor. It carries
        ``original``'s name and signature: libraries find initialisers by name (class_resolver
        registers every ``torch.nn.init`` function ending in ``_`` under its ``__name__``)."""
        draws = "generator" in inspect.signature(original).parameters

        @functools.wraps(original)
        def initialise(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(tensor, torch.Tensor) and not tensor.is_meta and self.holds(tensor):
                step = self._step(original, tensor, args, kwargs, draws)
                if step is not None:
                    self.steps[tensor.untyped_storage()._cdata].append(step)
                    return tensor
            return original(tensor, *args, **kwargs)

        return initialise

    def saved(self, original: Callable[[Any], str]) -> Callable[[Any], str]:
        """``torch.serialization.location_tag``, which ``torch.save`` asks of every storage it
        writes (by its raw bytes, out of any operator's sight): a deferred one is materialised
        first."""

        def location_tag(storage: Any) -> str:
            if self.steps:
                untyped = getattr(storage, "_untyped_storage", storage)
                key = getattr(untyped, "_cdata", None)
                if key in self.steps:
                    self._materialise_storage(untyped, key)
            return original(storage)

        return location_tag

    def materialise(self, tensor: torch.Tensor) -> None:
        """``tensor``'s storage given its values (its steps replayed), said once."""
        if not self.steps or tensor.is_meta:
            return
        storage = tensor.untyped_storage()
        self._materialise_storage(storage, storage._cdata)

    def _materialise_storage(self, storage: torch.UntypedStorage, key: int) -> None:
        steps = self.steps.pop(key, None)
        if steps is not None:
            if any(step.drawn for step in steps):  # else the values are python's own
                self.notes.once("deferred", MATERIALISED)
            replay(storage, steps)

    def _step(
        self,
        func: Callable[..., Any],
        tensor: torch.Tensor,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        draws: bool,
    ) -> Step | None:
        """The step recording ``func(tensor, *args, **kwargs)``; None when it reads a large
        tensor that is not deferred (the target is materialised and the call runs then)."""
        frozen_args = tuple(self._frozen(a) for a in args)
        rest = {k: v for k, v in kwargs.items() if k != "generator"}
        frozen_kwargs = {k: self._frozen(v) for k, v in rest.items()}
        if any(v is _REFUSED for v in (*frozen_args, *frozen_kwargs.values())):
            return None
        seed = _seed(kwargs.get("generator")) if draws else None
        return Step(func, View.of(tensor), frozen_args, frozen_kwargs, seed)

    def _frozen(self, value: Any) -> Any:
        """A step's argument as it is now: a deferred tensor's steps so far, a copy of a small
        tensor; :data:`_REFUSED` for one too large to copy or on the device."""
        if isinstance(value, torch.Tensor):
            if value.is_meta:
                return _REFUSED
            storage = value.untyped_storage()
            steps = self.steps.get(storage._cdata)
            if steps is not None:
                return Snapshot(storage.nbytes(), tuple(steps), View.of(value))
            if value.numel() * value.element_size() >= THRESHOLD_BYTES:
                return _REFUSED
            return value.clone()
        if isinstance(value, (list, tuple)):
            items = [self._frozen(v) for v in value]
            return _REFUSED if any(v is _REFUSED for v in items) else type(value)(items)
        return value

    def _writes_only_self(self, func: Any) -> bool:
        """Whether ``func`` writes its first argument's values and nothing else (not its
        shape or storage, as ``resize_``, ``set_`` and the in-place views do)."""
        found = self._writes_self.get(func)
        if found is None:
            schema = func._schema
            written = [a.alias_info is not None and a.alias_info.is_write for a in schema.arguments]
            found = (
                bool(written)
                and written[0]
                and not any(written[1:])
                and torch.Tag.inplace_view not in func.tags
                and schema.name.split("::")[-1] not in _RESIZES
            )
            self._writes_self[func] = found
        return found

    def _draws(self, func: Any) -> bool:
        """Whether an operator draws random values (it takes a generator)."""
        found = self._random.get(func)
        if found is None:
            found = self._random[func] = any(a.name == "generator" for a in func._schema.arguments)
        return found


_REFUSED = object()


def _whole(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` covers its whole storage, every element once."""
    nbytes = tensor.numel() * tensor.element_size()
    return bool(tensor.is_contiguous() and nbytes == tensor.untyped_storage().nbytes())


def _numel(size: Any) -> int:
    numel = 1
    for n in size:
        numel *= int(n)
    return numel
