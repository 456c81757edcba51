"""``torch.compile`` in a plan: with Inductor (the default backend), the graphs Inductor would
compile, run unfused; with another backend, the code itself, eagerly.

What a compiled model keeps for its backward is Inductor's choice, not eager autograd's:
AOTAutograd traces forward and backward together with Inductor's decompositions, and
``min_cut_rematerialization_partition`` chooses what the forward saves (cheap pointwise results,
a SwiGLU's ``sigmoid(t)``, RMSNorm's intermediates, are recomputed in the backward instead). A
plan does the same: dynamo traces the compiled code on fake copies of the stand-ins, with the
emulation's modes set aside (dynamo declines to trace under a dispatch mode), AOTAutograd
partitions it as Inductor does, and the forward and backward graphs then run as FX modules
under the storage mode, each value freed after its last use, so every storage they make gets
its block, but the values Inductor computes inside its fused kernels
(:mod:`~memforensics.plan.fusion`); Inductor's own allocations while it compiles and
autotunes are not made.

autocast works in the dispatcher on CUDA tensors, so dynamo's trace on ``meta`` sees no casts:
each call of autocast's lists in dynamo's graph casts its inputs as CUDA's autocast does, in
the autocast state of the trace, before AOTAutograd traces it (:func:`_autocast_call`), and
each composite autocast has no CUDA kernel for (``cross_entropy_loss``) runs as the operators
it calls, each cast so (:func:`_restated_call`). And
while AOTAutograd traces, aten's composite operators with a Python ``meta`` kernel decompose
above autograd, as on CUDA (:func:`composites_on_meta`).

Attention runs as on a GPU: before AOTAutograd traces dynamo's graph, each
``scaled_dot_product_attention`` call becomes the plan's re-making of it
(:func:`~memforensics.plan.attention.attention`), so the trace holds the aten operator of the
kernel CUDA picks for the planned capability (flash, memory-efficient, cuDNN, or the math
composite), with that operator's own backward, where a trace on ``meta`` would take the math
path and its B·H·L·S scores. Inductor keeps the fused kernels as extern calls and its partition
saves their outputs (the output, the log-sum-exp, the philox seed and offset); so does this one.

Dropout needs no re-making in a graph: AOTAutograd's trace takes ``aten.dropout``'s Python
decomposition on any device (``native_dropout``, then ``rand_like(x) > p``), so the graph holds
what Inductor's holds, and the partition saves the one-byte mask (Inductor on the CPU saves the
same). Inductor draws the random numbers inside its fused kernel, from a seed: the unfused
``rand`` here, of the input's size and dtype, is one of the brief intermediates.

A module is compiled as ``torch.compile`` compiles it (:func:`_optimized_module`): in torch's
``OptimizedModule``, through the frame torch chooses, so a model of torch's own classes (whose
files dynamo skips) is traced from a frame outside them, as on a GPU.

Code dynamo cannot trace as one graph (a graph break: a ``print``, a ``.item()`` read) runs as
on a GPU, as several graphs with the code between them run eagerly: the compiled call runs with
the plan's modes in place, so that code's tensors take their blocks and its reads are the
plan's, and only dynamo's conversion of each frame (the compiled code's, each resume function
after a break) sets them aside (:meth:`Compiled._convert`); its guards are built for the state
the frame runs in, modes included (:func:`_guards_for_the_call`). A frame dynamo or AOTAutograd
cannot convert, or whose graph calls what the emulation re-makes above the dispatcher and a
graph cannot (CTC, ``flex_attention``), runs eagerly, said once, and stays so; where the script
asked for ``fullgraph=True`` (on a GPU a graph break is then an error), the whole call does.

The modes that add CUDA graphs (``reduce-overhead``, ``max-autotune``) compile the same
partition, and each call of a graph runs as the device's CUDA graph tree runs it: warmed up
or recorded into the tree's private pool, or replayed, allocating nothing
(:mod:`~memforensics.plan.graph_trees`). Inductor ``options`` are not followed, said once.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from memforensics.plan import (
    attention,
    autocast_inner,
    choices,
    ctc,
    flex,
    fusion,
    graph_trees,
    standins,
    values,
)
from memforensics.plan.values import INDUCTOR, Notes

if TYPE_CHECKING:
    from memforensics.plan.emulate import StorageMode

EAGER = (
    "torch.compile runs eagerly in a plan: a compiled graph's memory differs "
    "(fused kernels keep fewer intermediates)"
)
GRAPHS = (
    "torch.compile runs Inductor's forward and backward graphs unfused in a plan: the backward "
    "keeps what Inductor's partition keeps, what its fused kernels compute in registers takes "
    "no memory, and compiling's own allocations are not made"
)
_DEFAULT_MODES = (None, "default", "max-autotune-no-cudagraphs")
"""``mode``s that compile without CUDA graphs: a graph run as the partition's modules."""
_CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
"""``mode``s whose graphs Inductor also runs as CUDA graphs: the same partition, run as the
device's CUDA graph tree runs it (:mod:`~memforensics.plan.graph_trees`)."""
CUDA_GRAPHS = (
    "torch.compile's CUDA graphs (mode 'reduce-overhead' or 'max-autotune') run as CUDA graph "
    "trees do: each graph's first call warms up and its next is recorded, both in the graphs' "
    "private pool, and later calls replay, allocating nothing (their outputs are the pool's, "
    "uncounted); Inductor's autotuning is not run"
)
OPTIONS = (
    "torch.compile's Inductor options are not followed in a plan: the graphs run as with "
    "the defaults"
)
_REMADE = frozenset((ctc.NAME,))
"""Functions the emulation re-makes above the dispatcher, where ``meta`` would trace another
kernel than CUDA's (a CPU CTC), and a graph cannot call that re-making instead."""


_NO_TRITON = "torch.utils.flop_counter"
"""The logger that warns, as the partitioner imports it, that the CPU build has no Triton: a
fact of the host, not of the planned GPU (which has it)."""


@contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Logger ``name``'s warnings silenced while the block runs."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


_PACKAGE = f"{Path(__file__).parents[1]}{os.sep}"
"""memforensics's own files: its stand-ins, called by compiled code between graphs, run as
they are, never converted by dynamo (a GPU's torch functions are in dynamo's skipped files)."""

_TORCH_PRIVATE = r"torch\._"
"""Modules of torch's compiler stack (``torch._dynamo``, ``torch._functorch``, ...)."""


class Unmodelled(Exception):
    """A traced graph calls what the plan cannot run as Inductor would: run eagerly."""


@contextmanager
def modes_aside() -> Iterator[None]:
    """The function and dispatch mode stacks emptied for dynamo's trace, put back after."""
    from torch.utils._python_dispatch import _pop_mode, _push_mode

    functions = []
    while torch._C._len_torch_function_stack() > 0:
        functions.append(torch._C._pop_torch_function_stack())
    dispatch = []
    while torch._C._len_torch_dispatch_stack() > 0:
        dispatch.append(_pop_mode())
    try:
        yield
    finally:
        for mode in reversed(dispatch):
            _push_mode(mode)
        for mode in reversed(functions):
            torch._C._push_on_torch_function_stack(mode)


@contextmanager
def _guards_for_the_call() -> Iterator[None]:
    """dynamo's guards for a frame converted with the plan's modes aside (:func:`modes_aside`)
    built, and checked for a recompile's reasons, in the state the frame runs in, the modes in
    place: the torch-function mode stack the call had (dynamo records the stack at the trace,
    which it would find changed at every call, and convert again; checked with the stack
    aside, every recompile would name it as the guard that failed), and the thread's dispatch
    keys with the call's dispatch modes (a tensor's guard checks them: the storage mode adds
    ``Python``). Built and checked from that state, not under it: no mode runs meanwhile."""
    from torch._dynamo import convert_frame
    from torch._dynamo.convert_frame import DynamoOutput
    from torch.overrides import _get_current_function_mode_stack

    functions = list(_get_current_function_mode_stack())  # type: ignore[no-untyped-call, unused-ignore]
    included = torch._C._dispatch_tls_local_include_set()
    excluded = torch._C._dispatch_tls_local_exclude_set()
    build = DynamoOutput.build_guards
    reasons = convert_frame.get_and_maybe_log_recompilation_reasons

    @contextmanager
    def as_called() -> Iterator[None]:
        for mode in functions:
            torch._C._push_on_torch_function_stack(mode)
        try:
            with torch._C._ForceDispatchKeyGuard(included, excluded):
                yield
        finally:
            for _ in functions:
                torch._C._pop_torch_function_stack()

    def build_guards(self: DynamoOutput, *args: Any, **kwargs: Any) -> Any:
        graph = self.tracer_output.output_graph
        if graph is not None:
            graph.torch_function_mode_stack = list(functions)
        with as_called():
            return build(self, *args, **kwargs)

    def recompilation_reasons(*args: Any, **kwargs: Any) -> Any:
        with as_called():
            return reasons(*args, **kwargs)

    DynamoOutput.build_guards = build_guards  # type: ignore[method-assign, unused-ignore]
    convert_frame.get_and_maybe_log_recompilation_reasons = recompilation_reasons
    try:
        yield
    finally:
        DynamoOutput.build_guards = build  # type: ignore[method-assign, unused-ignore]
        convert_frame.get_and_maybe_log_recompilation_reasons = reasons


def _converting_through(optimized: Callable[..., Any], convert: Callable[..., Any]) -> None:
    """``optimized`` (what ``torch.compile`` returned for a function) converting each frame
    through ``convert``, called with dynamo's own conversion and the frame's arguments: the
    function's callback, which dynamo calls for each frame the compiled code runs that its
    cache has no code for, is held in its closure."""
    from torch._dynamo.convert_frame import CatchErrorsWrapper

    cells = [
        cell
        for cell in optimized.__closure__ or ()
        if isinstance(cell.cell_contents, CatchErrorsWrapper)
    ]
    if len(cells) != 1:
        raise RuntimeError(
            "torch.compile's wrapper holds no dynamo callback where this torch's did: "
            "memforensics does not support this torch version's torch.compile"
        )
    callback = cells[0].cell_contents
    cells[0].cell_contents = _Converting(callback, convert)


class _Converting:
    """dynamo's frame callback, converting through a function given dynamo's own one
    (:func:`_converting_through`)."""

    def __init__(self, callback: Any, convert: Callable[..., Any]) -> None:
        self._torchdynamo_orig_backend = callback  # where dynamo looks for the backend
        self.convert = convert

    def __call__(self, frame: Any, cache_entry: Any, frame_state: Any) -> Any:
        return self.convert(self._torchdynamo_orig_backend, frame, cache_entry, frame_state)


def _converted_aside(
    convert: Callable[..., Any], frame: Any, cache_entry: Any, frame_state: Any
) -> Any:
    """dynamo's conversion of ``frame`` with the plan's modes aside, on fake copies of the
    stand-ins as CUDA tensors, its guards built for the call's own state."""
    with (
        _guards_for_the_call(),
        modes_aside(),
        warnings.catch_warnings(),
        meta_constants(),
        _fake_runs_as_on_cuda(),
        standins.traced_on_cuda(),
    ):
        # dynamo's own reads while it traces (a non-leaf's ``.grad``) warn; under
        # ``-W error`` they would fail the trace, which a run on a GPU does not see
        warnings.filterwarnings("ignore", module=_TORCH_PRIVATE)
        return convert(frame, cache_entry, frame_state)


def _convert_frame(convert: Callable[..., Any], frame: Any, cache_entry: Any, state: Any) -> Any:
    """A frame of code dynamo optimizes outside ``torch.compile`` (``torch._dynamo.explain``)
    converted as a compiled call's are (:func:`_converted_aside`); this package's frames run as
    they are."""
    if frame.f_code.co_filename.startswith(_PACKAGE):
        return _as_it_is()
    return _converted_aside(convert, frame, cache_entry, state)


def explain_stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch._dynamo.explain`` for a plan: torch's own, its ``optimize`` converting each frame
    with the plan's modes aside, as a compiled call's frames are (dynamo cannot trace the
    emulation's own ``__torch_function__``); the graphs it finds then run under the plan, so
    their tensors take their blocks, and the explanation is dynamo's."""
    from torch._dynamo import eval_frame

    def explain(f: Callable[..., Any], *extra_args: Any, **extra_kwargs: Any) -> Any:
        inner = original(f)

        def run(*args: Any, **kwargs: Any) -> Any:
            optimize = eval_frame.optimize

            def optimizing(*options: Any, **named: Any) -> Callable[..., Any]:
                made = optimize(*options, **named)

                def wrap(fn: Callable[..., Any]) -> Any:
                    optimized = made(fn)
                    _converting_through(optimized, _convert_frame)
                    return optimized

                return wrap

            eval_frame.optimize = optimizing  # type: ignore[assignment, unused-ignore]
            try:
                Compiled.made += 1  # dynamo's caches are emptied after the run
                return inner(*args, **kwargs)
            finally:
                eval_frame.optimize = optimize

        if extra_args or extra_kwargs:  # the deprecated form, which torch still runs
            return run(*extra_args, **extra_kwargs)
        return run

    return explain


def _as_it_is() -> Any:
    """dynamo's answer for a frame it should not convert: run it, and the frames it calls, as
    they are, now and whenever its code runs again."""
    from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy
    from torch._dynamo.types import ConvertFrameReturn

    return ConvertFrameReturn(
        frame_exec_strategy=_FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
    )


def _attention(capability: tuple[int, int], *args: Any, **kwargs: Any) -> torch.Tensor:
    """A graph's ``scaled_dot_product_attention``: the kernel CUDA runs at ``capability``
    (:func:`~memforensics.plan.attention.attention`), so AOTAutograd traces that kernel's aten
    operator, its saved outputs and its backward, as it does on a GPU."""
    return attention.attention(capability, *args, **kwargs)


def _prepare(
    gm: torch.fx.GraphModule, capability: tuple[int, int], autocast: choices.Autocast
) -> None:
    """dynamo's graph made ready for AOTAutograd: its attention calls CUDA's kernel
    (:func:`_attention`), and each call autocast casts for casts its inputs as CUDA's autocast
    would where AOTAutograd traces it (:func:`_autocast_call`); raise :class:`Unmodelled` where
    it calls what the plan re-makes and a graph cannot."""
    for node in list(gm.graph.nodes):
        if node.op not in ("call_function", "call_method"):
            continue
        node.kwargs = _meta_device(dict(node.kwargs))
        name = _called(node)
        node.args = _meta_devices(node.args, moving=name == "to")
        if name in _REMADE:
            raise Unmodelled(name)
        if node.op == "call_method":
            if name not in autocast.names:
                continue
            node.op, node.target = "call_function", _method(name)
        if name == attention.SDPA_NAME:
            node.target, node.args = _attention, (capability, *node.args)
        if node.op == "call_function" and name in autocast_inner.RESTATED:
            node.target = _restated_call(autocast, name, node.target)
        elif name in autocast.names:
            node.target = _autocast_call(autocast, name, node.target)
    gm.recompile()


def _called(node: torch.fx.Node) -> str:
    """The name autocast's lists know a dynamo graph's call by: a method's or function's own
    name, but for a number divided or raised by a tensor (CUDA's ``reciprocal`` and ``pow``,
    both float32, which cast the tensor as the whole call's cast would)."""
    if node.op == "call_method":
        return str(node.target)
    name = str(getattr(node.target, "__name__", node.target))
    if name in _REFLECTED and node.args and not isinstance(node.args[0], torch.fx.Node):
        return _REFLECTED[name]
    return name


_REFLECTED = {"truediv": "__rtruediv__", "pow": "__rpow__"}
"""``operator``'s binary functions whose first operand is a number: the tensor's reflected
method, as the script's expression calls it."""


def _method(name: str) -> Callable[..., Any]:
    """A tensor method as a function of the tensor, so autocast's casts reach ``self``."""

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self, name)(*args, **kwargs)

    method.__name__ = f"method_{name}"
    return method


def _autocast_call(
    autocast: choices.Autocast, name: str, call: Callable[..., Any]
) -> Callable[..., Any]:
    """``call`` with its inputs cast as CUDA's autocast casts function ``name`` in the autocast
    state at the trace: dynamo's trace on ``meta`` sees no casts (autocast works in the
    dispatcher on CUDA tensors), so the graph AOTAutograd partitions gets them here, as the
    one it traces on a GPU has them. Inside a trace autocast's cache is off, so every cast is
    the graph's own, as on a GPU."""

    def cast_then(*args: Any, **kwargs: Any) -> Any:
        policy = autocast.policy(name, args, kwargs)
        if policy is not None:
            args, kwargs = autocast.cast(policy, args, kwargs)
        return call(*args, **kwargs)

    cast_then.__name__ = f"autocast_{name}"
    return cast_then


def _restated_call(
    autocast: choices.Autocast, name: str, call: Callable[..., Any]
) -> Callable[..., Any]:
    """``call``, a composite that autocast has no CUDA kernel for (dynamo's graph holds
    ``cross_entropy_loss``, ``nll_loss_nd`` and ``pairwise_distance`` as the script called
    them, and AOTAutograd decomposes them on a GPU), run under autocast as the operators it
    calls (:data:`~memforensics.plan.autocast_inner.RESTATED`), each cast by autocast's
    lists (:func:`_inner_call`), as the trace on a GPU casts them; as it is without autocast.
    A call that reaches no composite (a convolution whose padding is numbers) is cast at the
    function (:func:`_autocast_call`)."""
    cast_then = _autocast_call(autocast, name, call)

    def restated_then(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_autocast_enabled("cuda"):
            return call(*args, **kwargs)
        restated = autocast_inner.restated(name, args, kwargs)
        if restated is None:
            return cast_then(*args, **kwargs)
        return restated(functools.partial(_inner_call, autocast), *args, **kwargs)

    restated_then.__name__ = f"autocast_{name}"
    return restated_then


def _inner_call(
    autocast: choices.Autocast, func: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """``func``, called inside a restated composite in a graph, cast by autocast's lists, or
    itself restated."""
    name = getattr(func, "__name__", "")
    restated = autocast_inner.restated(name, args, kwargs)
    if restated is not None:
        return restated(functools.partial(_inner_call, autocast), *args, **kwargs)
    policy = autocast.policy(name, args, kwargs) if name in autocast.names else None
    if policy is not None:
        args, kwargs = autocast.cast(policy, args, kwargs)
    return func(*args, **kwargs)


def shadowed() -> tuple[torch._ops.OpOverload, ...]:
    """aten's composite operators (``nll_loss``, ``var``, ``dropout``, ``rms_norm``'s
    ``_fused_rms_norm``, ...) with a Python ``meta`` kernel of their own, among the operators
    looked up so far (registering a kernel looks its operator up)."""
    import torch._decomp  # registers the Python meta kernels
    import torch._meta_registrations
    from torch._C import DispatchKey

    found = []
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():  # type: ignore[no-untyped-call, unused-ignore]
            op = getattr(packet, overload)
            if DispatchKey.Meta in op.py_kernels and torch._C._dispatch_has_kernel_for_dispatch_key(
                op.name(), "CompositeImplicitAutograd"
            ):
                found.append(op)
    return tuple(found)


@contextmanager
def composites_on_meta() -> Iterator[None]:
    """aten's composite operators decomposed above autograd on ``meta`` while AOTAutograd
    traces, as they are on CUDA. Under the Python dispatcher AOTAutograd traces with, an
    operator's Python ``meta`` kernel counts as the ``meta`` backend's own, so autograd on
    ``meta`` skips the composite and records no derivative: ``cross_entropy``'s ``nll_loss``
    would give no gradient to anything before it. Their ``meta`` kernels are put back after."""
    from torch._C import DispatchKey

    held = [(op, op.py_kernels.pop(DispatchKey.Meta)) for op in shadowed()]
    for op, _ in held:
        op._dispatch_cache.clear()
    try:
        yield
    finally:
        for op, kernel in held:
            op.py_kernels[DispatchKey.Meta] = kernel
            op._dispatch_cache.clear()


@contextmanager
def meta_constants() -> Iterator[None]:
    """dynamo's fake tensors take the real ``meta`` tensors the traced code makes. Under a fake
    mode a factory on ``meta`` (``torch.tensor([], device=x.device)``, Hugging Face's empty
    key-value cache) makes a real ``meta`` tensor, which the fake mode then refuses beside its
    own (on a GPU the factory makes a fake one); let in, it becomes a fake one as a CPU
    constant does."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    original = FakeTensorMode.__init__

    def init(self: FakeTensorMode, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_non_fake_inputs"] = True
        original(self, *args, **kwargs)

    dispatch = FakeTensorMode.__torch_dispatch__

    def on_meta(
        self: FakeTensorMode, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        return dispatch(self, func, types, args, _meta_device(kwargs or {}))

    FakeTensorMode.__init__ = init  # type: ignore[method-assign, unused-ignore]
    FakeTensorMode.__torch_dispatch__ = on_meta  # type: ignore[method-assign, assignment, unused-ignore]
    try:
        yield
    finally:
        FakeTensorMode.__init__ = original  # type: ignore[method-assign, unused-ignore]
        FakeTensorMode.__torch_dispatch__ = dispatch  # type: ignore[method-assign, unused-ignore]


@contextmanager
def _fake_runs_as_on_cuda() -> Iterator[None]:
    """dynamo's run of each traced call on fake tensors, which decides its output's dtype and
    device, as it is on CUDA and as the graph's run will be (:func:`_prepare`). What it puts
    on the planned device (``.to("cuda")``, ``.cuda()``, ``torch.as_tensor(t,
    device="cuda")``) goes on ``meta``: the CPU build cannot give ``"cuda"`` or
    ``torch.device("cuda")``, which name no index, the current device's index
    (``ensure_has_index``); a ``.cuda()`` node becomes the ``to`` it is, for the graph's run
    too. A call autocast casts for gets its inputs cast, as autocast's dispatch key casts CUDA
    tensors: uncast, a float16 input beside float32 weights (a UNet's latents under
    ``autocast``) fails the call. Either failure made the code run uncompiled."""
    import torch._dynamo.utils as dynamo_utils

    original = dynamo_utils.run_node
    autocast = choices.Autocast()  # its cast cache this trace's own, of fake tensors

    def run_node(tracer: Any, node: torch.fx.Node, args: Any, kwargs: Any, nnmodule: Any) -> Any:
        if node.op in ("call_method", "call_function"):
            if node.op == "call_method" and node.target == "cuda":
                node.target, node.args, node.kwargs = _moved(node.args, node.kwargs)
                args, kwargs = _moved(tuple(args), kwargs)[1:]
            name = _called(node)
            args = _meta_devices(tuple(args), moving=name == "to")
            kwargs = _meta_device(dict(kwargs))
            restated = autocast_inner.restated(name, args, kwargs)
            if node.op == "call_function" and restated is not None:
                assert callable(node.target)  # a call_function node's target is its function
                return _restated_call(autocast, name, node.target)(*args, **kwargs)
            policy = autocast.policy(name, args, kwargs) if name in autocast.names else None
            if policy is not None:
                args, kwargs = autocast.cast(policy, args, kwargs)
        return original(tracer, node, args, kwargs, nnmodule)

    dynamo_utils.run_node = run_node
    try:
        yield
    finally:
        dynamo_utils.run_node = original


def _moved(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, tuple[Any, ...], Any]:
    """``Tensor.cuda``'s call as the ``to`` onto ``meta`` it is in a plan (its device, by
    position or by name, is the planned one; ``non_blocking`` and ``memory_format`` stay)."""
    rest = {k: v for k, v in kwargs.items() if k != "device"}
    return "to", (args[0], torch.device("meta")), rest


def _meta_device(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with a planned-device ``device`` (``torch.arange(n, device="cuda")`` in the
    compiled code) on ``meta``, where the stand-ins are: a GPU's trace makes it where its
    inputs are."""
    device = kwargs.get("device")
    if not isinstance(device, (str, int, torch.device)) or torch.device(device).type != "cuda":
        return kwargs
    return {**kwargs, "device": torch.device("meta")}


def _meta_devices(args: tuple[Any, ...], *, moving: bool) -> tuple[Any, ...]:
    """A dynamo node's arguments with each planned device it names on ``meta``: a
    ``torch.device`` of CUDA anywhere (``timesteps.to(sample.device)``, where the stand-in's
    device is traced as ``cuda:0``), and a device's name where the call is ``to``
    (``.to("cuda:0", torch.float16)``). Left as they are, AOTAutograd traces the move as
    ``prims.device_put`` onto CUDA, which the stand-ins cannot run; on ``meta`` it is the copy
    onto the device a GPU makes."""

    def planned(value: Any) -> bool:
        if isinstance(value, torch.device):
            return bool(value.type == "cuda")
        return moving and isinstance(value, str) and value.split(":")[0] == "cuda"

    return tuple(torch.device("meta") if planned(value) else value for value in args)


@contextmanager
def _whole() -> Iterator[None]:
    """dynamo's graph compiled whole around a call of a ``logging.Logger`` method (Hugging
    Face's ``logger.warning_once`` in its loss), where a GPU's would be split: there a graph
    break, which runs the message's call between two graphs; here the call is left out of
    the graph, and the message is not printed. One partition keeps what the pieces' keep, but
    the values a split graph saves at its boundaries."""
    import logging

    methods = {
        value
        for name, value in vars(logging.Logger).items()
        if callable(value) and not name.startswith("_")
    }
    with torch._dynamo.config.patch(ignore_logging_functions=methods):
        yield


class Compiled:
    """One compiled function or module call: its graphs, with the code between them eager,
    where dynamo converts its frames; else ``fn`` eagerly."""

    made = 0
    """How many were made in this process: :func:`dynamo_as_found` resets dynamo after a run
    that made one."""

    def __init__(
        self,
        fn: Callable[..., Any],
        notes: Notes,
        storage: StorageMode,
        autocast: choices.Autocast,
        original: Callable[..., Any],
        dynamic: object,
        fullgraph: bool,
        trees: graph_trees.GraphTrees | None = None,
    ) -> None:
        functools.update_wrapper(self, fn)
        Compiled.made += 1
        self.fn = fn
        self.notes = notes
        self.storage = storage
        self.autocast = autocast
        self.fullgraph = fullgraph
        self.trees = trees
        """The device's CUDA graph tree, where the compile's mode runs its graphs as CUDA
        graphs."""
        self.eager = False
        self._failed = threading.local()
        with _quiet(_NO_TRITON):  # dynamo's import of AOTAutograd imports it
            self.optimized = original(
                fn, backend=self._backend, fullgraph=fullgraph, dynamic=dynamic
            )
        _converting_through(self.optimized, self._convert)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.eager or torch.compiler.is_compiling():
            return self.fn(*args, **kwargs)
        self._failed.value = False
        try:
            return self.optimized(*args, **kwargs)
        except Exception:
            if not self._failed.value:
                raise  # the script's own failure, or a predicted OOM, as the code ran
        self.eager = True
        self.notes.once("compile", EAGER)
        return self.fn(*args, **kwargs)

    def _convert(
        self, convert: Callable[..., Any], frame: Any, cache_entry: Any, frame_state: Any
    ) -> Any:
        """dynamo's conversion of ``frame`` (the compiled code's, a resume function's after a
        graph break, or one the code between graphs calls), with the plan's modes aside, its
        guards built for the call's own state (:func:`_guards_for_the_call`). A frame of this
        package's runs as it is. Where the frame cannot be converted, it runs eagerly, said
        once, and stays so; with ``fullgraph`` the whole call does. A recompile that the
        script's dynamo settings forbid (``error_on_recompile``, ``fail_on_recompile_limit_hit``)
        raises into the script."""
        if frame.f_code.co_filename.startswith(_PACKAGE):
            return _as_it_is()
        from torch._dynamo.exc import FailOnRecompileLimitHit, RecompileError

        try:
            with _whole():
                return _converted_aside(convert, frame, cache_entry, frame_state)
        except (RecompileError, FailOnRecompileLimitHit):
            raise  # the script's own dynamo settings stop the call, as on a GPU
        except Exception:
            if self.fullgraph:
                self._failed.value = True
                raise
        self.notes.once("compile", EAGER)
        return _as_it_is()

    def _backend(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        """dynamo's backend: torch's own AOTAutograd backend (which also keeps the count of
        compiled graphs DDP's graph split reads) with Inductor's decompositions and partition."""
        _prepare(gm, self.storage.capability, self.autocast)
        from torch._dynamo.backends.common import aot_autograd
        from torch._functorch.partitioners import min_cut_rematerialization_partition
        from torch._inductor.decomposition import select_decomp_table

        backend = aot_autograd(
            fw_compiler=self._runner,
            bw_compiler=functools.partial(self._runner, kind=graph_trees.Kind.BACKWARD),
            inference_compiler=functools.partial(self._runner, kind=graph_trees.Kind.INFERENCE),
            partition_fn=min_cut_rematerialization_partition,
            decompositions=select_decomp_table(),
        )
        with composites_on_meta():
            return backend(gm, example_inputs)

    def _runner(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: Sequence[Any],
        *,
        kind: graph_trees.Kind = graph_trees.Kind.FORWARD,
    ) -> Any:
        """A partitioned graph run node by node under the storage mode, the emulation's
        function mode aside (the module's own ``device(type='meta')`` literals must stay
        stand-ins' meta), each value freed after its last use, the values Inductor inlines into
        its kernels made without a block, and the outputs it writes into dying inputs given
        their blocks (:class:`_Kernels`; a backward's inputs AOTAutograd donates may be,
        :func:`_donated`); boxed, so its inputs are freed as the graph is done with them, as
        Inductor's own wrapper frees them. Under CUDA graphs each call runs as the graph tree
        runs it (:class:`~memforensics.plan.graph_trees.GraphTrees`)."""
        storage = self.storage
        self.notes.once("compile graphs", GRAPHS)
        donated = kind is graph_trees.Kind.BACKWARD
        fused = fusion.copied_operands(gm.graph)
        inlined = fusion.inlined(gm.graph)
        fusion.reorder(gm.graph, inlined, donated=donated, fused=fused)
        in_place = fusion.in_place(
            gm.graph, inlined, _donated(gm.graph) if donated else frozenset()
        )
        trees, function = self.trees, self.trees.function() if self.trees else 0
        static = _static_inputs(gm, kind) if trees else frozenset()

        def compiled(args: list[Any]) -> Any:
            return _Kernels(gm, storage, inlined, in_place).boxed_run(args)

        def run(args: list[Any]) -> Any:
            staged, storage.staged = storage.staged, False  # Inductor's reductions stage none
            try:
                with torch._C.DisableTorchFunction(), _entered(storage):
                    if trees is None:
                        return compiled(args)
                    return trees.run(function, kind, static, args, compiled, _replayed(gm))
            finally:
                storage.staged = staged

        run._boxed_call = True  # type: ignore[attr-defined]  # AOTAutograd's calling convention
        return run


@contextmanager
def _entered(storage: StorageMode) -> Iterator[None]:
    """The storage mode current inside, where it is not already."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    if storage in _get_current_dispatch_mode_stack():
        yield
        return
    with storage:
        yield


def _replayed(gm: torch.fx.GraphModule) -> Callable[[list[Any]], Any]:
    """``gm`` replayed as a CUDA graph: its outputs made with every mode aside, taking no
    block (a replay allocates nothing; its outputs are the pool's memory, which the
    allocator does not count)."""
    from torch.utils._python_dispatch import _disable_current_modes

    def replay(args: list[Any]) -> Any:
        interpreter = torch.fx.Interpreter(gm)
        try:
            with _disable_current_modes():
                return interpreter.boxed_run(args)
        finally:
            interpreter.env.clear()  # the outputs held by no one but the caller

    return replay


def _static_inputs(gm: torch.fx.GraphModule, kind: graph_trees.Kind) -> frozenset[int]:
    """The inputs a CUDA graph takes where they lie, never copying them into its pool, as
    Inductor marks them: a forward's parameters and buffers (AOTAutograd's
    ``static_input_indices``), a backward's every input but its tangents."""
    from torch._inductor.compile_fx import get_static_input_idxs
    from torch._inductor.utils import count_tangents

    if kind is graph_trees.Kind.BACKWARD:
        return frozenset(range(count_tangents(gm)))
    return frozenset(get_static_input_idxs(0))


def _donated(graph: torch.fx.Graph) -> frozenset[torch.fx.Node]:
    """The inputs of the backward being compiled that AOTAutograd donates to it, which
    Inductor may write a kernel's output into (``DonatedBuffer``): the saved tensors no forward
    output or input aliases, read from the tracing context as Inductor reads them."""
    from torch._inductor.utils import get_donated_idxs

    inputs = graph.find_nodes(op="placeholder")
    return frozenset(inputs[i] for i in get_donated_idxs() or () if i < len(inputs))


class _Kernels(torch.fx.Interpreter):  # type: ignore[misc, unused-ignore]  # untyped without torch
    """A partitioned graph's run, where the values Inductor computes inside the kernels that
    read them (:func:`~memforensics.plan.fusion.inlined`) are made with the storage mode
    aside, never taking a block of the planned device, and an output Inductor writes into a
    dying input (:func:`~memforensics.plan.fusion.in_place`) takes that input's block."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        storage: StorageMode,
        inlined: frozenset[torch.fx.Node],
        in_place: dict[torch.fx.Node, torch.fx.Node],
    ) -> None:
        super().__init__(gm)
        self.user_to_last_uses = fusion.last_reads(gm.graph, inlined)
        self.storage = storage
        self.inlined = inlined
        self.in_place = in_place

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        kernel = flex.graph_kernel(target)
        if kernel is not None:  # the operator's dispatch has no rule for the plan's modes
            return kernel(*args, **kwargs)
        return super().call_function(target, args, kwargs)

    def run_node(self, n: torch.fx.Node) -> Any:
        source = self.in_place.get(n)
        if n not in self.inlined and source is None:
            return super().run_node(n)
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            made = super().run_node(n)
        if source is not None:
            self.storage.written_into(made, self.env[source])
        return made


@contextmanager
def dynamo_as_found() -> Iterator[None]:
    """dynamo's caches emptied after a run that compiled through :class:`Compiled`: the code
    it traced on stand-ins, with the plan's backend, is not what a later real call of the same
    code in this process should find (nor count against its recompile limit)."""
    before = Compiled.made
    try:
        yield
    finally:
        if Compiled.made != before:
            torch._dynamo.reset()


def _torch_own(model: object) -> bool:
    """Whether ``model`` is one of torch's own functions (``flex_attention``), which torch
    compiles itself; not a module's bound ``_call_impl`` (``nn.Module.compile``), which runs
    the script's code."""
    own = str(getattr(model, "__module__", "")).startswith("torch.")
    return own and not isinstance(getattr(model, "__self__", model), torch.nn.Module)


def _optimized_module(
    model: torch.nn.Module, original: Callable[..., Any], backend: object, options: dict[str, Any]
) -> tuple[torch.nn.Module, str, Callable[..., Any]]:
    """``model`` in the ``OptimizedModule`` real ``torch.compile`` wraps it in (a script reads
    ``_orig_mod``, and its state dict's keys begin ``_orig_mod.``), the attribute that holds
    the compiled call (a lazy module's is ``_forward``, behind its initialising check), and
    the function torch compiles there: the module's ``__call__``, whose inner frames dynamo
    traces, or, for a class of torch's own (an ``nn.Sequential`` of torch's layers, whose
    files dynamo skips), a frame around it outside torch's files that dynamo inlines it from."""
    from torch._dynamo.eval_frame import innermost_fn

    with _quiet(_NO_TRITON):  # as the wrapper's compiler config imports it
        wrapper: torch.nn.Module = original(model, backend=backend, **options)
    slot = "_forward" if "_forward" in vars(wrapper) else "forward"
    return wrapper, slot, innermost_fn(getattr(wrapper, slot))


def stand_in(
    notes: Notes,
    storage: StorageMode,
    autocast: choices.Autocast,
    trees: graph_trees.GraphTrees,
) -> Callable[..., Any]:
    """``torch.compile`` for a plan: Inductor's graphs (:class:`Compiled`) for the default
    backend and options, else the code eagerly, marked as compiled with its backend (an
    operator whose CUDA memory depends on it asks
    :func:`~memforensics.plan.values.compiled_backend`). A module is returned in torch's own
    wrapper, as ``torch.compile`` returns it (:func:`_optimized_module`)."""
    original = torch.compile

    def compile(model: Any = None, *, backend: object = INDUCTOR, **options: Any) -> Any:
        if model is None:
            return lambda fn: compile(fn, backend=backend, **options)
        if options.get("disable", False):
            return model
        module = isinstance(model, torch.nn.Module)  # the script's, whatever its class
        torch_own = _torch_own(model)
        mode, inductor_options = options.get("mode"), options.get("options") or {}
        graphs = (
            backend == INDUCTOR and not torch_own and mode in (*_DEFAULT_MODES, *_CUDA_GRAPH_MODES)
        )
        if not graphs and not torch_own:
            notes.once("compile", EAGER)
        cuda_graphs = graphs and (
            mode in _CUDA_GRAPH_MODES or bool(inductor_options.get("triton.cudagraphs"))
        )
        if cuda_graphs:
            notes.once("cudagraphs", CUDA_GRAPHS)
        if graphs and set(inductor_options) - {"triton.cudagraphs"}:
            notes.once("inductor-options", OPTIONS)
        if module:
            wrapper, slot, fn = _optimized_module(model, original, backend, options)
        else:
            fn = model
        if graphs:
            fn = Compiled(
                fn,
                notes,
                storage,
                autocast,
                original,
                options.get("dynamic"),
                bool(options.get("fullgraph", False)),
                trees if cuda_graphs else None,
            )
        marked = values.marked(fn, backend)
        if module:
            setattr(wrapper, slot, marked)
            return wrapper
        return marked

    return compile
