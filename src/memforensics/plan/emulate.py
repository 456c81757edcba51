"""CUDA emulated on the CPU build of torch: stand-in tensors on ``meta``, storages on the model.

Two torch modes do the work, both pushed for the whole run. :class:`DeviceMode` (a
``TorchFunctionMode``) sends what the script puts on ``"cuda"`` to ``meta`` instead (factory
calls with a device, ``.to()``, ``.cuda()``, modules moved with ``.to()``) and re-makes the
choices CUDA would make where the CPU build makes others. :class:`StorageMode` (a
``TorchDispatchMode``) sees every storage an operator creates and hands it to the
:class:`~memforensics.plan.device.PlannedDevice`, whose block lives as long as the storage does
(a weak reference's callback on it, :mod:`~memforensics.plan.released`). cuBLAS's workspace is
allocated on the first matrix multiply of each thread's cuBLAS handle (pooled: a thread that
has ended leaves its handle to the next); backward counts as autograd's own device thread, as on
a GPU.

Both are ``meta`` underneath, but only a stand-in is on the planned device: what the script puts
on ``meta`` itself (a model built under ``torch.device("meta")`` before ``to_empty``) is a
:class:`Ghosts` storage, with no block. The device a call names decides; without one, an
operator's outputs are ghosts when one of its inputs is.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _device as _default
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from memforensics.plan import (
    assigned,
    attention,
    autocast_inner,
    batch_norm,
    choices,
    ctc,
    cumulative,
    distributed,
    dropout,
    fused_norms,
    gemm_4bit,
    grouped,
    half_softmax,
    handles,
    host_fill,
    inplace,
    int4pack,
    kernel_scratch,
    log_sigmoid,
    logsumexp,
    meta_outputs,
    native_library,
    nms,
    operands,
    own_kernels,
    reduced_losses,
    reductions,
    repeat_interleave,
    rnn_cells,
    samples,
    scratch,
    sparse,
    standins,
    traced,
    unique,
    values,
    wrapped_numbers,
)
from memforensics.plan.deferred import FACTORIES, RUN, Deferred
from memforensics.plan.device import OutOfScope, PlannedDevice
from memforensics.plan.eager_modes import EagerDispatchMode
from memforensics.plan.released import when_released
from memforensics.plan.shapes import Shapes
from memforensics.plan.values import Notes

_META = torch.device("meta")
_MATMUL = operands.overloads(
    "mm", "addmm", "addmm_", "_addmm_activation", "bmm", "baddbmm", "baddbmm_", "addbmm",
    "addbmm_", "addmv", "addmv_", "mv", "dot", "vdot", "_int_mm",
)  # fmt: skip
"""The products cuBLAS computes, in every overload: in place (``acc.addmm_(a, b)``), into
``out=``, and with ``out_dtype`` (``mm.dtype``) they reach the same ``addmm_out_cuda_impl`` /
``baddbmm_out_cuda_impl`` as the plain call, and so take cuBLAS's workspace."""
_LT_BIAS = frozenset(
    getattr(torch.ops.aten, name).default
    for name in ("addmm", "_addmm_activation")
    if hasattr(getattr(torch.ops.aten, name), "default")
)
"""The products ``addmm_out_cuda_impl`` may send to cuBLASLt's ``gemm_and_bias``."""
_LT_ALWAYS = frozenset(
    getattr(torch.ops.aten, name).default
    for name in ("_scaled_mm",)
    if hasattr(getattr(torch.ops.aten, name), "default")
)
"""Products that only cuBLASLt computes (``scaled_gemm``)."""
_LT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
_LT_DISABLED_ENV = "DISABLE_ADDMM_CUDA_LT"
_BACKWARD = "autograd"
_ADD = torch.ops.aten.add.Tensor
_ONLY_OWNER = 2  # the tensor's reference to its storage, and the Python storage object asking
_AUTOGRAD_ONLY = 4
"""``sys.getrefcount`` of a gradient only autograd holds, asked in ``_reusable`` (torch 2.13 on
CPython 3.11, measured): the operator's argument tuple, the name ``first``, ``getrefcount``'s
own argument, and the one kept for the tensor's C++ owner (the ``InputBuffer``). One more is
the script's: a hook that kept the gradient (nnsight's ``.grad.save()``,
``register_hook(grads.append)``)."""
_current_node = torch._C._current_autograd_node
(
    _PRODUCT,
    _LT_ONLY,
    _REDUCTION,
    _KERNEL,
    _INDEX_PUT,
    _EMBEDDING_BACKWARD,
    _SORT,
    _SCAN,
    _COPIES_ONLY,
) = range(9)
_SCRATCH_ROLES: dict[Any, int] = {
    **dict.fromkeys((*operands.COPYING, *cumulative.OPERATORS), _COPIES_ONLY),
    **dict.fromkeys(kernel_scratch.SCANS, _SCAN),
    **dict.fromkeys(kernel_scratch.SORTS, _SORT),
    **dict.fromkeys(kernel_scratch.EMBEDDING_BACKWARDS, _EMBEDDING_BACKWARD),
    **dict.fromkeys(kernel_scratch.INDEX_PUTS, _INDEX_PUT),
    **dict.fromkeys(kernel_scratch.KERNELS, _KERNEL),
    **dict.fromkeys(reductions.TABLE, _REDUCTION),
    **dict.fromkeys(_LT_ALWAYS, _LT_ONLY),
    **dict.fromkeys(_MATMUL, _PRODUCT),
}
"""What each operator that takes anything beside its output takes (:meth:`StorageMode._scratch`),
in one lookup (an ``OpOverload`` hashes in Python, so testing each table in turn costs every
operator); a later table's entry wins, as the tests rank them (a product before cuBLASLt's own,
a reduction before a kernel's scratch); an operator absent takes nothing."""
_INDEX = torch.ops.aten.index.Tensor
_COMPOSITE = torch._C.DispatchKey.CompositeImplicitAutograd
_TENSORS_OWN_KEYS = (
    torch._C.DispatchKey.ADInplaceOrView,
    torch._C.DispatchKey.Conjugate,
    torch._C.DispatchKey.Negative,
    torch._C.DispatchKey.ZeroTensor,
)
"""Dispatch keys a tensor carries that a dispatch mode's handler runs below, excluding them for
what it calls, where the script's call had them on: a composite's kernel runs with them, as
the dispatcher runs it for the script (:func:`_as_called`). ``ADInplaceOrView`` makes a view
of a tensor that requires grad answer ``requires_grad`` as its base does, under
``inference_mode`` too, and ``matmul`` folds a batch into one ``mm`` by it
(``should_fold``, ``aten/src/ATen/native/LinearAlgebra.cpp``)."""
_COPY = torch.ops.aten.copy_.default
_CLASS_LOSSES = (torch.ops.aten.nll_loss_forward.default, torch.ops.aten.nll_loss2d_forward.default)
"""Losses whose target is a batch's classes (``cross_entropy`` runs one): the targets that
predictions read on the host are made of (:meth:`~memforensics.plan.values.Reads.loss`)."""
_MADE_FIRST = {
    torch.ops.aten.native_dropout.default: (1,),
    torch.ops.aten._thnn_fused_lstm_cell.default: (2,),
    torch.ops.aten._scaled_dot_product_cudnn_attention.default: (6, 7),
}
"""Operators whose CUDA kernel allocates some outputs before the others, where the ``meta``
kernel makes them in order: ``dropout_cuda`` the mask, then the result;
``_thnn_fused_lstm_cell_cuda`` the workspace, then ``hy`` and ``cy``; ``_cudnn_attention_forward``
the philox seed and offset, then the output and the log-sum-exp (an H200's trace)."""
_ON_HOST = {torch.ops.aten._scaled_dot_product_efficient_attention.default: (2, 3)}
"""Outputs CUDA's kernel makes on the host, where the ``meta`` kernel makes them beside the
others: memory-efficient attention's philox seed and offset (``_efficient_attention_forward``,
outside a CUDA graph's capture; an H200's trace holds no block for them)."""
_profiling = torch.autograd._profiler_enabled
_tls_include = torch._C._dispatch_tls_local_include_set
_tls_exclude = torch._C._dispatch_tls_local_exclude_set
_record_functions = torch.autograd._enable_record_function
_QUIET = threading.local()
"""Whether this thread runs the plan's own work under an operator a profiler records: its
operators are kept out of the profile (``at::enableRecordFunction`` is per thread), as a GPU
run's profile holds the operator and not how a plan answers it."""
_LOGSUMEXP = torch.ops.aten.logsumexp.default
_TO_COPY = torch.ops.aten._to_copy.default
_SET_STORAGE = frozenset(
    (torch.ops.aten.set_.source_Storage, torch.ops.aten.set_.source_Storage_storage_offset)
)
"""``Tensor.set_(storage, ...)``, which ``torch._utils._rebuild_tensor`` ends in: a tensor put
onto a storage made outside any operator (``torch.UntypedStorage(n, device="meta")``)."""
NESTED = (
    "nested tensors of torch.nested's default layout (torch.strided) are not modelled on the "
    "planned device: PyTorch's NestedTensorImpl refuses a meta storage (layout=torch.jagged is)"
)
_NESTED_REFUSED = "NestedTensorImpl storage must be"
"""PyTorch's internal assert when a strided nested tensor is made over a ``meta`` storage."""


def _made_first(out: Any) -> bool:
    """Whether an operator's first output (a reduction's values) is a stand-in."""
    first = out[0] if isinstance(out, tuple) and out else out
    return isinstance(first, torch.Tensor) and first.is_meta


def _as_called() -> Any:
    """The dispatcher's keys as they were for the script's call, for a kernel run inside this
    mode's handler: :data:`_TENSORS_OWN_KEYS` on again, the rest (the mode's own, autograd's
    under ``inference_mode``) as they are."""
    exclude = _tls_exclude()
    for key in _TENSORS_OWN_KEYS:
        exclude = exclude.remove(key)
    return torch._C._ForceDispatchKeyGuard(_tls_include(), exclude)


def _any_meta(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    """Whether an operator's tensor inputs include a ``meta`` one (a stand-in or the script's
    own): CPU operators run as on the CPU."""
    for value in (*args, *(kwargs or {}).values()):
        if isinstance(value, torch.Tensor):
            if value.is_meta:
                return True
        elif isinstance(value, (list, tuple)) and any(
            isinstance(v, torch.Tensor) and v.is_meta for v in value
        ):
            return True
    return False


def _onto_meta(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    """Whether an operator names ``meta`` as the device its output goes to (``to``'s overloads
    with a host tensor, ``"cuda"`` sent to ``meta``): it makes a stand-in, a copy onto the
    device."""
    return any(
        isinstance(value, torch.device) and value.type == "meta"
        for value in (*args, *(kwargs or {}).values())
    )


def _in_made_order(func: Any, out: Any) -> Any:
    """``out`` in the order CUDA's kernel for ``func`` allocates it (:data:`_MADE_FIRST`),
    without what it makes on the host (:data:`_ON_HOST`)."""
    if not isinstance(out, (tuple, list)):
        return out  # one output: no lookup (an operator hashes in Python)
    first, host = _MADE_FIRST.get(func), _ON_HOST.get(func, ())
    if first is None and not host:
        return out
    first = first or ()
    rest = [o for i, o in enumerate(out) if i not in first and i not in host]
    return [*(out[i] for i in first), *rest]


def _on_standins(first: Any) -> bool:
    """Whether an operator's first argument is a stand-in, or a list (of lists) of tensors
    whose first is one (a coalesced collective's)."""
    while isinstance(first, (list, tuple)) and first:
        first = first[0]
    return isinstance(first, torch.Tensor) and first.is_meta


def _any_wrapper(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    """Whether an operator's tensor inputs include a subclass that wraps others (a jagged nested
    tensor, a ``DTensor``). Such a subclass's own dispatch takes the operator on a GPU (a nested
    tensor's ``linear`` is a product on its values, its ``is_contiguous`` an answer from its own
    table), so this mode passes it on (``NotImplemented``); the operators the subclass then runs
    on the tensors it wraps come back through this mode, which models them as any other."""
    for value in (*args, *(kwargs or {}).values()):
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if _is_wrapper(item):
                return True
    return False


_FAKE_KEY = torch._C._TorchDispatchModeKey.FAKE


def _faking() -> bool:
    """Whether a ``FakeTensorMode`` is active (the script's own, or one a library enters, as
    DTensor's sharding propagation does to find an operator's output shape): torch keeps it
    beneath every other dispatch mode, so an operator reaches this mode first, then the fake
    mode. What it makes is a fake tensor on a GPU too, with no memory on the device: no
    operator under it takes a block, reads a value or forms a communicator. A device it is
    named is left as named, so a fake tensor the script makes on ``"cuda"`` reads its fake
    device, ``cuda:0``, as torch's fake tensors do without a GPU."""
    return torch._C._get_dispatch_mode(_FAKE_KEY) is not None


_TENSOR_FUNCTION = torch.Tensor.__torch_function__.__func__  # type: ignore[attr-defined,unused-ignore]


def _takes_functions(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    """Whether a function's tensor inputs include one whose class handles torch's functions
    itself (a jagged nested tensor's ``__torch_function__`` runs ``linear`` and
    ``scaled_dot_product_attention`` on its values, choosing its own kernels): on a GPU that
    class takes the function before ``at::native`` would, so the plan's own kernels for plain
    tensors step aside. A ``DTensor`` or a parameter, whose ``__torch_function__`` is disabled,
    does not."""
    for value in (*args, *(kwargs or {}).values()):
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, torch.Tensor):
                own = getattr(type(item).__torch_function__, "__func__", None)
                disabled = type(item).__torch_function__ is torch._C._disabled_torch_function_impl
                if own is not _TENSOR_FUNCTION and not disabled:
                    return True
    return False


def _is_wrapper(tensor: object) -> bool:
    """Whether ``tensor`` is a subclass that wraps other tensors (a ``DTensor``): never a
    plain tensor nor a number, answered before torch's protocol test (every argument of every
    operator is asked)."""
    kind = type(tensor)
    if kind is torch.Tensor or kind in _SCALARS:
        return False
    return bool(is_traceable_wrapper_subclass(tensor))


_SCALARS = frozenset((int, float, bool, type(None)))
"""Argument types that are never tensors."""


_TORCH = os.path.dirname(torch.__file__)
_MACHINERY = (
    os.path.join(_TORCH, "_dynamo", "eval_frame.py"),
    os.path.join(_TORCH, "_compile.py"),
    os.path.join(_TORCH, "utils", "_python_dispatch.py"),
    os.path.join(_TORCH, "overrides.py"),
    weakref.__file__,
)
"""Files of the modes' own machinery: a real run's stacks never show them."""


def _index(device: Any) -> bool:
    """Whether ``device`` is a bare device index (``torch.device(0)``, ``.to(0)``,
    ``device=0``, as Accelerate's ``device_map`` names them): on a CUDA build an index names
    a CUDA device, so under the plan the planned one. ``True`` is a flag, not an index."""
    return isinstance(device, int) and not isinstance(device, bool)


def _as_device(device: Any) -> Any:
    """``device`` with a bare index read as the CUDA device it names."""
    return torch.device("cuda", device) if _index(device) else device


def is_cuda_device(device: Any) -> bool:
    """True for what the script means as the CUDA device: ``"cuda"``, ``"cuda:0"``,
    ``torch.device("cuda")``, ``0``."""
    if _index(device):
        return True
    if isinstance(device, torch.device):
        return bool(device.type == "cuda")
    if isinstance(device, str):
        return device == "cuda" or device.startswith("cuda:")
    return False


GHOST_DEVICE = torch.device("meta")
"""The ``meta`` the script names itself, one object: ``torch.device("meta")`` made by the script,
and the ``.device`` of its own meta tensors, answer it. A stand-in's ``.device`` is ``meta`` too
(torch's own Python branches on the type, and ``meta`` has no CUDA-only kernels), but another
object, so ``device=x.device`` makes another stand-in. The two compare equal, as before."""


def _names_cuda(device: Any) -> bool:
    """Whether an operator's ``device`` argument, as the dispatcher hands it on, is CUDA's: a
    library's operator written in Python (a ``CompositeImplicitAutograd`` kernel, torchao's
    quantization primitives) runs its body inside the function mode's handler, where that mode
    is off, so ``device=x.device`` read off a stand-in reaches the dispatcher as ``cuda:0``."""
    return type(device) is torch.device and device.type == "cuda"


def _named(device: Any) -> bool | None:
    """Where a device the script names puts a tensor: True on its own ``meta`` (a ghost), False
    on the planned device (``"cuda"``, or the ``meta`` read off a stand-in: a stand-in), None
    elsewhere."""
    if device is GHOST_DEVICE:
        return True
    if _index(device):
        return False
    if isinstance(device, torch.device):
        kind = device.type
        return False if kind in ("cuda", "meta") else None
    if isinstance(device, str):
        kind = device.split(":")[0]
        return True if kind == "meta" else False if kind == "cuda" else None
    return None


def names_planned_device(device: Any) -> bool:
    """Whether ``device`` is the planned device as the script names it: ``"cuda"``, an index,
    or the ``.device`` read off a stand-in (its ``meta``, never the script's own)."""
    return _named(device) is False


def _on_meta(device: Any) -> Any:
    """The device a stand-in is really made on, for one the script names."""
    return _META if is_cuda_device(device) else device


def _made_device(args: tuple[Any, ...], kwargs: dict[str, Any], placing: bool | None) -> Any:
    """``torch.device(...)`` called by the script: its own ``meta`` is :data:`GHOST_DEVICE`,
    unless it copies a stand-in's device; a bare index is the CUDA device it names."""
    if len(args) == 1 and not kwargs and _index(args[0]):
        return torch.device("cuda", args[0])
    made = torch.device(*args, **kwargs)
    first = args[0] if args else kwargs.get("type")
    if made == GHOST_DEVICE and (isinstance(first, str) or first is GHOST_DEVICE):
        return GHOST_DEVICE
    return made


_PARSE_TO = torch._C._nn._parse_to
_NO_DATA = "Cannot copy out of meta tensor; no data!"
"""PyTorch's error for a ``meta`` tensor moved to a device with data."""


def _storage_key(tensor: torch.Tensor) -> int:
    """The key of the storage under ``tensor``: its own, or the value's that a ``torch.func``
    transform's wrapper holds (the wrapper has none, and asking raises)."""
    try:
        return int(tensor.untyped_storage()._cdata)
    except NotImplementedError:
        return int(standins.transformed_value(tensor).untyped_storage()._cdata)


class Ghosts:
    """The script's own ``meta`` storages: never on the planned device (a real GPU has no
    memory for them either), until the script gives them some (``to_empty``).

    ``placing`` is where the call running now puts its outputs, from the device it names
    (True: ``meta``, False: ``"cuda"``); None lets each operator's inputs decide. It is the
    running call's, so each thread has its own: a thread pool loading a checkpoint moves one
    tensor to the CPU while another moves one to the device.
    """

    def __init__(self) -> None:
        self.keys: set[int] = set()
        self._call = threading.local()

    @property
    def placing(self) -> bool | None:
        """Where the call running now in this thread puts its outputs."""
        placing: bool | None = getattr(self._call, "placing", None)
        return placing

    @placing.setter
    def placing(self, placing: bool | None) -> None:
        self._call.placing = placing

    def holds(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is a view of a ghost storage, or a ``torch.func`` transform's
        wrapper of one."""
        return bool(self.keys) and _storage_key(tensor) in self.keys

    def among(self, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
        """Whether an operator's tensor inputs include a ghost (its outputs are ghosts then)."""
        keys = self.keys
        for value in (*args, *(kwargs or {}).values()):
            if isinstance(value, (list, tuple)):
                for item in value:
                    if isinstance(item, torch.Tensor) and _storage_key(item) in keys:
                        return True
            elif isinstance(value, torch.Tensor) and _storage_key(value) in keys:
                return True
        return False

    def add(self, storage: Any) -> None:
        """``storage`` is a ghost for its lifetime."""
        key = storage._cdata
        self.keys.add(key)
        weakref.finalize(storage, self.keys.discard, key)

    def placed(self, placing: bool, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``func`` run with its outputs placed as the device it names says."""
        outer, self.placing = self.placing, placing
        try:
            return func(*args, **kwargs)
        finally:
            self.placing = outer


def _to_host(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a ``.to(...)`` call copies to the CPU: a device named, or a host tensor whose
    device and dtype it takes (``.to(other)``)."""
    for found in (*args[1:], kwargs.get("device")):
        if isinstance(found, str) and found.split(":")[0] == "cpu":
            return True
        if isinstance(found, torch.device) and found.type == "cpu":
            return True
        if isinstance(found, torch.Tensor) and found.device.type == "cpu":
            return True
    return False


_SPECIAL_KWARGS = frozenset(("device", "pin_memory", "generator"))
"""Arguments :class:`DeviceMode` reads in any call: where a call names one, it takes the long
way."""
_NO_CAST = (None, False)
""":meth:`~memforensics.plan.choices.Autocast.library` of an operator autocast leaves alone."""
_KEPT_FUNCTIONS = (
    types.BuiltinFunctionType,
    types.MethodWrapperType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.GetSetDescriptorType,
    torch._ops.OpOverload,
    torch._ops.OpOverloadPacket,
)


_LASTING = (
    types.ModuleType,
    type,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    property,
)
"""What a function remembered may be bound to: a module, a class, or a class's attribute (a
property's getter, ``Tensor.shape.__get__``), none of which holds the script's data."""


def _kept(func: Any) -> bool:
    """Whether :class:`DeviceMode` may remember its verdict on ``func``: one of torch's own
    functions, methods, property getters or operators, which live for the run and hold nothing
    of the script's. Not a method bound to an object (a tensor, an autograd node holding its
    saved tensors: remembering it would keep the object alive), nor a script's function, whose
    defaults may hold a tensor."""
    kind = type(func)
    if kind is types.FunctionType:
        return str(getattr(func, "__module__", "")).startswith("torch.")
    bound = getattr(func, "__self__", None)
    return kind in _KEPT_FUNCTIONS and (bound is None or isinstance(bound, _LASTING))


_PLAIN_LIMIT = 1 << 14


class DeviceMode(TorchFunctionMode):  # type: ignore[misc]  # torch is untyped here
    """Sends ``"cuda"`` to ``meta`` and re-makes CUDA's own choices above the dispatcher."""

    def __init__(
        self,
        notes: Notes,
        capability: tuple[int, int],
        autocast: choices.Autocast,
        ghosts: Ghosts | None = None,
        reads: values.Reads | None = None,
        deferred: Deferred | None = None,
    ) -> None:
        super().__init__()
        self.notes = notes
        self.reads = reads if reads is not None else values.Reads(notes)
        self.capability = capability
        self.autocast = autocast
        self.ghosts = ghosts if ghosts is not None else Ghosts()
        self.deferred = deferred if deferred is not None else Deferred(notes, enabled=False)
        self._to = torch.Tensor.to
        self._pin = (torch.Tensor.pin_memory, torch.Tensor.is_pinned)
        self._cast = autocast.names | autocast_inner.RESTATED.keys() | autocast_inner.ENTERED.keys()
        self._constructors = _default._device_constructors()
        self._device_of = torch.Tensor.device.__get__
        self._reads: dict[Any, Callable[..., Any]] = {
            torch.Tensor.item: self.reads.item,
            torch.Tensor.tolist: self.reads.tolist,
            torch.Tensor.__repr__: self.reads.text,
            torch.Tensor.__str__: self.reads.text,
            torch.Tensor.__format__: self.reads.formatted,
            torch.Tensor.cpu: self.reads.to_host,
            torch.Tensor.numpy: self.reads.to_numpy,
            self._device_of: self._device_of,  # meta's own, but not GHOST_DEVICE
            torch.Tensor.new: functools.partial(sparse.new, torch.Tensor.new),
        }
        """What a stand-in answers in place of its ``meta`` self (a ghost answers as ``meta``)."""
        self._moves: dict[Any, Callable[..., Any]] = {
            torch.Tensor.to: self._move,
            torch.Tensor.cuda: self._to_device,
            torch.device: _made_device,
            _PARSE_TO: self._parse_to,
            torch.tensor: functools.partial(self._from_data, torch.tensor),
            torch.as_tensor: functools.partial(self._from_data, torch.as_tensor),
        }
        """Calls that name where a tensor goes: ``(args, kwargs, placing)``."""
        self._raw_reads = frozenset(
            (
                torch.Tensor.tolist,
                torch.Tensor.numpy,
                torch.Tensor.__array__,
                torch.Tensor.__dlpack__,
                torch.Tensor.__reduce_ex__,
            )
        )
        """Reads of a CPU tensor's memory that no operator sees: a deferred tensor is
        materialised first."""
        self._kernels: dict[str, Callable[..., Any]] = {
            attention.SDPA_NAME: functools.partial(attention.attention, capability),
            ctc.NAME: functools.partial(ctc.loss, self.reads.known, notes),
            dropout.NAME: dropout.dropout,
            rnn_cells.LSTM_NAME: rnn_cells.lstm_cell,
            rnn_cells.GRU_NAME: rnn_cells.gru_cell,
            inplace.LINEAR_NAME: inplace.linear,
            assigned.NAME: assigned.setitem,
        }
        """Functions whose CUDA kernels the plan follows itself, by name, where a stand-in
        takes part: what CUDA chooses and allocates differs from the CPU build's path."""
        self._choosing: dict[str, Callable[..., Any]] = {
            **dict.fromkeys(half_softmax.NAMES, half_softmax.run),
            **dict.fromkeys(batch_norm.NAMES, batch_norm.run),
        }
        """Functions, by name, whose CUDA path the plan follows for some inputs only, each with
        what runs it given the function itself (:func:`~memforensics.plan.half_softmax.run`,
        :func:`~memforensics.plan.batch_norm.run`)."""
        self._plain: dict[Any, bool] = {}
        """Whether each function seen is passed on as it is (:meth:`_passed_through`)."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if not kwargs or _SPECIAL_KWARGS.isdisjoint(kwargs):
            plain = self._plain.get(func)
            if plain is None:
                plain = self._passed_through(func)
            if plain:
                return func(*args, **(kwargs or {}))
        return self._handled(func, args, kwargs or {})

    def _handled(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """``func`` as CUDA would run it, where this mode does more than pass it on."""
        placing = None
        current = _default.CURRENT_DEVICE  # set_default_device's, which this mode sits above
        if current is not None and kwargs.get("device") is None and func in self._constructors:
            kwargs["device"] = current
        if kwargs.get("pin_memory"):
            kwargs["pin_memory"] = (
                False  # pinned host memory is not modelled; the CPU build has none
            )
        if "device" in kwargs and not _faking():
            placing = _named(kwargs["device"])
            named = kwargs["device"]  # ``_parse_to`` reads it as named, as a positional one
            kwargs["device"] = named if func is _PARSE_TO else _on_meta(named)
        self._generator_matches(placing, args, kwargs)
        mover = self._moves.get(func)
        if mover is not None:
            return mover(args, kwargs, placing)
        if self.deferred.steps and func in self._raw_reads and isinstance(args[0], torch.Tensor):
            self.deferred.materialise(args[0])
        read = self._reads.get(func)
        if read is not None and args and isinstance(args[0], torch.Tensor) and args[0].is_meta:
            if not self.ghosts.holds(args[0]):
                return read(*args, **kwargs)
            if read is self._device_of:
                return GHOST_DEVICE
        name = getattr(func, "__name__", "")
        if name in self._cast:
            func, args, kwargs = self._autocast(func, name, args, kwargs)
        elif func in self._pin:
            return args[0] if func is self._pin[0] else False
        kernel = self._kernel(func, name)
        if kernel is not None and _any_meta(args, kwargs) and not _takes_functions(args, kwargs):
            return kernel(*args, **kwargs)
        if placing is None:
            return func(*args, **kwargs)
        return self.ghosts.placed(placing, func, *args, **kwargs)

    def _passed_through(self, func: Any) -> bool:
        """Whether this mode passes ``func`` on as it is wherever its call names no device,
        pinning or generator: none of the calls it answers, moves, reads, casts or runs a
        kernel of its own for. Looked up once per function (a tensor's property read, an
        ``aten`` operator called inside the dispatch mode: most of what reaches this mode),
        and remembered where the function is one of torch's own (:func:`_kept`)."""
        name = getattr(func, "__name__", "")
        plain = (
            func not in self._moves
            and func not in self._reads
            and func not in self._raw_reads
            and func not in self._pin
            and func not in self._constructors
            and name not in self._cast
            and name not in self._kernels
            and name not in self._choosing
            and (type(func) not in choices.OPERATORS or self.autocast.library(func) == _NO_CAST)
        )
        if _kept(func):
            if len(self._plain) >= _PLAIN_LIMIT:
                self._plain.clear()
            self._plain[func] = plain
        return plain

    def _generator_matches(
        self, placing: bool | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """Refuse a draw whose generator is another device's, as every CUDA and CPU kernel
        does (``check_generator`` in ``ATen/core/Generator.h``): a CPU generator drawing on the
        planned device (a ``DataLoader``'s shuffle under ``set_default_device("cuda")``), or a
        CUDA generator drawing on the host. The draw is on the planned device where the call
        names it, else where a stand-in among its inputs is; the script's own ``meta`` tensors
        draw nothing."""
        generator = kwargs.get("generator")
        if generator is None or placing is True:
            return
        found = getattr(getattr(generator, "device", None), "type", None)
        if found not in ("cpu", "cuda"):
            return
        if placing is False:
            wanted = "cuda"
        elif "device" in kwargs:
            wanted = torch.device(kwargs["device"]).type
        else:
            inputs = [
                value
                for value in (*args, *kwargs.values())
                for value in (value if isinstance(value, (list, tuple)) else (value,))
                if isinstance(value, torch.Tensor)
            ]
            if not inputs:
                wanted = "cpu"
            elif any(t.is_meta and not self.ghosts.holds(t) for t in inputs):
                wanted = "cuda"
            elif any(t.is_meta for t in inputs):
                return
            else:
                wanted = "cpu"
        if found != wanted:
            raise RuntimeError(
                f"Expected a '{wanted}' device type for generator but found '{found}'"
            )

    def _kernel(self, func: Any, name: str) -> Callable[..., Any] | None:
        """What the plan runs in place of ``func`` where a stand-in takes part, if anything."""
        kernel = self._kernels.get(name)
        if kernel is None and name in self._choosing:
            return functools.partial(self._choosing[name], func)
        if kernel is None and type(func) in choices.OPERATORS:
            kernel = self._library(func)
        return kernel

    def _library(self, func: Any) -> Callable[..., Any] | None:
        """A library operator under ``autocast("cuda")`` as its own autocast kernel runs it
        (:data:`~memforensics.plan.choices.LIBRARY`), or run uncast where the plan does not
        know that kernel, said once; None outside autocast or for an operator without one."""
        if not torch.is_autocast_enabled("cuda"):
            return None
        back, unfollowed = self.autocast.library(func)
        if back is not None:
            return functools.partial(self.autocast.in_float32, func, back)
        if unfollowed:
            return functools.partial(self._uncast, func)
        return None

    def _uncast(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.notes.once("library autocast", choices.UNFOLLOWED)
        return func(*args, **kwargs)

    def _to_device(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], placing: bool | None
    ) -> torch.Tensor:
        """``Tensor.cuda``: a stand-in (a ghost has no data to copy)."""
        tensor = args[0]
        if self.ghosts.holds(tensor):
            raise NotImplementedError(_NO_DATA)
        rest = {k: v for k, v in kwargs.items() if k != "device"}
        return self.ghosts.placed(False, tensor.to, _META, **rest)

    def _from_data(
        self,
        make: Callable[..., torch.Tensor],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        placing: bool | None,
    ) -> Any:
        """``torch.tensor(data, device="cuda")``: made on the CPU and copied to the device, as
        CUDA does; made on ``meta`` directly, the copy would be invisible to the storage mode
        (no block, no values). Device tensors inside a list (``torch.tensor([loss_sum,
        count])``) are read, as torch reads each one's value to build the list's tensor. A
        stand-in made a tensor on the host (``torch.as_tensor(t, device="cpu")``) is read, as
        ``t.to("cpu")`` reads it."""
        if args and isinstance(args[0], (list, tuple)):
            args = (self._read_within(args[0]), *args[1:])
        if placing is None:
            first = args[0] if args else None
            if isinstance(first, torch.Tensor) and first.is_meta and kwargs.get("device"):
                to = {k: kwargs[k] for k in ("device", "dtype") if kwargs.get(k) is not None}
                return self._move((first,), to, None)
            return make(*args, **kwargs)
        if placing or (args and isinstance(args[0], torch.Tensor)):
            return self.ghosts.placed(placing, make, *args, **kwargs)
        rest = {k: v for k, v in kwargs.items() if k not in ("device", "requires_grad")}
        rest.pop("pin_memory", None)
        made = make(*args, device="cpu", **rest)
        out = self.ghosts.placed(False, made.to, _META)
        return out.requires_grad_() if kwargs.get("requires_grad") else out

    def _read_within(self, data: Any) -> Any:
        """``data``, a nested list, with each stand-in in it replaced by its values on the CPU
        (the values a read of it gives), in its own dtype."""
        if isinstance(data, (list, tuple)):
            if not any(isinstance(item, (torch.Tensor, list, tuple)) for item in data):
                return data  # numbers only: nothing to read, nothing to copy
            return type(data)(self._read_within(item) for item in data)
        if isinstance(data, torch.Tensor) and data.is_meta and not self.ghosts.holds(data):
            return self.reads.values(data).clone()
        return data

    def _parse_to(self, args: tuple[Any, ...], kwargs: dict[str, Any], placing: bool | None) -> Any:
        """``Module.to``'s reading of its arguments (and a ``Parameter`` subclass's own
        ``to``): the device named, positional or ``device=``, as the script named it (so
        bitsandbytes' ``Params4bit.cuda()``, which calls ``self.to(device="cuda")``, sees CUDA
        and quantizes); the script's own ``meta`` stays :data:`GHOST_DEVICE`, so the module's
        tensors go there as ghosts."""
        if args:
            args = (_as_device(args[0]), *args[1:])
        parsed = _PARSE_TO(*args, **kwargs)
        if placing or self._destination(args):
            return (GHOST_DEVICE, *parsed[1:])
        return parsed

    def read_device_by(self, getter: Callable[..., Any]) -> None:
        """Answer ``getter`` as ``Tensor.device`` itself: a replacement of the attribute's
        ``__get__``, which torch's function handling then passes here in its place."""
        self._reads[getter] = self._device_of
        self._plain.clear()

    def _move(self, args: tuple[Any, ...], kwargs: dict[str, Any], placing: bool | None) -> Any:
        """``Tensor.to``: to the host reads zeros; to ``"cuda"`` a stand-in; to ``meta`` a
        ghost, copied off the planned device as PyTorch copies it."""
        tensor = args[0]
        if placing is None:
            placing = self._destination(args[1:])
        if tensor.is_meta and not self.ghosts.holds(tensor):
            if _to_host(args, kwargs):
                moved = self.reads.to_host(tensor).to(*args[1:], **kwargs)
                return self.reads.copied_out(tensor, moved)
            if placing is True and len(args) < 5 and "copy" not in kwargs:
                kwargs["copy"] = True
        elif placing is False and tensor.is_meta:
            raise NotImplementedError(_NO_DATA)
        args = (args[0], *(_on_meta(_as_device(a)) for a in args[1:2]), *args[2:])
        if placing is None:
            return self._to(*args, **kwargs)
        return self.ghosts.placed(placing, self._to, *args, **kwargs)

    def _destination(self, args: tuple[Any, ...]) -> bool | None:
        """Where ``.to``'s positional device (or another tensor's) puts the tensor: beside a
        stand-in (``mask.to(hidden)``) on the planned device, beside a ghost on ``meta``."""
        if not args:
            return None
        first = args[0]
        if isinstance(first, torch.Tensor):
            return self.ghosts.holds(first) if first.is_meta else None
        return _named(first)

    def _call(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``func`` as this mode runs a script's call of it (an inner function of
        :mod:`~memforensics.plan.autocast_inner`'s composites)."""
        return self._handled(func, args, kwargs)

    def _entered(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``func`` (torch's own code, :func:`~memforensics.plan.autocast_inner.unchecked`)
        with this mode entered again for its length: torch's function handling left it while
        this mode handles ``func``, so each function ``func`` calls comes back here, on this
        thread, to be cast as CUDA's autocast casts it."""
        with self:
            return func(*args, **kwargs)

    def _autocast(
        self, func: Callable[..., Any], name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        """``func`` and its inputs as CUDA's autocast runs them: a composite whose casts sit in
        the functions it calls run as them (:mod:`~memforensics.plan.autocast_inner`), else
        its inputs cast, or its dtype set, by autocast's lists. One of torch's Python functions
        that the mode enters (``autocast_inner.ENTERED``) runs with it entered, autocast or
        not, so that the functions it calls reach the mode's own kernels."""
        restated = autocast_inner.restated(name, args, kwargs)
        if restated is not None and torch.is_autocast_enabled("cuda"):
            return functools.partial(restated, self._call), args, kwargs
        if autocast_inner.ENTERED.get(name) is func:
            return functools.partial(self._entered, autocast_inner.unchecked(func)), args, kwargs
        policy = self.autocast.policy(name, args, kwargs)
        if policy is None:
            return func, args, kwargs
        return func, *self.autocast.cast(policy, args, kwargs)


class StorageMode(EagerDispatchMode):
    """Every new storage on ``meta`` gets a block of the planned device for its lifetime."""

    def __init__(
        self,
        device: PlannedDevice,
        workspace_bytes: int,
        oom: type[Exception],
        notes: Notes,
        ghosts: Ghosts | None = None,
        reads: values.Reads | None = None,
        deferred: Deferred | None = None,
        autocast: choices.Autocast | None = None,
    ) -> None:
        super().__init__()
        self.notes = notes
        self.ghosts = ghosts if ghosts is not None else Ghosts()
        self.reads = reads if reads is not None else values.Reads(notes)
        self.deferred = deferred if deferred is not None else Deferred(notes, enabled=False)
        self.autocast = autocast
        """Autocast's casts of the operators a backward reaches inside an autocast region."""
        shapes = Shapes(notes, self.reads.known)
        self._answers = self._operator_answers(shapes)
        known = self.reads.known
        self._by_name: dict[str, Callable[..., Any]] = {
            nms.NAME: functools.partial(nms.forward, self, known, notes),
            gemm_4bit.NAME: functools.partial(gemm_4bit.forward, self),
            **dict.fromkeys(distributed.RETURN_THEIR_INPUT, distributed.returned_input),
            **dict.fromkeys(distributed.COALESCED, distributed.coalesced_work),
        }
        """Answers for libraries' operators, which exist only once the script imports the
        library: found by the operator's qualified name the first time it is seen."""
        self._unanswered: set[Any] = set()
        self.device = device
        self.communicators: distributed.Communicators | None = None
        """The rank's NCCL communicators, formed at their groups' first collectives: set by
        the distributed emulation where ``torch.distributed`` is available."""
        self.workspace_bytes = workspace_bytes
        self.capability = device.spec.capability
        self._oom = oom
        self._live: dict[int, Any] = {}  # storage id -> (block, nbytes)
        self.staged = True
        """Whether reductions run as ATen's CUDA kernels, with their staging buffers (not in a
        compiled graph, where Inductor's kernels reduce)."""
        self._workspaces: dict[object, Any] = {}
        self._handles = handles.HandlePool()
        """cuBLAS's handles, which key its workspaces with the stream."""
        self._lt_handles = handles.HandlePool()
        self.lt_workspace: scratch.LtWorkspace | None = None
        """cuBLASLt's own workspace, where it does not share cuBLAS's."""
        self._lt_workspaces: dict[object, Any] = {}
        self.kernel_scratch = kernel_scratch.KernelScratch(
            self.malloc, self.device.free, self.capability, shapes.inner_nonzeros
        )
        """Fused attention kernels' and ``_foreach_norm``'s own scratch."""
        ghosts = self.ghosts
        self._answers.update(
            unique.Unique(
                self,
                self.malloc,
                self.device.free,
                self.capability,
                lambda t: ghosts.placing is not True and not ghosts.holds(t),
            ).answers(shapes)
        )
        self._composite: dict[Any, bool] = {}
        self._kernels: dict[Any, Any] = {}
        self._meta_outputs = meta_outputs.MetaOutputs()

    def _operator_answers(self, shapes: Shapes) -> dict[Any, Callable[..., Any]]:
        """The operators the plan answers itself, in place of their ``meta`` kernels: those
        whose output shape or values the script's data decides, and those whose CUDA kernels
        make what ``meta`` does not."""
        notes, known = self.notes, self.reads.known
        answers: dict[Any, Callable[..., Any]] = {
            torch.ops.aten._local_scalar_dense.default: self.reads.scalar,
            torch.ops.aten.nonzero.default: shapes.nonzero,
            torch.ops.aten.masked_select.default: shapes.masked_select,
            torch.ops.aten.bincount.default: shapes.bincount,
            _INDEX: shapes.index,
            torch.ops.aten.equal.default: self.reads.equal,
            torch.ops.aten.allclose.default: self._allclose,
        }
        for loss in _CLASS_LOSSES:
            answers[loss] = functools.partial(self.reads.loss, loss)
        for overload in (torch.ops.aten._ctc_loss.default, torch.ops.aten._ctc_loss.Tensor):
            answers[overload] = functools.partial(ctc.forward, self, known, notes)
        for overload in (
            torch.ops.aten._ctc_loss_backward.default,
            torch.ops.aten._ctc_loss_backward.Tensor,
        ):
            answers[overload] = functools.partial(ctc.backward, self, known, notes)
        answers[_LOGSUMEXP] = functools.partial(logsumexp.forward, self, _LOGSUMEXP)
        answers[repeat_interleave.OPERATOR] = functools.partial(repeat_interleave.indices, self)
        for loss in reduced_losses.OPERATORS:
            answers[loss] = functools.partial(reduced_losses.reduced, self, loss)
        answers[torch.ops.aten.native_layer_norm.default] = fused_norms.layer_norm
        answers[torch.ops.aten._weight_norm_interface.default] = fused_norms.weight_norm
        answers[log_sigmoid.OPERATOR] = log_sigmoid.forward
        answers[rnn_cells.GRU_FORWARD] = functools.partial(rnn_cells.gru_forward, self)
        answers[rnn_cells.GRU_BACKWARD] = functools.partial(rnn_cells.gru_backward, self)
        for overload in host_fill.BY_NUMBER:
            answers[overload] = functools.partial(host_fill.fill, overload)
        answers.update(dict.fromkeys(samples.DRAWN_LIKE, samples.drawn_like))
        answers.update(sparse.Sparse(notes, known).answers())
        answers.update(sparse.Product(self, notes, known).answers())
        if grouped.OPERATOR is not None:
            answers[grouped.OPERATOR.default] = grouped.grouped_mm
        if int4pack.OPERATOR is not None:
            answers[int4pack.OPERATOR.default] = int4pack.weight_int4pack_mm
        for shaping in (torch.ops.aten.t.default, torch.ops.aten.transpose.int):
            answers[shaping] = functools.partial(sparse.transpose, self, shaping)
        return answers

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if traced.tracing():
            return traced.run(
                self, func, args, kwargs, lambda: self.__torch_dispatch__(func, types, args, kwargs)
            )
        if not _profiling() or getattr(_QUIET, "on", False):
            return self._dispatch(func, args, kwargs)
        # a profiler records the operator the script called, not the plan's work under it
        _QUIET.on = True
        _record_functions(False)
        try:
            return self._dispatch(func, args, kwargs)
        finally:
            _record_functions(True)
            _QUIET.on = False

    def _dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
        """An operator on the planned device, as its CUDA kernel runs it."""
        args, kwargs = wrapped_numbers.as_tensors(func, args, kwargs)
        if func is _COPY and self._from_device(args):
            self.reads.copied_out(args[1], args[0])
            args = (args[0], self.reads.values(args[1]), *args[2:])  # read, as CUDA copies it
        if _any_wrapper(args, kwargs):
            return NotImplemented
        if _faking():
            return func(*args, **(kwargs or {}))  # the fake mode's tensor, holding nothing
        if kwargs and _names_cuda(kwargs.get("device")):
            kwargs = {**kwargs, "device": _META}  # named where the function mode was off
        deferred = self.deferred
        if (func in FACTORIES or deferred.steps) and (
            made := deferred.dispatch(func, args, kwargs)
        ) is not RUN:
            return made  # a deferred CPU tensor made, or written into
        out = self._in_parts(func, args, kwargs or {})
        if out is not NotImplemented:
            return out
        node = _current_node()
        step = (node._sequence_nr(), node.name()) if node is not None else None
        if step is not None and self.staged and self.autocast is not None:
            func, args, kwargs = self.autocast.operator_cast(
                func, args, kwargs or {}, self._converted
            )
        reused = None
        if step is not None:
            if func is _ADD and not kwargs:
                reused = self._reusable(args, step, earlier=True)
            elif inplace.in_place(func, step[1]):
                reused = self._reusable(args, step, earlier=False)
        self.device.backward = step is not None
        copied = self.kernel_scratch.before(func, args, kwargs or {})
        out = self._run(func, args, kwargs or {})
        self.device.backward = step is not None  # an answer's own operators may have set it
        ghosts = self.ghosts
        haunted = ghosts.keys or ghosts.placing is not None or func in _SET_STORAGE
        if haunted and self._haunt(out, args, kwargs):
            return out
        self._track_outputs(_in_made_order(func, out), step, reused)
        self.reads.made(func, args, kwargs or {}, out)
        self._scratch(func, args, kwargs or {}, out, node=step[1] if step else None)
        for block in reversed(copied):
            self.device.free(block)
        return out

    def _converted(self, tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``tensor`` cast to ``dtype`` as an operator of its own (autocast's ``.to()``), its
        copy placed on the planned device as any other's."""
        out: torch.Tensor = self._dispatch(_TO_COPY, (tensor,), {"dtype": dtype})
        return out

    def _scratch(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        *,
        node: str | None,
    ) -> None:
        """What CUDA allocates for ``func`` beside its output: the copies of operands cuBLAS
        cannot read as they lie (:mod:`~memforensics.plan.operands`) and the converted input
        of a cumulative operator (:mod:`~memforensics.plan.cumulative`), held while cuBLAS's and
        cuBLASLt's workspaces for a product are taken; a reduction's staging buffer; a fused
        attention kernel's own scratch, an accumulating ``index_put_``'s sort, an embedding's
        backward's and a long row's (:mod:`~memforensics.plan.kernel_scratch`). ``node``: the
        autograd node whose backward runs ``func``, if any."""
        backward = node is not None
        role = _SCRATCH_ROLES.get(func)
        if role is None:
            return
        made = isinstance(out, torch.Tensor) and out.is_meta
        if (
            made
            and role == _PRODUCT
            and any(sparse.parts(arg) for arg in args if isinstance(arg, torch.Tensor))
        ):
            return  # cuSPARSE's products take neither cuBLAS's workspace nor cuBLASLt's
        copies = (
            [
                self.malloc(n)
                for n in (*operands.copied(func, args, out), *cumulative.copied(func, args, out))
            ]
            if made
            else []
        )
        if role == _PRODUCT and made:
            self._workspace(backward)
        if self.lt_workspace is not None and _reaches_lt(func, args, kwargs, out):
            self._lt(backward, self.lt_workspace)
        elif role == _REDUCTION and self.staged and _made_first(out):
            self._staging(func, args, kwargs, out)
        elif role == _KERNEL:
            self.kernel_scratch.after(func, args, kwargs)
        elif role == _INDEX_PUT:
            self.kernel_scratch.index_put(args, kwargs, node)
        elif role == _EMBEDDING_BACKWARD:
            self.kernel_scratch.embedding.after(func, args, kwargs)
        elif role == _SORT:
            self.kernel_scratch.sort(func, args, kwargs)
        elif role == _SCAN and self.staged:  # Inductor scans in its own kernels
            self.kernel_scratch.scan(args, kwargs, out)
        for block in reversed(copies):
            self.device.free(block)

    def _run(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``func`` on stand-ins: a host sparse tensor's copy onto the device, an answer in
        place of a ``meta`` kernel, or the kernel itself."""
        if func is _TO_COPY and (moved := sparse.copied_onto_device(args[0], kwargs)) is not None:
            return moved
        if self.communicators is not None:
            self.communicators.ran(func, args, kwargs)
        answer = self._answer(func)
        if answer is not None and _on_standins(args[0]):
            out = answer(*args, **kwargs)
            if out is not NotImplemented:  # an answer for some layouts leaves the rest
                return out
        return self._call(func, args, kwargs)

    def _allclose(
        self,
        tensor: torch.Tensor,
        other: torch.Tensor,
        rtol: float = 1e-05,
        atol: float = 1e-08,
        equal_nan: bool = False,
    ) -> bool:
        """``torch.allclose`` on the device: ``isclose`` and its ``all`` made as CUDA makes
        them (``at::allclose``), then the flag read (:meth:`~values.Reads.allclose`)."""
        with self:
            torch.ops.aten.isclose.default(tensor, other, rtol, atol, equal_nan).all()
        return self.reads.allclose(tensor, other, rtol, atol, equal_nan)

    def _answer(self, func: Any) -> Callable[..., Any] | None:
        """What answers ``func`` on stand-ins in place of its ``meta`` kernel, if anything; a
        library's operator (``torchvision::nms``) is looked up by name once, its answer kept
        for its next call, and an operator with none remembered as such."""
        answer = self._answers.get(func)
        if answer is not None or func in self._unanswered:
            return answer
        name = func.name() if hasattr(func, "name") else ""
        answer = self._by_name.get(name)
        if name.startswith(native_library.NAMESPACE):
            native_library.operator_ran(self.notes)
        if answer is None:
            self._unanswered.add(func)
        else:
            self._answers[func] = answer
        return answer

    def _call(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``func`` run on ``meta``, or what its kernel handed back for the same shapes before
        (:mod:`~memforensics.plan.meta_outputs`: outputs made again, an in-place call's
        input); a strided nested tensor, which cannot be there, is out of scope in one line."""
        key = self._meta_outputs.key(func, args, kwargs)
        if key is not None:
            made = self._meta_outputs.made(key, args)
            if made is not meta_outputs.UNSEEN:
                return made
        try:
            out = func(*args, **kwargs)
        except RuntimeError as exc:
            if _NESTED_REFUSED in str(exc):
                raise OutOfScope(NESTED) from None
            raise
        if key is not None:
            self._meta_outputs.keep(key, args, kwargs, out)
        return out

    def _from_device(self, args: tuple[Any, ...]) -> bool:
        """Whether ``copy_`` writes a stand-in's values into a host tensor (``load_state_dict``
        of a checkpoint loaded onto the device into a model still on the CPU): a read of the
        stand-in, whose values the host tensor then holds."""
        source = args[1]
        return (
            isinstance(source, torch.Tensor)
            and source.is_meta
            and not args[0].is_meta
            and not self.ghosts.holds(source)
        )

    def _staging(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """What a reduction takes beside its outputs (:mod:`~memforensics.plan.reductions`):
        the copy of its input it reads, if any; then, where it splits across thread blocks, a
        staging buffer and its semaphores for the kernel's length, freed in the reverse order
        (``gpu_reduce_kernel``); the copy last."""
        found = reductions.staged(func, args, kwargs, out, self.capability)
        if found is not None:
            reductions.take(found, self.malloc, self.device.free)

    def _in_parts(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``func`` run as the operators it is made of, each through this mode: a composite's
        decomposition, a custom operator's Python kernel (:meth:`_python_kernel`); else
        ``NotImplemented``."""
        if self._decomposes(func) and (_any_meta(args, kwargs) or _onto_meta(args, kwargs)):
            with self, _as_called():  # its parts come back through this mode, as autograd's
                return func._op_dk(_COMPOSITE, *args, **kwargs)
        kernel = self._python_kernel(func)
        if kernel is None or not _any_meta(args, kwargs):
            return NotImplemented
        try:
            with self:  # what the kernel allocates comes back through this mode, as on CUDA
                return kernel(*args, **kwargs)
        except (torch.cuda.OutOfMemoryError, OutOfScope):
            raise
        except Exception:  # noqa: BLE001 - it calls what only runs on a GPU (an extension)
            self._kernels[func] = None  # its fake implementation answers, now and after
            return NotImplemented

    def _python_kernel(self, func: Any) -> Callable[..., Any] | None:
        """The Python implementation CUDA runs for a ``torch.library.custom_op`` (its CUDA
        kernel, else the one for every device), whose own tensors take the caching allocator's
        blocks on a GPU, where its fake implementation makes only the outputs; None for
        every other operator, and for one whose implementation failed on stand-ins (it calls a
        compiled extension), which its fake implementation answers."""
        found = self._kernels.get(func, self)
        if found is self:
            from torch._library.custom_ops import OPDEFS

            opdef = OPDEFS.get(str(getattr(func, "_name", "")))
            fns = {} if opdef is None else opdef._backend_fns
            found = self._kernels[func] = fns.get("cuda", fns.get(None))
        return found  # type: ignore[no-any-return]

    def _decomposes(self, func: Any) -> bool:
        """Whether ``func`` is one of PyTorch's composite operators (``linear``, ``matmul``,
        ``einsum``): with autograd on, autograd's key runs their implementation and this mode
        sees the parts; with it off (``inference_mode``) the composite arrives here whole,
        and its parts (the matrix multiplies, the copies they make) must still reach the
        model, as they reach CUDA's allocator. Composite means the dispatcher's own C++
        kernel, the one :meth:`_in_parts` runs: a decomposition torch registers in Python for
        tracing (``torch._decomp``) is not what eager CUDA runs. ``upsample_nearest2d`` has
        only that, beside its CUDA kernel; ``upsample_bilinear2d.vec``'s C++ composite works
        out the output size and calls ``upsample_bilinear2d``, whose kernel makes the output
        alone, where the Python one gathers four corners and blends them, six more
        output-sized tensors."""
        found = self._composite.get(func)
        if found is None:
            try:
                composite = torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), _COMPOSITE)
            except RuntimeError:  # TorchScript's own operators (prim::device) have no kernels
                composite = False
            found = self._composite[func] = composite and func not in own_kernels.OWN_KERNELS
        return found

    def _track_outputs(self, out: Any, step: object, reused: Any) -> None:
        if isinstance(out, torch.Tensor):
            if _is_wrapper(out):
                self._track_inner(out, step)
            elif out.is_meta:
                if out.layout != torch.strided:
                    self._track_sparse(out, step)
                else:
                    self._track(out, step, reused)
        elif isinstance(out, (tuple, list)):
            for item in out:
                if isinstance(item, torch.Tensor):
                    self._track_outputs(item, step, None)

    def _track_sparse(self, tensor: torch.Tensor, step: object) -> None:
        """A sparse tensor (a sparse embedding's gradient): it has no storage of its own; its
        indices and values hold the memory, as on CUDA."""
        for part in sparse.parts(tensor):
            if part.is_meta:
                self._track(part, step, None)

    def _track_inner(self, wrapper: torch.Tensor, step: object) -> None:
        """A tensor subclass that wraps others, made by an operator on plain tensors (a jagged
        nested tensor viewed over its values): its own storage holds nothing on a GPU; the
        tensors it wraps hold the memory, so their storages are taken here. One that is the
        script's own ``meta`` stays a ghost, with no block.
        Operators on such a subclass go to the subclass itself (:func:`_any_wrapper`)."""
        names, _ = wrapper.__tensor_flatten__()  # type: ignore[attr-defined,unused-ignore]
        for name in names:
            inner = getattr(wrapper, name)
            if isinstance(inner, torch.Tensor) and not self.ghosts.holds(inner):
                self._track_outputs(inner, step, None)

    def _haunt(self, out: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
        """Whether the operator's outputs are the script's own ``meta`` tensors (the device its
        call names says so, or one of its inputs is one); their new storages become ghosts,
        with no block."""
        ghost = self.ghosts.placing
        if ghost is None:
            ghost = self.ghosts.among(args, kwargs) or self._onto_own_meta(args)
        if not ghost:
            return False
        for item in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(item, torch.Tensor) and item.is_meta:
                storage = item.untyped_storage()
                key = storage._cdata
                if key not in self._live and key not in self.ghosts.keys:
                    self.ghosts.add(storage)
        return True

    def _onto_own_meta(self, args: tuple[Any, ...]) -> bool:
        """Whether ``set_`` puts a tensor onto a ``meta`` storage the plan never made: one made
        outside any operator (``torch.load(map_location="meta")``'s, Lightning's lazy loader's
        ``TypedStorage(device="meta")``) is the script's own ``meta``, with no memory on a GPU
        either. A stand-in's storage is known (a checkpoint loaded onto CUDA gets its storages
        by moving host ones to the device)."""
        source = args[1] if len(args) > 1 else None
        return (
            isinstance(source, torch.UntypedStorage)
            and source.device.type == "meta"
            and source._cdata not in self._live
        )

    def _reusable(self, args: tuple[Any, ...], step: object, *, earlier: bool) -> Any:
        """The storage a backward operation writes into in place on CUDA, where the CPU build
        under a dispatch mode works out of place (autograd's "is it a tensor subclass?" tests).

        ``earlier``: autograd adding a second gradient into the first, which it does in place
        when it holds the only reference to the first (``can_accumulate_inplace``'s
        ``use_count() == 1``: not when a hook of the script kept it), produced by an earlier
        node, and grad mode is off. A backward that builds a graph of its own
        (``create_graph=True``, as for forces taken from an energy) runs with grad mode on, and
        ``InputBuffer::accumulate`` (``input_buffer.cpp``) then sums out of place on every
        device, so the first gradient, the second and their sum are all live at once. Otherwise
        a backward formula filling a buffer it has just made (``new_zeros().scatter_add_()``),
        in place whatever the mode.
        """
        if len(args) < 2 or (earlier and torch.is_grad_enabled()):
            return None
        first, second = args[0], args[1]
        if not isinstance(first, torch.Tensor) or not first.is_meta:
            return None
        if earlier and not (
            isinstance(second, torch.Tensor)
            and first.shape == second.shape
            and first.dtype == second.dtype
            and sys.getrefcount(first) <= _AUTOGRAD_ONLY
        ):
            return None
        if not inplace.dense(first):
            return None
        storage = first.untyped_storage()
        held = self._live.get(storage._cdata)
        if held is None or held[0] is None or (held[2] == step) == earlier:
            return None
        if torch._C._storage_Use_Count(storage._cdata) != _ONLY_OWNER:
            return None
        return storage._cdata

    def _track(self, tensor: torch.Tensor, step: object, reused: Any) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata
        nbytes = storage.nbytes()
        held = self._live.get(key)
        if held is not None:
            if held[1] == nbytes:
                return
            self.device.free(held[0])  # resized: CUDA reallocates
        if nbytes == 0:
            self.device.initialize()  # an empty tensor on CUDA initializes it all the same
            self._live[key] = (None, 0, step)
            when_released(storage, self._live.pop, key, None)
            return
        old = self._live.get(reused) if reused is not None else None
        if old is not None and old[1] == nbytes:
            self._live[reused] = (None, old[1], old[2])  # its block now belongs to the sum
            block = old[0]
        else:
            block = self.malloc(nbytes)
        self._live[key] = (block, nbytes, step)
        if held is None:
            when_released(storage, self._release, key)

    def outside_allocator(self, tensor: torch.Tensor) -> None:
        """``tensor``'s storage is on the device in memory the allocator does not hand out
        (a CUDA graph replay's output, in its pool): known, so its views take no block, but
        holding none."""
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key not in self._live:
            self._live[key] = (None, storage.nbytes(), None)
            when_released(storage, self._live.pop, key, None)

    def free_block(self, key: int) -> None:
        """The block of the storage ``key`` (its ``_cdata``) freed while the storage lives (a
        CUDA graph tree freeing a generation's outputs the script still holds): the storage
        stays known, holding none."""
        held = self._live.get(key)
        if held is not None and held[0] is not None:
            self.device.free(held[0])
            self._live[key] = (None, held[1], held[2])

    def address(self, key: int) -> int | None:
        """Where the block of the storage ``key`` (its ``_cdata``) starts; 0 for an empty one,
        None for a storage that is not on the planned device."""
        held = self._live.get(key)
        if held is None:
            return None
        return int(held[0].address) if held[0] is not None else 0

    def resized(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``UntypedStorage.resize_``, which never reaches a dispatch mode: a storage on the
        planned device gives its block back at size 0 and takes a new one at its new size, as
        CUDA's does (FSDP frees and re-allocates its unsharded parameters so)."""

        def resize_(storage: Any, size: int) -> Any:
            out = original(storage, size)
            key = storage._cdata
            held = self._live.get(key)
            nbytes = storage.nbytes()
            if held is not None and held[1] != nbytes:
                if held[0] is not None:
                    self.device.free(held[0])
                self._live[key] = (None, 0, held[2])
                if nbytes:
                    self._live[key] = (self.malloc(nbytes), nbytes, held[2])
            return out

        return resize_

    def record_stream(self, tensor: torch.Tensor, stream: Any) -> None:
        """``Tensor.record_stream``: a stand-in's block is in use on ``stream`` too."""
        held = self._live.get(tensor.untyped_storage()._cdata) if tensor.is_meta else None
        if held is not None and held[0] is not None:
            self.device.record_stream(held[0], int(getattr(stream, "cuda_stream", 0) or 0))

    def written_into(self, made: torch.Tensor, source: torch.Tensor) -> None:
        """``made``, new and made with this mode aside, as a kernel's output written into a
        dying input's buffer: it takes the block of ``source``'s storage where that is of its
        size (``source`` then frees nothing), else a block of its own. A parameter (a leaf
        that requires grad) is never written into."""
        key = source.untyped_storage()._cdata
        held = self._live.get(key)
        if (
            held is None
            or held[0] is None
            or held[1] != made.untyped_storage().nbytes()
            or (source.is_leaf and source.requires_grad)
        ):
            key = None
        self._track(made, None, key)

    def keeps_block_of(self, made: torch.Tensor, source: torch.Tensor) -> None:
        """``made``, new and made with this mode aside, holds the block of ``source``'s storage
        whatever their sizes, and ``source`` then frees nothing: a kernel's output made at one
        size and resized smaller in place keeps its block (``resize_`` never shrinks a
        storage), where the stand-in that the script's values are kept on is the smaller one
        (:mod:`~memforensics.plan.reduced_losses`)."""
        key = source.untyped_storage()._cdata
        held = self._live.get(key)
        if held is None or held[0] is None:
            self._track(made, None, None)
            return
        self._live[key] = (None, held[1], held[2])
        storage = made.untyped_storage()
        self._live[storage._cdata] = (held[0], storage.nbytes(), held[2])
        when_released(storage, self._release, storage._cdata)

    def _release(self, key: int) -> None:
        held = self._live.pop(key, None)
        if held is not None and held[0] is not None:
            self.device.free(held[0])

    def malloc(self, nbytes: int, native: tuple[tuple[str, int, str], ...] = ()) -> Any:
        """A block of ``nbytes``; the predicted OOM, observers called, when none is left.
        ``native``: the native frames a GPU's trace shows under it (the device's ``malloc``)."""
        block = self.device.malloc(nbytes, self.device.stream, native)
        if block is None:
            message, observed = self.device.oom_report()
            for observer in self.device.observers():
                observer(*observed)
            raise self._oom(message)
        return block

    def clear_workspaces(self) -> None:
        """``torch._C._cuda_clearCublasWorkspaces()``: every stream's cuBLAS and cuBLASLt
        workspaces freed (``clearCublasWorkspaces`` clears both maps); the next product on a
        stream takes new ones."""
        blocks = [*self._workspaces.values(), *self._lt_workspaces.values()]
        self._workspaces.clear()
        self._lt_workspaces.clear()
        for block in blocks:
            self.device.free(block)

    def clear_stream_workspaces(self, stream: int) -> None:
        """``clearCublasWorkspacesForStream``: the cuBLAS and cuBLASLt workspaces of every
        handle on ``stream`` freed, as a CUDA graph's reset does for its capture stream."""
        for kept in (self._workspaces, self._lt_workspaces):
            for key in [key for key in kept if isinstance(key, tuple) and key[1] == stream]:
                self.device.free(kept.pop(key))

    @contextmanager
    def own_workspaces(self) -> Iterator[None]:
        """Inside, another process's cuBLAS handles (a worker process's): none of this
        process's workspaces serve it, and the ones it takes go with it."""
        kept = self._workspaces, self._handles, self._lt_workspaces, self._lt_handles
        self._workspaces, self._handles = {}, handles.HandlePool()
        self._lt_workspaces, self._lt_handles = {}, handles.HandlePool()
        try:
            yield
        finally:
            self._workspaces, self._handles, self._lt_workspaces, self._lt_handles = kept

    def thread_ended(self, thread: object) -> None:
        """A thread the script started has ended: its cuBLAS and cuBLASLt handles go back to
        their pools, for the next thread to take with the workspaces kept for them."""
        self._handles.release(thread)
        self._lt_handles.release(thread)

    def _workspace(self, backward: bool) -> None:
        """cuBLAS's workspace, one per handle and stream (``getCurrentCUDABlasHandle`` keys it
        so): a matrix multiply on a new stream, a CUDA graph's capture stream included, takes
        its own, and a thread its own handle's, reserved from the pool
        (:mod:`~memforensics.plan.handles`)."""
        thread: object = _BACKWARD if backward else threading.get_ident()
        key = (self._handles.reserve(thread), self.device.stream)
        if key not in self._workspaces and self.workspace_bytes:
            self._workspaces[key] = self.malloc(self.workspace_bytes, scratch.WORKSPACE_FRAMES)

    def _lt(self, backward: bool, lt: scratch.LtWorkspace) -> None:
        """cuBLASLt's own workspace for a call that reaches it: kept per handle and stream
        (``getCUDABlasLtWorkspace``), or, where torch gives each call its own, allocated and
        freed around the call."""
        if not lt.nbytes:
            return
        if not lt.kept:
            self.device.free(self.malloc(lt.nbytes))
            return
        thread: object = _BACKWARD if backward else threading.get_ident()
        key = (self._lt_handles.reserve(thread), self.device.stream)
        if key not in self._lt_workspaces:
            self._lt_workspaces[key] = self.malloc(lt.nbytes, scratch.LT_WORKSPACE_FRAMES)


def _reaches_lt(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> bool:
    """Whether ``addmm_out_cuda_impl`` sends this product to cuBLASLt (``useLtInterface``):
    a contiguous 1-D bias as long as the product's columns, ``beta`` 1, a contiguous 2-D
    result of a floating dtype, both of ``mat2``'s sizes above 1, and no
    ``DISABLE_ADDMM_CUDA_LT``."""
    if func in _LT_ALWAYS:
        return True
    if func not in _LT_BIAS or os.environ.get(_LT_DISABLED_ENV) == "1":
        return False
    if not (isinstance(out, torch.Tensor) and out.is_meta):
        return False
    bias, _, mat2 = args[:3]
    beta = kwargs.get("beta", 1)
    return (
        isinstance(bias, torch.Tensor)
        and bias.dim() == 1
        and beta == 1
        and out.dim() == 2
        and bias.shape[0] == mat2.shape[1]
        and bias.is_contiguous()
        and out.is_contiguous()
        and out.dtype in _LT_DTYPES
        and mat2.shape[0] > 1
        and mat2.shape[1] > 1
    )


def backward_under(mode: DeviceMode, original: Callable[..., Any]) -> Callable[..., Any]:
    """The autograd engine run with ``mode`` pushed: ``backward()`` is itself a function the
    mode handles, and torch pops a mode while it handles a call, so without this the Python that
    backward runs (hooks, a custom Function's backward, activation checkpointing's recompute)
    would run without the emulation: no autocast, a real "cuda" device. Each run counts as
    training for the values reads make up (:class:`~memforensics.plan.values.Reads`)."""
    from torch.overrides import _get_current_function_mode_stack

    def run_backward(*args: Any, **kwargs: Any) -> Any:
        mode.reads.backward()
        if mode in _get_current_function_mode_stack():
            return original(*args, **kwargs)
        with mode:
            return original(*args, **kwargs)

    return run_backward


def saved_hooks_under(mode: DeviceMode, original: Callable[..., Any]) -> Callable[..., Any]:
    """``saved_tensors_hooks``' pack and unpack hooks run with ``mode`` pushed. Autograd calls a
    pack hook from inside the operator whose output it saves, and torch pops a mode while it
    handles a call, so without this the hook's own calls (``save_on_cpu``'s pinned
    ``torch.empty``, an offloading hook's copy to the host on a side stream) would run without
    the emulation: a real "cuda" device, pinned memory the CPU build has none of. An unpack hook
    that backward runs already has the mode (:func:`backward_under`); pushing it twice is
    avoided. Traced hooks (both ``fx.GraphModule``), which AOTAutograd inlines into a compiled
    graph when it finds them on top of the stack, are pushed as they are, so it still does."""
    from torch.overrides import _get_current_function_mode_stack

    def under(hook: Callable[[Any], Any]) -> Callable[[Any], Any]:
        @functools.wraps(hook)
        def run(value: Any) -> Any:
            if mode in _get_current_function_mode_stack():
                return hook(value)
            with mode:
                return hook(value)

        return run

    def push(pack: Callable[[Any], Any], unpack: Callable[[Any], Any]) -> Any:
        if isinstance(pack, torch.fx.GraphModule) and isinstance(unpack, torch.fx.GraphModule):
            return original(pack, unpack)  # traced hooks AOTAutograd inlines: torch tells them so
        return original(under(pack), under(unpack))

    return push


def threads_under(
    functions: DeviceMode, storage: StorageMode, original: Callable[..., Any]
) -> Callable[..., Any]:
    """A thread's start with the emulation's two modes pushed: torch keeps its mode stacks per
    thread, so without this a thread the script starts (Hugging Face loads a checkpoint's
    tensors onto the device from a thread pool) would reach the CPU build's CUDA, which has
    none. What the script pushed itself stays its own thread's, as with torch on a GPU."""

    def bootstrap_inner(thread: threading.Thread) -> Any:
        try:
            with functions, storage:
                return original(thread)
        finally:
            storage.thread_ended(threading.get_ident())

    return bootstrap_inner


def modes(
    device: PlannedDevice,
    workspace_bytes: int,
    autocast: choices.Autocast,
    notes: Notes,
    *,
    defer: bool = True,
) -> tuple[DeviceMode, StorageMode]:
    """The function mode (pushed first) and the storage tracking under it, sharing one record
    of the script's own ``meta`` storages and one of the deferred CPU tensors (``defer``:
    large CPU tensors made while a module is built are deferred)."""
    device.skip_files(_MACHINERY)
    ghosts = Ghosts()
    reads = values.Reads(notes)
    deferred = Deferred(notes, enabled=defer)
    reads.known.unwritten = deferred.holds
    oom = torch.cuda.OutOfMemoryError
    storage = StorageMode(device, workspace_bytes, oom, notes, ghosts, reads, deferred, autocast)
    storage.lt_workspace = scratch.lt_workspace_for(device.spec.capability)
    functions = DeviceMode(notes, device.spec.capability, autocast, ghosts, reads, deferred)
    return functions, storage
