"""What a stand-in answers about its memory and device: its block's address, device 0, as CUDA does.

A stand-in is a ``meta`` tensor, and a ``meta`` tensor says ``data_ptr() == 0`` and
``get_device() == -1``. A CUDA tensor says where its storage's block starts (plus its offset)
and which device holds it. Both answers matter to real code: capture's tracker reads them to
list the model's and optimizer's tensors in a sidecar (so a planned dump knows its kinds as a
GPU dump does), and scripts tell storages apart by address (``safetensors``' shared-tensor
check, de-duplicating tied weights by ``data_ptr()``), which all-zero addresses would merge.

Only tensors whose storage the plan put on the device answer so; the script's own ``meta``
tensors keep ``meta``'s answers.

``.device``, ``.is_cuda`` and ``.is_meta`` answer by who asks (:mod:`~memforensics.plan.askers`).
To the script and its libraries a stand-in is on ``cuda:0``, as on the GPU: they choose their
own code by it (an offload that moves what is on ``"cuda"``, TRL's ``mm`` with ``out_dtype`` on
CUDA against an upcast copy elsewhere; torchtune's RoPE builds its cache only for a tensor that
is not ``meta``), and what they choose decides what is allocated. To
torch's own Python it stays ``meta``: torch branches on these to call CUDA-only kernels
(cuDNN's RNN weights, fused attention) that the ``meta`` device does not implement.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import torch

from memforensics.plan.askers import caller_torch_own, torch_own

Address = Callable[[int], int | None]
"""The start of the block holding a storage (by ``_cdata``); 0 for an empty storage on the
device, None for a storage the plan does not hold."""


_IS_META: Any = vars(torch._C.TensorBase)["is_meta"]
"""torch's own ``Tensor.is_meta``, whoever asks."""


def on_device(address: Address) -> Callable[[torch.Tensor], bool]:
    """Whether a tensor is a stand-in: ``meta`` over a storage the plan put on the device (the
    script's own ``meta`` tensors are not)."""

    def held(tensor: torch.Tensor) -> bool:
        meta = bool(_IS_META.__get__(tensor, type(tensor)))
        return meta and address(tensor.untyped_storage()._cdata) is not None

    return held


class Methods(NamedTuple):
    """``Tensor.data_ptr``, ``Tensor.get_device``, ``UntypedStorage.data_ptr`` and the
    storage's sharing answering from the planned device for its storages, as torch's own for
    every other."""

    data_ptr: Callable[[torch.Tensor], int]
    get_device: Callable[[torch.Tensor], int]
    untyped_data_ptr: Callable[[torch.UntypedStorage], int]
    share_memory_: Callable[[torch.UntypedStorage], torch.UntypedStorage]
    is_shared: Callable[[torch.UntypedStorage], bool]
    device: property
    is_cuda: property
    is_meta: property


SHARED = (
    "a device tensor was shared for other processes (model.share_memory()): multiprocessing's "
    "processes given it, started with spawn or forkserver, are planned as workers; other "
    "processes that use it run outside the plan, and what they allocate on the GPU is not counted"
)
"""Said once where the script shares a stand-in's storage: on CUDA, other processes (Hogwild
training, A3C workers) open it by IPC and allocate on the same GPU through their own
allocators; the plan runs those started as ``multiprocessing`` processes
(:mod:`~memforensics.plan.workers`), not others."""


def methods(address: Address, say: Callable[[str, str], None]) -> Methods:
    """The methods over ``address``: torch's own for what the plan does not hold. ``say``
    keeps a note once."""
    tensor_ptr = torch._C.TensorBase.data_ptr
    tensor_device = torch._C.TensorBase.get_device
    storage_ptr = torch._C.StorageBase.data_ptr  # type: ignore[attr-defined, unused-ignore]  # not in the stub
    storage_share = torch.UntypedStorage.share_memory_
    storage_shared = torch.UntypedStorage.is_shared
    held = on_device(address)

    def data_ptr(self: torch.Tensor) -> int:
        if self.is_meta:
            start = address(self.untyped_storage()._cdata)
            if start is not None:
                return start + int(self.storage_offset()) * self.itemsize if start else 0
        return int(tensor_ptr(self))

    def get_device(self: torch.Tensor) -> int:
        if _held(held, self):
            return int(PLANNED_DEVICE.index or 0)
        return int(tensor_device(self))

    def untyped_data_ptr(self: torch.UntypedStorage) -> int:
        if self.device.type == "meta":
            start = address(self._cdata)
            if start is not None:
                return start
        return int(storage_ptr(self))

    def share_memory_(self: torch.UntypedStorage) -> torch.UntypedStorage:
        """A device storage is shared as it is (``model.share_memory()`` of a CUDA model:
        only CPU storages move to POSIX shared memory; CUDA's go to other processes by IPC)."""
        if self.device.type == "meta" and address(self._cdata) is not None:
            say("shared", SHARED)
            return self
        shared: torch.UntypedStorage = storage_share(self)
        return shared

    def is_shared(self: torch.UntypedStorage) -> bool:
        """A device storage is always shared, as torch says of CUDA's."""
        if self.device.type == "meta" and address(self._cdata) is not None:
            return True
        return bool(storage_shared(self))

    device = _answered_to_script("device", held, PLANNED_DEVICE)
    is_cuda = _answered_to_script("is_cuda", held, True)
    is_meta = _answered_to_script("is_meta", held, False)
    return Methods(
        data_ptr, get_device, untyped_data_ptr, share_memory_, is_shared, device, is_cuda, is_meta
    )


_DISPATCH_MODES = torch._C._len_torch_dispatch_stack
"""How many dispatch modes are on the stack: none inside an operator's kernel, where the plan's
own mode is off the stack while it runs the operator. A library's kernel for ``meta`` (a
``torch.library`` fake implementation, bitsandbytes' ``quantize_4bit``) makes its outputs on
its inputs' ``.device``, so there a stand-in tells the truth."""

PLANNED_DEVICE = torch.device("cuda", 0)
"""A stand-in's ``.device`` as the script reads it: the device :meth:`get_device` names."""


def _answered_to_script(
    name: str, held: Callable[[torch.Tensor], bool], answer: object
) -> property:
    """``Tensor.<name>``, a read-only property: ``answer`` where the script or a library asks
    of a stand-in, outside an operator's kernel; torch's own answer otherwise."""
    own: Any = vars(torch._C.TensorBase)[name]

    def get(tensor: torch.Tensor) -> Any:
        asked = _DISPATCH_MODES() and not _OWN_ANSWER.on and not caller_torch_own()
        if asked and _held(held, tensor):
            return answer
        kind = type(tensor)
        if kind in _PLAIN:
            return own.__get__(tensor, kind)
        # torch's getter hands a subclass's read to its __torch_function__ (bitsandbytes'
        # Params4bit), which reads the property again from the library's frame: that read is
        # still the first asker's
        before, _OWN_ANSWER.on = _OWN_ANSWER.on, True
        try:
            return own.__get__(tensor, kind)
        finally:
            _OWN_ANSWER.on = before

    return property(get, doc=own.__doc__)


_PLAIN = (torch.Tensor, torch.nn.Parameter)
"""Tensor classes without a ``__torch_function__`` of their own, whose reads torch's getter
answers without handing them on."""


class _OwnAnswer(threading.local):
    """Whether this thread is inside torch's own getter of a stand-in's property."""

    on = False


_OWN_ANSWER = _OwnAnswer()


@contextmanager
def traced_on_cuda() -> Iterator[None]:
    """While dynamo traces: ``x.device``, ``x.is_cuda`` and ``x.is_meta`` of a ``meta`` tensor,
    read by the script's or a library's code, answer ``cuda:0``, True and False (constants,
    which dynamo guards on nothing), as in eager code, so compiled
    code chooses as it does on the GPU (a trace would otherwise take its non-CUDA branch where
    eager code took the CUDA one); torch's own code that dynamo inlines still reads ``meta``.
    A factory given that device makes its tensor where the stand-ins are (``compiled``'s fake
    mode puts a planned-device factory on ``meta``). The script's own ``meta`` tensors, rare
    in compiled code, read ``cuda:0`` too: a trace sees only their fake tensors."""
    from torch._dynamo.variables.base import VariableTracker
    from torch._dynamo.variables.tensor import TensorVariable

    answers = {
        "method_attr_device": PLANNED_DEVICE,
        "method_attr_is_cuda": True,
        "method_attr_is_meta": False,
    }
    originals = {name: vars(TensorVariable).get(name) for name in answers}

    def reading(name: str) -> Callable[..., Any]:
        original = originals[name]

        def read(self: TensorVariable, tx: Any) -> Any:
            device = self.device
            on_meta = isinstance(device, torch.device) and device.type == "meta"
            if on_meta and not torch_own(tx.f_globals):
                return VariableTracker.build(tx, answers[name])
            return None if original is None else original(self, tx)

        return read

    for name in answers:
        setattr(TensorVariable, name, reading(name))
    try:
        yield
    finally:
        for name, original in originals.items():
            if original is None:
                delattr(TensorVariable, name)
            else:
                setattr(TensorVariable, name, original)


def _held(held: Callable[[torch.Tensor], bool], tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a stand-in, or a subclass that wraps one (a ``DTensor``, FSDP2's
    parameters and tensor parallelism's; torchao's float8 and 8-bit tensors), whose ``.device``
    is its first inner tensor's, or a transform's wrapper of one (:func:`transformed_value`);
    False for another tensor without storage."""
    try:
        return held(_first_inner(tensor))
    except (RuntimeError, NotImplementedError):
        value = transformed_value(tensor)
        return value is not tensor and _held(held, value)


def transformed_value(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor that ``torch.func``'s wrappers hold (``grad``'s and ``vjp``'s
    ``TensorWrapper``, ``vmap``'s ``BatchedTensor``), through every level of nested
    transforms; ``tensor`` itself where it is no such wrapper. A wrapper has no storage of its
    own and answers ``.device`` with its value's, so a per-sample gradient computed as
    ``vmap(grad(loss))`` reads its inputs on the device their values are on."""
    functorch = torch._C._functorch
    while functorch.is_functorch_wrapped_tensor(tensor):
        tensor = functorch.get_unwrapped(tensor)
    return tensor


def _first_inner(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor a wrapper subclass holds first (``__tensor_flatten__``'s first name, a
    ``DTensor``'s local tensor), down to one that wraps none; ``tensor`` itself if it wraps
    none."""
    if type(tensor) in _PLAIN:
        return tensor
    flatten = getattr(tensor, "__tensor_flatten__", None)
    if flatten is None:
        return tensor
    names = flatten()[0]
    inner = getattr(tensor, names[0], None) if names else None
    return _first_inner(inner) if isinstance(inner, torch.Tensor) else tensor


def wrapper_subclass(make: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``Tensor._make_wrapper_subclass`` with a CUDA ``device`` made on ``meta``. A library
    makes its wrapper subclass (torchao's float8 and int8 weights, its 8-bit optimizer states)
    on its inner tensors' ``.device``, which a stand-in answers it as ``cuda:0``; a tensor on
    the real CUDA device is one the CPU build cannot guard (autograd's metadata for a leaf,
    ``copy_``'s device guard: "PyTorch is not linked with support for cuda devices"). On
    ``meta`` over stand-ins it answers ``cuda:0`` to the script as they do (:func:`_held`)."""

    def made(cls: type, *args: Any, **kwargs: Any) -> torch.Tensor:
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "cuda":
            kwargs["device"] = _META
        return make(cls, *args, **kwargs)

    return made


_META = torch.device("meta")
