"""Torch's legacy CUDA tensor types on the planned device: ``torch.cuda.FloatTensor`` and its
nine siblings, and ``Tensor.type``.

Older code (PyTorch's examples before 0.4, PyTorch-GAN, many papers' repositories) picks its
tensor type once (``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor``), makes
tensors from it (``Tensor(n, 1).fill_(1.0)``, ``Tensor(np_array)``), casts with
``x.type(Tensor)`` and compares ``x.type()`` with a type's name. The CPU build refuses the first
two ("type torch.cuda.FloatTensor not available", "Cannot initialize CUDA without ATen_cuda
library") and answers the last as ``meta`` does (``torch.meta.FloatTensor``). Under the plan
each answers as on a GPU:

- a type called makes a stand-in of its dtype, as torch's legacy constructor reads its
  arguments: sizes (``FloatTensor(3, 4)``, a ``torch.Size``) uninitialised; data (a list, an
  ndarray) copied from the host; a tensor of the type itself aliased, any other refused with a
  ``TypeError``; nothing, an empty tensor;
- ``isinstance(x, torch.cuda.FloatTensor)`` holds for a dense stand-in of that dtype;
- ``x.type(torch.cuda.FloatTensor)`` and ``x.type("torch.cuda.FloatTensor")`` move and cast to
  the planned device (a CPU type moves a stand-in to the host); ``x.type()`` of a stand-in
  names its CUDA type.

``torch.set_default_tensor_type`` reads a type's ``is_cuda`` and ``dtype``
(:func:`~memforensics.plan.cuda.default_tensor_type`), which these types carry as torch's do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

NAMES = (
    "FloatTensor",
    "DoubleTensor",
    "HalfTensor",
    "BFloat16Tensor",
    "LongTensor",
    "IntTensor",
    "ShortTensor",
    "CharTensor",
    "ByteTensor",
    "BoolTensor",
)
"""The legacy CUDA types, each the name of its CPU type in ``torch`` and of its CUDA type in
``torch.cuda``; the dtype is the CPU type's."""

OnDevice = Callable[[torch.Tensor], bool]
"""Whether a tensor is a stand-in (:func:`~memforensics.plan.standins.on_device`)."""


class LegacyType(type):
    """The class of a legacy CUDA type: calling it makes a stand-in, ``isinstance`` answers by
    dtype and device."""

    dtype: torch.dtype
    host: Any
    """The CPU type of the same dtype (``torch.FloatTensor``): its constructor reads data."""
    held: OnDevice

    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, torch.Tensor) and cls.holds(instance)

    def holds(cls, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is of this type: a dense stand-in of its dtype."""
        return tensor.layout == torch.strided and tensor.dtype == cls.dtype and cls.held(tensor)

    def __call__(cls, *args: Any, **kwargs: Any) -> torch.Tensor:
        return _made(cls, args, kwargs)


def _sizes(args: tuple[Any, ...]) -> bool:
    """Whether the legacy constructor reads ``args`` as sizes: integers, or one ``torch.Size``
    (a list or tuple alone is data)."""
    if len(args) == 1 and isinstance(args[0], torch.Size):
        return True
    return all(isinstance(a, int) and not isinstance(a, bool) for a in args)


def _made(kind: LegacyType, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
    """``torch.cuda.FloatTensor(*args)``: a stand-in, as the legacy constructor makes it."""
    kwargs = dict(kwargs)
    device = kwargs.pop("device", None)
    if device is not None and torch.device(device).type != "cuda":
        raise RuntimeError(
            "legacy constructor expects device type: cuda but device type: "
            f"{torch.device(device).type} was passed"
        )
    if not kwargs and _sizes(args):
        shape = args[0] if len(args) == 1 and isinstance(args[0], torch.Size) else args
        return torch.empty(shape if args else (0,), dtype=kind.dtype, device="cuda")
    if not kwargs and len(args) == 1 and isinstance(args[0], torch.Tensor):
        other = args[0]
        if not kind.holds(other):
            raise TypeError(f"expected torch.cuda.{kind.__name__} (got {other.type()})")
        alias: torch.Tensor = torch.ops.aten.alias(other)
        return alias
    made: torch.Tensor = kind.host(*args, **kwargs)  # the host's reading: its errors too
    return made.to("cuda")


def types(held: OnDevice) -> dict[str, LegacyType]:
    """``torch.cuda``'s legacy types by name, over the plan's stand-ins."""
    found = {}
    for name in NAMES:
        host = getattr(torch, name)
        namespace = {
            "__module__": "torch.cuda",
            "__qualname__": name,
            "__doc__": f"``torch.cuda.{name}`` on the planned device.",
            "dtype": host.dtype,
            "layout": torch.strided,
            "is_cuda": True,
            "is_sparse": False,
            "host": host,
            "held": staticmethod(held),
        }
        found[name] = LegacyType(name, (), namespace)
    return found


def _target(dtype: Any) -> Any:
    """What ``Tensor.type(dtype)`` names: a legacy type by its object or its dotted name; None
    for anything else (a ``torch.dtype``, a sparse type), which torch's own method casts."""
    if isinstance(dtype, str):
        if not dtype.startswith("torch."):
            return None
        try:
            dtype = torch._utils._import_dotted_name(dtype)  # type: ignore[no-untyped-call, unused-ignore]
        except AttributeError:
            return None
    if not isinstance(dtype, type) or getattr(dtype, "is_sparse", True):
        return None
    return dtype if isinstance(getattr(dtype, "is_cuda", None), bool) else None


def tensor_type(held: OnDevice) -> Callable[..., Any]:
    """``Tensor.type``: a stand-in's name is its CUDA type's; a legacy CUDA type moves and casts
    to the planned device; a CPU type moves a stand-in to the host."""
    original = torch._C.TensorBase.type

    def type_(
        self: torch.Tensor, dtype: Any = None, non_blocking: bool = False, **kwargs: Any
    ) -> Any:
        if dtype is None and not kwargs:
            name = original(self)
            return name.replace("torch.meta.", "torch.cuda.", 1) if held(self) else name
        target = _target(dtype)
        if target is not None and (target.is_cuda or held(self)):
            device = "cuda" if target.is_cuda else "cpu"
            return self.to(device=device, dtype=target.dtype, non_blocking=non_blocking, **kwargs)
        return original(self, dtype, non_blocking, **kwargs)

    return type_
