"""The values a stand-in is known to hold: those the script's own values decide.

A stand-in has no data, but much of what a script reads back from the device it made itself
from what it knows: ``torch.tensor(x.shape[0], device="cuda")``, ``torch.arange(n)``,
``torch.ones(batch)``, ``torch.full(..., is_done)``, a ``randint(low, high)``. For those, the
plan keeps a CPU copy beside the stand-in and runs each operator on the copies too, so
``.item()``, ``int()``, ``.tolist()`` and ``.cpu()`` give what the GPU would give (a random draw
is drawn again on the CPU, from the plan's own generator, within the same bounds). Values the
script's own values do not decide (a model's output, an argmax over it) stay unknown, and so
does everything computed from them; reading one gives a made-up value
(:class:`~memforensics.plan.values.Reads`).

Unknown values are finite. A test of finiteness on one is known: ``isnan`` and ``isinf`` are
all false, a comparison with an infinite number or NaN is decided, a value equals itself
(``isfinite``'s parts), and a value less itself is zero, at any size: a large result is kept as
its one value, and elementwise operators and ``all``/``any`` on such results are computed on one
element. GradScaler's
unscaling leaves its overflow flag as it was. So a script's NaN check passes and no optimizer
step is skipped, as on a GPU run that does not diverge.

Where the caller gives one (the script's code, not torch's), an unknown float32 or float64
scalar takes a made-up value when an operator uses it or makes it: an operator whose only unknown
inputs are such scalars makes them up and is computed from them, another makes up its new scalar
outputs. They are known from then on, and so is what is computed from them, each marked as made
up, so a read of one is said as made up, not as decided.

Another rule keeps decoding loops honest: an ``or`` with a known all-true side is true, an
``and`` with a known all-false side is false (a flag ``& False`` too), whatever the unknown side
holds. Hugging Face's ``generate()`` stops when ``max_length`` is reached (a known
``torch.full(..., True)``) or on an end-of-sequence token; with the rule, the maximum length
ends it. Before that, what the plan assumes of unknown values (:mod:`memforensics.plan.assumed`)
decides the rest: a generated token is no end-of-sequence token, and beam search's "can a beam
still improve" test, its reordered "finished" flags and its generated length come out as on a
run whose sequences never end early. Values so decided are marked made up.

Only small storages are copied (:data:`LIMIT` bytes at most), so the host memory a plan needs
stays independent of the model's size, and an operator on large tensors costs one size check.
Integers copied from the host are the exception, up to :data:`HOST_LIMIT` bytes: a batch's
indices (a graph batch vector, an edge index), whose copy costs what the host holds already, and
which decide sizes on the device (how many nodes each graph of a batch has), and integers and
flags the device computes from known ones (an ``arange`` over a batch's nodes, a mask set at
each node's place). Other values copied from the host are kept up to :data:`HOST_FLOAT_LIMIT`
bytes: a data set's observations or a solver's initial state, which loops step by; a model's
weights, larger, stay unknown, since a loader that streams them to the device holds each on
the host only while it copies it. What the device computes from such copies alone (not from a
model's weights, which require a gradient, nor from a random draw) is kept up to the same
bound: the distances between a batch's points. A small storage written in parts with known
values is known once every element is written; one known in part is followed through a sort
and the tests of its result where the extremes written into it decide them
(:mod:`~memforensics.plan.partly`).
A large storage is known only where it holds one value everywhere, or repeats a short pattern
(:mod:`~memforensics.plan.periodic`: a one-hot of unknown indices, and what elementwise operators
and casts make of it). Of a large integer storage copied from the host, only its extremes are
kept (:mod:`~memforensics.plan.extremes`: a batch vector's largest graph index).

An operator that reads none of one input's values (:mod:`~memforensics.plan.unread`:
``ones_like``, ``new_zeros``, ``fill_``, ``zero_``, ``copy_`` of a host batch into a buffer made
by ``torch.empty``) is known where its other inputs are, whatever that input holds; one value
everywhere is kept at any size.

Values made up by an assumption decide no size, except those of a *partition*
(:func:`~memforensics.plan.assumed.partitioned`: a one-hot or a histogram of unknown integers,
each counted once, at class 0 or, a router's choices, at a balanced routing's class, or values
written at unknown indices, distinct in each slice) and
what is computed from them alone (:meth:`Known.sized`): they are a real routing's, so the sizes
a mixture of experts' loop takes from them sum to the tokens routed, where an upper bound on
each would count every token at every expert.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from memforensics.plan import assumed, partly, periodic, unread
from memforensics.plan.extremes import Extremes, integral
from memforensics.plan.nonzero import AND, OR, NonzeroBounds
from memforensics.plan.released import when_released
from memforensics.plan.routing import Routing
from memforensics.plan.targets import Targets

_VIEW_COUNTS = frozenset(
    (
        torch.ops.aten.sum.default,
        torch.ops.aten.sum.dim_IntList,
        torch.ops.aten.count_nonzero.default,
        torch.ops.aten.count_nonzero.dim_IntList,
        torch.ops.aten.any.default,
        torch.ops.aten.any.dims,
        torch.ops.aten.any.dim,
    )
)
"""Reductions computed over a view of a repeating storage from its pattern."""
_ADD = torch.ops.aten.add.Tensor
"""A sum of two tensors: targets times the number of classes plus predictions, or predictions
times it plus targets, a confusion matrix's index (:meth:`Known._combined`)."""
_MUL = torch.ops.aten.mul.Tensor
"""A product: targets or predictions times the number of classes, one side of a confusion
matrix's index (:meth:`Known._scale`)."""
LIMIT = 1 << 16
"""Largest storage, in bytes, whose values are kept."""
HOST_LIMIT = 1 << 24
"""Largest storage of integers copied from the host whose values are kept."""
HOST_FLOAT_LIMIT = 1 << 20
"""Largest storage of other values copied from the host whose values are kept: each kept copy
is host memory the plan holds while the device tensor lives, and weights are floats."""

_CPU = torch.device("cpu")
_NO_FUNCTION_MODES = torch._C.DisableTorchFunction
"""Torch's function handling off: neither a mode nor a subclass sees a call."""
_HOST_ADDRESS = torch._C.TensorBase.data_ptr
"""A host tensor's address, as torch gives it (the plan answers ``data_ptr`` of a stand-in;
the copies it compares are on the host)."""
_INFERENCE_ON = torch.is_inference_mode_enabled
_USE_COUNT = torch._C._storage_Use_Count
_ONLY_TENSOR = 2
"""A storage's references where one tensor holds it: that tensor's, and the Python storage
object asking."""
_SCALAR_OR = frozenset((torch.ops.aten.bitwise_or.Scalar, torch.ops.aten.__or__.Scalar))
_SCALAR_AND = frozenset((torch.ops.aten.bitwise_and.Scalar, torch.ops.aten.__and__.Scalar))
_UNKNOWN_FILL = frozenset(
    (
        torch.ops.aten.empty.memory_format,
        torch.ops.aten.empty_strided.default,
        torch.ops.aten.empty_like.default,
        torch.ops.aten.new_empty.default,
        torch.ops.aten.new_empty_strided.default,
    )
)
"""Factories whose values are whatever the memory held: unknown on a GPU too."""
_COPIES = frozenset((torch.ops.aten._to_copy.default, torch.ops.aten.clone.default))
"""Copies, casts included: each element from the element at the same place."""
_NEVER = frozenset(
    (
        torch.ops.aten.isnan.default,
        torch.ops.aten.isinf.default,
        torch.ops.aten.isposinf.default,
        torch.ops.aten.isneginf.default,
    )
)
"""Tests that a finite value never passes."""
_SCALAR_TESTS = {torch.ops.aten.eq.Scalar: False, torch.ops.aten.ne.Scalar: True}
"""Comparisons with a number: what a finite value gives against an infinite one or NaN."""
_SELF_TESTS = {torch.ops.aten.eq.Tensor: True, torch.ops.aten.ne.Tensor: False}
"""Comparisons of a value with itself (``isfinite``'s ``x == x``): what a finite value gives."""
_SELF_DIFFERENCES = frozenset((torch.ops.aten.sub.Tensor, torch.ops.aten.sub_.Tensor))
"""A value less itself (``total -= total``, how Hugging Face's ``Trainer`` sets its running loss
back after logging it): zero for a finite value."""
_WHOLE = {torch.ops.aten.all.default: True, torch.ops.aten.any.default: False}
"""Reductions to one flag, and what they give for no elements."""
_FINITENESS = frozenset((*_NEVER, *_SCALAR_TESTS, *_SELF_TESTS, *_SELF_DIFFERENCES))
"""Every operator whose result finiteness decides on unknown values (:meth:`Known._finite`):
one lookup turns the rest away (an operator is hashed in Python, on each lookup)."""
_POINTWISE = torch.Tag.pointwise
_PRECISE = frozenset((torch.float32, torch.float64))
_UNSCALE = torch.ops.aten._amp_foreach_non_finite_check_and_unscale_.default
"""GradScaler's unscaling: writes the gradients and, only on a non-finite one, the flag."""
_FROM_HOST = {torch.ops.aten._to_copy.default: 0, torch.ops.aten.copy_.default: 1}
"""Copies, and the position of their source: from a host tensor, a batch arriving."""
MASK_DTYPES = (torch.bool, torch.uint8)
"""The dtypes of an index that selects where it is non-zero (``expandTensors``: ``kBool``, and
``kByte``, deprecated, which indexes the same way)."""
_MASKED_WRITES = frozenset(
    (
        torch.ops.aten.index_put_.default,
        torch.ops.aten.index_put.default,
        torch.ops.aten._index_put_impl_.default,
        torch.ops.aten.masked_fill_.Tensor,
        torch.ops.aten.masked_fill.Tensor,
        torch.ops.aten.masked_scatter_.default,
        torch.ops.aten.masked_scatter.default,
    )
)
"""Writes into their first input at the positions their indices or mask (second input) select,
of values that only fill those positions (``x[mask] = v``, ``masked_fill``, ``masked_scatter``)."""


_PLACED = frozenset(
    (
        torch.ops.aten.index_put_.default,
        torch.ops.aten._index_put_impl_.default,
        torch.ops.aten.masked_fill_.Scalar,
        torch.ops.aten.masked_fill_.Tensor,
    )
)
"""Writes of a value into their first input at the positions their indices or mask (second
input) select, its other elements untouched: where the positions are known, so is what they
write, whatever the rest holds (the value is their third input)."""


class _OnHost:
    """Where the plan computes its copies again: outside inference mode (a kept copy is an
    ordinary tensor a later in-place operator may write), on one host thread. The copies are
    small (:data:`LIMIT`), and waking torch's thread pool for each costs far more than the work:
    on a busy two-core machine a 64 by 64 ``mm`` took 100 times as long on two threads as on
    one, which made a small-operator loop (a reinforcement-learning policy) several times
    slower to plan than to run. The script's own thread count is set back on the way out.
    Inference mode is left only where it is on (the guard costs a few microseconds an
    operator, and the copies hold no gradients for the grad mode it would set to matter)."""

    __slots__ = ("_inference", "_threads")

    def __enter__(self) -> None:
        self._inference = torch._C._InferenceMode(False) if _INFERENCE_ON() else None
        if self._inference is not None:
            self._inference.__enter__()  # type: ignore[no-untyped-call, unused-ignore]
        self._threads = torch.get_num_threads()
        if self._threads != 1:
            torch.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        if self._threads != 1:
            torch.set_num_threads(self._threads)
        if self._inference is not None:
            self._inference.__exit__(*exc)


def _never(tensor: torch.Tensor) -> bool:
    return False


def _leaves(value: Any) -> list[Any]:
    """``value``'s leaves as ``tree_flatten`` gives them, a lone tensor (most operators'
    output) without its walk."""
    return [value] if isinstance(value, torch.Tensor) else tree_flatten(value)[0]


def _option(value: Any) -> Any:
    """An operator's option as the CPU runs it: the ``meta`` device is the CPU."""
    return _CPU if isinstance(value, torch.device) and value.type == "meta" else value


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """The tensors in an operator's arguments or outputs (one level of lists, as aten nests)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, torch.Tensor):
                yield item


def _inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The stand-ins an operator reads, in lists too (``cat``'s tensors)."""
    return [t for v in (*args, *kwargs.values()) for t in _tensors(v) if t.is_meta]


def _less_itself(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``func`` takes a tensor from itself whole (``x - x``, or ``x -= x`` where ``x``
    spans its storage, whose every byte the zero then describes)."""
    if len(args) < 2 or args[1] is not args[0] or kwargs.get("alpha", 1) != 1:
        return False
    first: torch.Tensor = args[0]
    if func is torch.ops.aten.sub.Tensor:
        return True
    return bool(
        first.storage_offset() == 0
        and first.is_contiguous()
        and first.numel() * first.element_size() == first.untyped_storage().nbytes()
    )


def _sparse(*values: Any) -> bool:
    """Whether any of ``values`` (an operator's arguments or outputs) is a sparse tensor (no
    storage of its own)."""
    return any(t.layout != torch.strided for v in values for t in _tensors(v))


def _infinite(rest: tuple[Any, ...]) -> bool:
    """Whether a comparison's number is infinite or NaN (never equal to a finite value)."""
    return bool(rest) and isinstance(rest[0], float) and not math.isfinite(rest[0])


def _scalar(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a single-precision or double scalar alone in its storage: one that
    can hold a made-up value that falls slowly (a 16-bit float rounds most of its steps away)."""
    return tensor.dtype in _PRECISE and tensor.untyped_storage().nbytes() == tensor.element_size()


def _unexpanded(view: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``view`` and the ``values`` written into it, each cut to the first index of every
    dimension that ``view`` repeats (stride 0, as ``expand`` makes): the elements along such a
    dimension are one memory location, which a copy may not write more than once
    (``constant.expand(n)``, a mean of one learned value, holds that value)."""
    repeated = [d for d in range(view.dim()) if view.stride(d) == 0 and view.size(d) > 1]
    if not repeated:
        return view, values
    values = values.expand(view.shape)
    for d in repeated:
        view = view.narrow(d, 0, 1)
        values = values.narrow(d, 0, 1)
    return view, values


def _flags(rest: tuple[Any, ...], out: Any) -> torch.Tensor | None:
    """A flag operator's number (``flags & False``) as flags of the output's shape, or None
    where it is not a Python bool or the output not flags."""
    if not rest or not isinstance(rest[0], bool):
        return None
    if not isinstance(out, torch.Tensor) or out.dtype != torch.bool:
        return None
    return torch.full(out.shape, rest[0], device=_CPU)


def _written(func: Any) -> tuple[int, ...]:
    """Positions of the arguments ``func`` writes into (``Tensor(a!)`` in its schema)."""
    return tuple(
        i
        for i, argument in enumerate(func._schema.arguments)
        if argument.alias_info is not None and argument.alias_info.is_write
    )


def _emptied(computed: Any, made: torch.Tensor) -> Any:
    """``computed`` as the stand-in ``made`` holds it: empty where CUDA leaves an output empty
    and the CPU fills it (``unique(dim=...)``'s inverse and counts not asked for), so the
    outputs asked for stay known."""
    if made.numel() == 0 and isinstance(computed, torch.Tensor) and computed.shape != made.shape:
        return computed.new_empty(made.shape)
    return computed


def _count_nonzero(values: torch.Tensor) -> int:
    """How many of ``values`` are non-zero, counted once along each dimension that only repeats
    (stride 0: a kept fill or pattern expanded to its tensor's shape) and multiplied by its
    length, so a large one-value tensor costs what one element does."""
    repeated = 1
    for dim, (length, stride) in enumerate(zip(values.shape, values.stride(), strict=True)):
        if stride == 0 and length > 1:
            repeated *= length
            values = values.narrow(dim, 0, 1)
    return int(torch.count_nonzero(values)) * repeated


def _own_copy(computed: Any, made: torch.Tensor, nbytes: int) -> torch.UntypedStorage | None:
    """``computed``'s storage, where it can be ``made``'s copy as it is: a host tensor nothing
    else holds a view of (its storage's only tensor), as large as ``made``'s storage, with
    ``made``'s dtype, sizes, strides and offset and no lazy conjugate or negation, so that
    ``made``'s view of it (:meth:`Known._view`) reads ``computed``; else None."""
    if not isinstance(computed, torch.Tensor) or computed.is_conj() or computed.is_neg():
        return None
    if made.is_conj() or made.is_neg() or computed.layout != torch.strided:
        return None
    if computed.dtype != made.dtype or computed.device != _CPU:
        return None
    if computed.storage_offset() != made.storage_offset() or computed.stride() != made.stride():
        return None
    if computed.shape != made.shape:
        return None
    own = computed.untyped_storage()
    if own.nbytes() != nbytes or _USE_COUNT(own._cdata) != _ONLY_TENSOR:
        return None
    return own


class Known:
    """CPU copies of the small stand-ins whose values the script's own values decide, by
    storage, kept as long as the stand-in's storage lives. Integer tensors copied from the
    host are told to ``targets`` (:class:`~memforensics.plan.targets.Targets`)."""

    def __init__(self, targets: Targets | None = None) -> None:
        self.targets = targets if targets is not None else Targets()
        self._values: dict[int, torch.UntypedStorage] = {}
        self._filled: dict[int, tuple[Any, int]] = {}  # large, one value: (value, nbytes)
        self._made_up: dict[int, bool] = {}  # kept values from a made-up one: from a guess?
        self._sized: set[int] = set()  # made-up values from partitions alone: they size
        self._hosted: set[int] = set()  # values the host's data alone decide (:meth:`_limit`)
        self._periodic: dict[int, tuple[periodic.Repeat, int]] = {}  # large: (repeat, nbytes)
        self._scales: dict[int, tuple[int, int]] = {}  # integers times a number: (it, nbytes)
        self._scaled: set[int] = set()  # the storages watched for their release, for _scales
        self._pieces: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # small: (done, values)
        self._writes: dict[Any, tuple[int, ...]] = {}
        self._rng = torch.Generator(device=_CPU)
        self._rng.manual_seed(0)
        self._sparse_seen = False  # no operator has read or made a sparse tensor yet
        self.bounds = NonzeroBounds(self._nonzero, self.decided, self.in_part)
        """At most how many elements of unknown values are non-zero, where that is bounded."""
        self.extremes = Extremes()
        """Extremes of large integer storages copied from the host."""
        self.routing = Routing()
        """Indices into a dimension of known size, and the shares tests against one class of
        them select."""
        self.unwritten: Callable[[torch.Tensor], bool] = _never
        """Whether a host tensor's memory does not hold its values yet (a deferred tensor,
        :mod:`~memforensics.plan.deferred`, whose move to the device reads nothing)."""

    def _nonzero(self, tensor: torch.Tensor) -> int | None:
        """How many of ``tensor``'s values that decide sizes are non-zero (:meth:`sized`);
        None where they do not."""
        found = self.sized(tensor)
        if found is not None:
            return _count_nonzero(found)
        if not self._periodic or not tensor.is_meta:
            return None
        key = tensor.untyped_storage()._cdata
        if key in self._made_up and key not in self._sized:
            return None
        counted = self._reduced_view(tensor, list(range(tensor.dim())), nonzero=True)
        return None if counted is None else int(counted.sum())

    def count(self, tensor: torch.Tensor) -> int | None:
        """How many of ``tensor``'s elements are non-zero, where its values decide sizes
        (:meth:`sized`; a view of a repeating storage counted without reading it element by
        element); None where they do not."""
        return self._nonzero(tensor)

    def _reduced_view(self, tensor: torch.Tensor, dims: list[int], nonzero: bool) -> Any:
        """A sum (``nonzero``: a count) over ``dims`` of a view of a storage kept as repeating
        a pattern (:func:`~memforensics.plan.periodic.reduced`); None where it is not one."""
        repeated = self._periodic.get(tensor.untyped_storage()._cdata)
        if repeated is None or repeated[1] != tensor.untyped_storage().nbytes():
            return None
        if repeated[0].pattern.dtype != tensor.dtype:
            return None
        return periodic.reduced(repeated[0], tensor, dims, nonzero)

    def sized(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """``tensor``'s values on the CPU where they decide a size (``nonzero``'s): decided
        (:meth:`decided`), or made up by partitions alone (:func:`~memforensics.plan.assumed.
        partitioned`), which count each unknown value once; None otherwise."""
        found = self.value(tensor)
        if found is None or not self.made_up(tensor):
            return found
        return found if tensor.untyped_storage()._cdata in self._sized else None

    def decided(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """``tensor``'s values on the CPU where the script's own values decide them; None where
        they are unknown or made up. An assumption decides no length, size or target: an assumed
        ``x == 0`` of unknown ``x`` is all false, and would select nothing where a GPU selects
        some."""
        found = self.value(tensor)
        return None if found is None or self.made_up(tensor) else found

    def value(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """``tensor``'s values on the CPU (a view of the kept copy), or None when unknown."""
        if not tensor.is_meta:
            return None
        storage = tensor.untyped_storage()
        kept = self._values.get(storage._cdata)
        if kept is None:
            filled = self._filled.get(storage._cdata)
            if filled is None or filled[1] != storage.nbytes():
                repeated = self._periodic.get(storage._cdata) if self._periodic else None
                if repeated is None or repeated[1] != storage.nbytes():
                    return self._written_piece(tensor) if self._pieces else None
                return periodic.viewed(repeated[0], tensor, LIMIT)
            return torch.full((), filled[0], dtype=tensor.dtype, device=_CPU).expand(tensor.shape)
        if kept.nbytes() != storage.nbytes():
            return None
        return self._view(kept, tensor)

    def after(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        guess: Callable[[], float | None] | None = None,
        matches: assumed.Matches | None = None,
    ) -> None:
        """Account for one operator on the device: its outputs known when all its inputs are
        (computed again on the CPU copies), forgotten when an unknown input wrote into them.
        ``guess``: a made-up value for the unknown scalars the operator touches
        (:meth:`_guessed`), or None where it gives none; ``matches``: how many predictions
        compared with their targets match (:func:`~memforensics.plan.assumed.decided`).
        A sparse tensor's values are never kept: what an operator on one makes is unknown (a
        view of its indices or values shows what their storages hold).

        Torch's function handling is off meanwhile, as it is when the script calls the operator
        (a function mode leaves the stack while it handles a call): an operator autograd's
        engine runs reaches the plan with the plan's function mode still on, and each property
        the bookkeeping reads and each copy it computes went through that mode, only to be
        passed on. Every tensor made here names its device, so no mode has anything to add."""
        with _NO_FUNCTION_MODES():
            self._after(func, args, kwargs, out, guess, matches)

    def _after(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        guess: Callable[[], float | None] | None,
        matches: assumed.Matches | None,
    ) -> None:
        if _sparse(out):
            self._sparse_seen = True  # only an operator's output brings a sparse tensor in
        if self._sparse_seen and _sparse(out, *args, *kwargs.values()):
            if not func.is_view:
                self._forget([t for t in _tensors(out) if t.is_meta and t.layout == torch.strided])
            return
        if func.is_view:
            return  # the same storage, the same values: what is known of them stays
        if self._finite(func, args, kwargs, out):
            return
        made = [t for t in _tensors(out) if t.is_meta]
        outs = self._changed(func, args, made)
        self.routing.after(func, args, kwargs, out, outs[len(made) :], self.value)
        if not outs:
            return
        bounded = self.bounds.bound(func, args, out)
        if (func in unread.UNREAD or func in unread.ONE_VALUE_FACTORIES) and self._overwritten(
            func, args, kwargs, out
        ):
            pass
        elif not self._from_host(func, args, outs) and not all(
            t.untyped_storage().nbytes() <= self._limit(func, args, kwargs) for t in outs
        ):
            self._large(func, args, kwargs, out, outs, matches)
        elif func in _UNKNOWN_FILL or not (
            (bool(self._pieces) and self._partly(func, args, kwargs, out))
            or self._decided(func, args, kwargs, out, matches)
            or (guess is not None and self._guessed(func, args, kwargs, out, made, guess))
            or self._pieced(func, args, kwargs, outs)
        ):
            self._forget(outs)
        if bounded is not None:  # a bound holds whatever the values: made-up ones decide no size
            self.bounds.keep(bounded)
        if self._scales or func is _MUL:
            self._scale(func, args, out, outs)

    def _large(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        outs: list[Any],
        matches: assumed.Matches | None,
    ) -> None:
        """Account for an operator that set a large stand-in: kept where it repeats a pattern,
        or where it holds integers computed from known ones (:meth:`_indices`), a small one
        beside it known in part where a sort's values are (:meth:`_partly`), up to
        :data:`HOST_LIMIT` bytes where it is a confusion matrix's index of a batch's targets
        (:meth:`_confusion`: a segmentation batch's pixels), else forgotten; a copy of host
        integers keeps its extremes."""
        computed = (
            self._repeated(func, args, kwargs, out, outs)
            or (self._indices(func, args, kwargs, outs) and self._decided(func, args, kwargs, out))
            or (bool(self._pieces) and self._partly(func, args, kwargs, out))
            or (func is _ADD and self._confusion(args, out, matches))
        )
        if computed:
            pass
        elif self._values or self._filled or self._periodic or self.bounds or self.extremes:
            self._forget(outs)
        source = _FROM_HOST.get(func)
        if source is not None and len(args) > source and not args[source].is_meta:
            self.extremes.copied(args[source], out if source == 0 else args[0])

    def _limit(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        """Largest storage, in bytes, whose values ``func`` computes are kept:
        :data:`HOST_FLOAT_LIMIT` where every stand-in it reads holds values the host's data
        alone decide (:meth:`_hosted_inputs`: the pairwise distances of a batch's positions),
        else :data:`LIMIT`."""
        if not self._hosted or torch.Tag.nondeterministic_seeded in func.tags:
            return LIMIT
        return HOST_FLOAT_LIMIT if self._hosted_inputs(_inputs(args, kwargs)) else LIMIT

    def _hosted_inputs(self, inputs: list[torch.Tensor]) -> bool:
        """Whether ``inputs`` (stand-ins an operator reads) are some, each holding values
        decided by data copied from the host alone: a copy of a host tensor that requires no
        gradient (a batch, not a model's weights), or what operators computed from such copies
        alone, none made up. A model's output stays unknown past :data:`LIMIT` (its weights
        decide it), and so does a random draw on the device (the plan's own values, not the
        GPU's): a loop bounded by a loss computed from either still ends on a made-up one."""
        return bool(inputs) and all(t.untyped_storage()._cdata in self._hosted for t in inputs)

    def _from_host(self, func: Any, args: tuple[Any, ...], outs: list[torch.Tensor]) -> bool:
        """Whether ``func`` copies a host tensor (a batch, its indices, a data set's
        observations) of at most :data:`HOST_LIMIT` bytes of integers or
        :data:`HOST_FLOAT_LIMIT` bytes of other values onto one stand-in, its values ones the
        host holds (not a deferred tensor's, :attr:`unwritten`)."""
        source = _FROM_HOST.get(func)
        if source is None or len(args) <= source or len(outs) != 1:
            return False
        host = args[source]
        if not isinstance(host, torch.Tensor) or host.is_meta or host.layout != torch.strided:
            return False
        limit = HOST_LIMIT if integral(outs[0].dtype) else HOST_FLOAT_LIMIT
        return outs[0].untyped_storage().nbytes() <= limit and not self.unwritten(host)

    def _indices(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], outs: list[torch.Tensor]
    ) -> bool:
        """Whether ``func`` makes integers or flags of at most :data:`HOST_LIMIT` bytes a
        storage from integers and flags whose values are all known, kept whole or as one value,
        no more of them than its largest input holds (an ``arange`` over a batch's nodes, their
        graphs' offsets gathered by its batch vector, a mask of zeros set at such indices): they
        are then computed on the copies, as a batch's indices copied from the host are kept,
        since they decide sizes. A storage kept as its one value that ``func`` writes is copied
        out first. A random draw is not: its values are the plan's own, not the GPU's. Nor is a
        result larger than its inputs (a causal mask, ``arange(n)[:, None] >= arange(n)``, in
        every layer of a language model): it is what they describe, broadcast, not indices."""
        if not all(integral(t.dtype) for t in outs) or func in _UNKNOWN_FILL:
            return False
        if torch.Tag.nondeterministic_seeded in func.tags:
            return False
        if not all(t.untyped_storage().nbytes() <= HOST_LIMIT for t in outs):
            return False
        inputs = _inputs(args, kwargs)
        if inputs and max(t.numel() for t in outs) > max(t.numel() for t in inputs):
            return False
        for tensor in inputs:
            storage = tensor.untyped_storage()
            kept = self._values.get(storage._cdata)
            if kept is not None and kept.nbytes() == storage.nbytes():
                continue
            filled = self._filled.get(storage._cdata)
            if filled is None or filled[1] != storage.nbytes() or not integral(tensor.dtype):
                return False
        for tensor in outs:
            filled = self._filled.get(tensor.untyped_storage()._cdata)
            if filled is not None:
                self._copied_out(tensor, filled[0])
        return True

    def _pieced(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], outs: list[torch.Tensor]
    ) -> bool:
        """Whether ``func`` wrote known values, computed from its other inputs, into part of a
        small storage of unknown values without reading it (``zero_``, ``fill_``, ``copy_`` of
        a view, an ``out=`` view): those values are kept beside the parts written so far, and
        once every element is written, the storage is known. PyTorch Geometric's ``cumsum``
        so makes its offsets (``out = x.new_empty(n + 1)``, ``out[:1].zero_()``, then
        ``torch.cumsum(x, 0, out=out[1:])``)."""
        accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
        placed = func in _PLACED and not accumulate
        chosen = func in unread.UNREAD or placed
        written = kwargs.get("out") if not chosen else args[0] if args else None
        if not isinstance(written, torch.Tensor) or not written.is_meta:
            return False
        storage = written.untyped_storage()
        key = storage._cdata
        if any(t.untyped_storage()._cdata != key for t in outs):
            return False
        if storage.nbytes() > LIMIT or key in self._values or written.is_complex():
            return False
        others = [t for t in _inputs(args, kwargs) if t is not written]
        if any(self.value(t) is None or self.made_up(t) for t in others):
            return False
        buffer = torch.zeros(written.shape, dtype=written.dtype, device=_CPU)
        cpu = [self._on_cpu(a) for a in args]
        options = {k: _option(v) for k, v in kwargs.items()}
        if "out" in options:
            options["out"] = buffer
        else:
            cpu[0] = buffer
        positions = torch.zeros(written.shape, dtype=torch.bool, device=_CPU) if placed else None
        try:
            with _OnHost():
                func(*cpu, **options)
                if positions is not None:
                    marked: Any = torch.ones((), dtype=torch.bool, device=_CPU)
                    if func is torch.ops.aten.masked_fill_.Scalar:
                        marked = True
                    func(positions, cpu[1], marked, *cpu[3:], **options)
        except Exception:  # noqa: BLE001  # an operator the CPU cannot run so: values unknown
            return False
        self._piece(written, buffer, positions)
        return True

    def _on_cpu(self, value: Any) -> Any:
        """An operator's argument as the CPU runs it: a stand-in as its copy, in lists too
        (an ``index_put_``'s indices)."""
        if isinstance(value, torch.Tensor):
            return self.value(value) if value.is_meta else value
        if isinstance(value, (list, tuple)):
            return type(value)(self._on_cpu(v) for v in value)
        return _option(value)

    def _piece(
        self, written: torch.Tensor, computed: torch.Tensor, positions: torch.Tensor | None = None
    ) -> None:
        """``computed``, known values, written into part of ``written``'s small storage, whose
        other elements are unknown, at ``positions`` of ``written`` (every one where None):
        kept beside the parts written so far, which read as known (:meth:`_written_piece`);
        once every element is written, the storage is known."""
        storage = written.untyped_storage()
        key = storage._cdata
        piece = self._pieces.pop(key, None)
        self._forget([written])
        count = storage.nbytes() // written.element_size()
        if piece is None or piece[1].dtype != written.dtype:
            if piece is None:
                when_released(storage, self._pieces.pop, key, None)
            piece = (torch.zeros(count, dtype=torch.bool, device=_CPU),
                     torch.zeros(count, dtype=written.dtype, device=_CPU))  # fmt: skip
        done, values = piece
        geometry = (written.size(), written.stride(), written.storage_offset())
        if positions is None:
            values.as_strided(*geometry).copy_(computed)
            done.as_strided(*geometry).fill_(True)
        else:
            view, marked = values.as_strided(*geometry), done.as_strided(*geometry)
            view.copy_(torch.where(positions, computed, view))
            marked.copy_(marked | positions)
        if not bool(done.any()):
            return
        if not bool(done.all()):
            self._pieces[key] = piece
            return
        self._keep(written, values.as_strided(*geometry))
        self._view(self._values[key], values).copy_(values)

    def _partly(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> bool:
        """Whether ``func``, reading a storage known in part (:meth:`_piece`), made a new small
        stand-in known in part (:mod:`~memforensics.plan.partly`): the sorted values of a
        similarity matrix with its dtype's largest value written over its negative pairs, and
        the tests of them that a sorted largest value decides."""
        made = out[0] if func in partly.SORTS and isinstance(out, (list, tuple)) else out
        if not isinstance(made, torch.Tensor) or not made.is_meta:
            return False
        inputs = _inputs(args, kwargs)
        keys = {t.untyped_storage()._cdata for t in inputs}
        if keys.isdisjoint(self._pieces) or made.untyped_storage()._cdata in keys:
            return False
        if made.untyped_storage().nbytes() > LIMIT or made.is_complex():
            return False
        try:
            with _OnHost():
                if func in partly.SORTS:
                    found = partly.sorted_part(func, args, kwargs, self._part(args[0]))
                elif _POINTWISE in func.tags:
                    parts = {id(t): self._part(t) for t in inputs}
                    found = partly.elementwise_part(func, args, kwargs, parts)
                else:
                    return False
        except Exception:  # noqa: BLE001  # an operator the CPU cannot run so: values unknown
            return False
        if found is None or found[1].shape != made.shape or not bool(found[0].any()):
            return False
        self._forget([t for t in _tensors(out) if t.is_meta])
        self._piece(made, found[1].to(made.dtype), found[0])
        return True

    def _part(self, tensor: torch.Tensor) -> partly.Part:
        """Where ``tensor``'s values are decided, and those values: all of them where known
        and not made up, those written so far of a storage known in part, else none."""
        found = self.decided(tensor)
        if found is not None:
            return torch.ones(tensor.shape, dtype=torch.bool, device=_CPU), found
        part = self.in_part(tensor)
        if part is not None:
            return part
        none = torch.zeros(tensor.shape, dtype=torch.bool, device=_CPU)
        return none, torch.zeros(tensor.shape, dtype=tensor.dtype, device=_CPU)

    def in_part(self, tensor: torch.Tensor) -> partly.Part | None:
        """Where ``tensor``'s values are known and those values, where its storage is known in
        part (:meth:`_piece`); None where it is not."""
        if not self._pieces or not tensor.is_meta:
            return None
        piece = self._pieces.get(tensor.untyped_storage()._cdata)
        if piece is None or piece[1].dtype != tensor.dtype:
            return None
        geometry = (tensor.size(), tensor.stride(), tensor.storage_offset())
        return piece[0].as_strided(*geometry), piece[1].as_strided(*geometry)

    def _written_piece(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """``tensor``'s values where it reads only elements of a partly written storage that
        known values were written into (:meth:`_piece`), else None: torchdiffeq's Runge-Kutta
        step writes each stage's slope into a column of an ``empty`` scratch tensor and sums
        the columns written so far for the next stage's state."""
        part = self.in_part(tensor)
        if part is None or not bool(part[0].all()):
            return None
        return part[1]

    def _copied_out(self, tensor: torch.Tensor, one: Any) -> None:
        """``tensor``'s storage, kept as its one value ``one``, is kept as a copy from now on."""
        storage = tensor.untyped_storage()
        key = storage._cdata
        del self._filled[key]
        count = storage.nbytes() // tensor.element_size()
        copy = torch.full((count,), one, dtype=tensor.dtype, device=_CPU).untyped_storage()
        if key not in self._values:
            when_released(storage, self._drop, key)
        self._values[key] = copy

    def _repeated(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, outs: list[Any]
    ) -> bool:
        """Whether ``out``, one large stand-in, was kept as a storage repeating a pattern
        (:mod:`~memforensics.plan.periodic`): a partition's, new or written in place (a one-hot
        of unknown indices, ``cnts.scatter_(1, topk_ids, 1)``), or a new one an elementwise
        operator or a copy made of such storages (or of small ones that repeat so), laid out
        as ``out`` is."""
        if not outs or any(t is not out for t in outs):
            return False  # an in-place operator's output is also the input it writes
        made: torch.Tensor = out
        result = assumed.partitioned(func, args, kwargs, made, self.value, self.routing)
        if result is not None:
            repeat = (
                result
                if isinstance(result, periodic.Repeat)
                else periodic.pattern(made, result, LIMIT)
            )
            if repeat is None:
                return False
            self._repeat(made, repeat, sized=True)
            return True
        if len(outs) != 1:
            return False  # in place: the pattern it would compute on is its storage's own
        if not (self._periodic or self._values or self._filled) or not (
            _POINTWISE in func.tags or func in _COPIES
        ):
            return False
        found = self._patterns(args, made)
        if found is None:
            return False
        repeats, block = found
        marks = [self._made_up.get(t.untyped_storage()._cdata) for t in _inputs(args, kwargs)]
        try:
            with _OnHost():
                computed = func(*repeats, **{k: _option(v) for k, v in kwargs.items()})
        except Exception:  # noqa: BLE001  # an operator the CPU cannot run so: values unknown
            return False
        if not isinstance(computed, torch.Tensor) or computed.dim() != 1:
            return False
        self._forget([made])
        self._repeat(
            made,
            periodic.Repeat(computed.to(made.dtype), block),
            made_up=any(m is not None for m in marks),
            guessed=any(bool(m) for m in marks),
            sized=self._all_sized(args, kwargs),
        )
        return True

    def _overwritten(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> bool:
        """Whether ``out`` was kept as an operator's that does not read its first input's values
        (:mod:`~memforensics.plan.unread`: ``ones_like``, ``new_zeros``, ``fill_``, ``zero_``,
        ``copy_``), its other inputs known: computed with any values there, whatever that input
        held, or, where it is large, kept as its one value (``torch.zeros`` of any size too).
        A write into part of a storage is left to the rule for any operator: the rest of the
        storage keeps what was known of it."""
        if not isinstance(out, torch.Tensor) or not out.is_meta:
            return False
        ignored = args[0] if func in unread.UNREAD else None
        if ignored is not None:
            if not isinstance(ignored, torch.Tensor) or not ignored.is_meta:
                return False
            if ignored.untyped_storage()._cdata == out.untyped_storage()._cdata and not (
                periodic.covers(out)
            ):
                return False
        others = _inputs(args[1:], kwargs)
        if ignored is not None and any(
            t.untyped_storage()._cdata == ignored.untyped_storage()._cdata for t in others
        ):
            return False  # the first input read through another (``x.copy_(x.t())``)
        if any(self.value(t) is None for t in others):
            return False
        storage = out.untyped_storage()
        if storage.nbytes() <= LIMIT:
            return ignored is not None and self._compute(func, args, kwargs, out, ignored)
        if any(self.made_up(t) for t in others):
            return False
        one = unread.one_value(func, args, self._one)
        if one is None:
            return False
        self.bounds.forget([out])
        self._mark(storage._cdata, made_up=False, guessed=False, sized=False)
        self._fill(out, one)
        return True

    def _one(self, tensor: torch.Tensor) -> Any:
        """The one value ``tensor`` holds everywhere, where it is known to hold one (a host
        tensor's only where it is small); else None."""
        if tensor.is_meta:
            filled = self._filled.get(tensor.untyped_storage()._cdata)
            if filled is not None and filled[1] == tensor.untyped_storage().nbytes():
                return filled[0]
            found = self.value(tensor)
        else:
            found = tensor if tensor.numel() * tensor.element_size() <= LIMIT else None
        if found is None or found.numel() == 0 or found.is_complex():
            return None
        first = found.reshape(-1)[0]
        return first.item() if bool((found == first).all()) else None

    def _patterns(self, args: tuple[Any, ...], made: torch.Tensor) -> tuple[list[Any], int] | None:
        """The arguments of an elementwise operator making ``made`` with each tensor taken as
        the pattern its storage repeats, and the pattern's block, where each is laid out as
        ``made`` (over all of their storages) over a storage repeating one of the same period,
        or is a known number; None otherwise."""
        found: list[Any] = []
        shared: tuple[int, int] | None = None
        for arg in args:
            if not isinstance(arg, torch.Tensor):
                found.append(arg)
                continue
            if arg.dim() == 0:  # a number on the device or the host: its value where known
                one = self.value(arg) if arg.is_meta else arg
                if one is None:
                    return None
                found.append(one)
                continue
            if not arg.is_meta or arg.shape != made.shape or arg.stride() != made.stride():
                return None
            if not (periodic.covers(arg) and periodic.covers(made)):
                return None
            repeat = self._repeat_of(arg)
            if repeat is None:
                return None
            period = (repeat.pattern.numel(), repeat.block)
            if shared is not None and period != shared:
                return None
            shared = period
            found.append(repeat.pattern)
        return (found, shared[1]) if shared is not None else None

    def _repeat_of(self, tensor: torch.Tensor) -> periodic.Repeat | None:
        """What ``tensor``'s storage repeats (``tensor`` laid out over all of it): kept so, or
        found in its small copy."""
        key = tensor.untyped_storage()._cdata
        repeated = self._periodic.get(key)
        if repeated is not None:
            return repeated[0] if repeated[1] == tensor.untyped_storage().nbytes() else None
        filled = self._filled.get(key)
        if filled is not None:
            one = torch.full((1,), filled[0], dtype=tensor.dtype, device=_CPU)
            return periodic.Repeat(one, tensor.numel())
        found = self.value(tensor)
        return None if found is None else periodic.pattern(tensor, found, LIMIT)

    def _all_sized(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], ignored: Any = None
    ) -> bool:
        """Whether every made-up input (but ``ignored``, whose values are not read) was made up
        by partitions alone."""
        return all(
            t.untyped_storage()._cdata in self._sized
            for t in _inputs(args, kwargs)
            if t is not ignored and t.untyped_storage()._cdata in self._made_up
        )

    def _repeat(
        self,
        made: torch.Tensor,
        repeat: periodic.Repeat,
        made_up: bool = True,
        guessed: bool = False,
        sized: bool = False,
    ) -> None:
        """``made``'s storage repeats ``repeat`` from now on (:mod:`~memforensics.plan.
        periodic`), made up so, from a guess, by partitions alone as said."""
        storage = made.untyped_storage()
        key = storage._cdata
        self._values.pop(key, None)
        self._filled.pop(key, None)
        self.bounds.forget([made])
        self._mark(key, made_up, guessed, sized)
        if key not in self._periodic:
            when_released(storage, self._drop, key)
        self._periodic[key] = (repeat, storage.nbytes())

    def _mark(self, key: int, made_up: bool, guessed: bool, sized: bool) -> None:
        if made_up:
            self._made_up[key] = guessed
            if sized:
                self._sized.add(key)
            else:
                self._sized.discard(key)
        elif self._made_up:
            self._made_up.pop(key, None)
            self._sized.discard(key)

    def _changed(
        self, func: Any, args: tuple[Any, ...], made: list[torch.Tensor]
    ) -> list[torch.Tensor]:
        """The stand-ins whose values ``func`` set: those it made and those it wrote into."""
        outs = list(made)
        writes = self._writes.get(func)
        if writes is None:
            writes = self._writes[func] = _written(func)
        for i in writes:
            if i < len(args) and not (func is _UNSCALE and i == 1):
                outs.extend(t for t in _tensors(args[i]) if t.is_meta)
        return outs

    def _guessed(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        made: list[torch.Tensor],
        guess: Callable[[], float | None],
    ) -> bool:
        """Unknown scalars (:func:`_scalar`) given a made-up value: the inputs that keep the
        outputs unknown, where all of them are such scalars (the outputs are then computed from
        them), else the new scalar outputs (the others forgotten). Whether the outputs are
        known now."""
        inputs = _inputs(args, kwargs)
        unknown = [t for t in inputs if self.value(t) is None]
        if unknown and all(_scalar(t) for t in unknown):
            value = guess()
            if value is None:
                return False
            for tensor in unknown:
                self.make_up(tensor, value)
            return self._compute(func, args, kwargs, out)
        keys = {t.untyped_storage()._cdata for t in inputs}
        scalars = [t for t in made if _scalar(t) and t.untyped_storage()._cdata not in keys]
        if not scalars or (value := guess()) is None:
            return False
        self._forget(made)
        for tensor in scalars:
            self.make_up(tensor, value)
        return True

    def computed(self, written: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> bool:
        """An operator the plan answers itself wrote ``(output, values, input)`` for each
        output (an all-gather, :func:`~memforensics.plan.gathered.own_gathered`; a sparse
        product, :mod:`~memforensics.plan.sparse`): each output small enough holds its values,
        marked as its input is; False, and nothing kept, where one is too large."""
        if any(output.untyped_storage().nbytes() > LIMIT for output, _, _ in written):
            return False
        for output, values, given in written:
            key = given.untyped_storage()._cdata
            self._keep(output, values, self.made_up(given), self.guessed(given), key in self._sized)
        return True

    def make_up(self, tensor: torch.Tensor, value: float) -> None:
        """``tensor`` (a new scalar of unknown value) holds the made-up ``value`` from now on,
        and so does what is computed from it, each marked as made up."""
        value_on_cpu = torch.tensor(value, dtype=tensor.dtype, device=_CPU)
        self._keep(tensor, value_on_cpu, made_up=True, guessed=True)

    def copied(self, source: torch.Tensor, copy: torch.Tensor) -> None:
        """``copy`` was made outside the device's dispatch as a copy of ``source``: it holds
        ``source``'s values where they are known."""
        found = self.value(source)
        if found is not None and copy.untyped_storage().nbytes() <= LIMIT:
            sized = source.untyped_storage()._cdata in self._sized
            self._keep(copy, found, self.made_up(source), self.guessed(source), sized)

    def made_up(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor``'s known values come from a made-up one."""
        return bool(self._made_up) and tensor.untyped_storage()._cdata in self._made_up

    def guessed(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor``'s known values come from a made-up floating-point scalar
        (:meth:`make_up`), not from what the plan assumes of unknown values."""
        return bool(self._made_up) and self._made_up.get(tensor.untyped_storage()._cdata, False)

    def _finite(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> bool:
        """Whether ``out`` is decided because unknown values are finite (a test of finiteness
        on one), or is one value everywhere because its inputs are (an elementwise operator, or
        ``all``/``any``, on such results); it is then kept."""
        if (
            (not self._filled and func not in _FINITENESS)  # one lookup, where the chain makes 4
            or not isinstance(out, torch.Tensor)
            or not out.is_meta
            or not args
        ):
            return False
        first = args[0]
        if not isinstance(first, torch.Tensor) or not first.is_meta:
            return False
        if self._filled:
            whole = _WHOLE.get(func)
            if whole is not None:
                filled = self._filled.get(first.untyped_storage()._cdata)
                if filled is None:
                    return False
                self._fill(out, filled[0] if first.numel() else whole)
                return True
            if _POINTWISE in func.tags and self._pointwise(func, args, kwargs, out):
                return True
        if func in _NEVER:
            truth = False
        elif func in _SCALAR_TESTS and _infinite(args[1:]):
            truth = _SCALAR_TESTS[func]
        elif func in _SELF_TESTS and len(args) > 1 and args[1] is first:
            truth = _SELF_TESTS[func]
        elif func in _SELF_DIFFERENCES and _less_itself(func, args, kwargs):
            self._fill(out, 0)  # exact, known or made up as ``first`` may be
            return True
        else:
            return False
        if self.value(first) is not None:
            return False
        self._fill(out, truth)
        return True

    def _pointwise(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: torch.Tensor
    ) -> bool:
        """An elementwise operator whose tensor inputs each hold one value everywhere: its
        output does too, computed on one element."""
        if any(isinstance(value, torch.Tensor) for value in kwargs.values()):
            return False
        one: list[Any] = []
        for arg in args:
            if not isinstance(arg, torch.Tensor):
                one.append(arg)
                continue
            filled = self._filled.get(arg.untyped_storage()._cdata) if arg.is_meta else None
            if filled is None:
                return False
            one.append(torch.full((), filled[0], dtype=arg.dtype, device=_CPU))
        try:
            computed = func(*one, **kwargs)
        except Exception:  # noqa: BLE001  # an operator the CPU cannot run so: values unknown
            return False
        if not isinstance(computed, torch.Tensor) or computed.dim() != 0:
            return False
        self._fill(out, computed.item())
        return True

    def _fill(self, made: torch.Tensor, flag: Any) -> None:
        """``made`` holds ``flag`` everywhere: kept as a copy when small, else as the one value
        (a tensor of flags the size of a model's gradients costs no host memory)."""
        storage = made.untyped_storage()
        if storage.nbytes() <= LIMIT:
            self._keep(made, torch.full(made.shape, flag, dtype=made.dtype, device=_CPU))
            return
        key = storage._cdata
        self._values.pop(key, None)
        if self._periodic:
            self._periodic.pop(key, None)
        if key not in self._filled:
            when_released(storage, self._filled.pop, key, None)
        self._filled[key] = (flag, storage.nbytes())

    def _decided(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        matches: assumed.Matches | None = None,
    ) -> bool:
        """Whether the outputs' values are known after ``func``: computed when every input is
        known, or decided by an absorbing side of ``or``/``and``; a count of a test against one
        of a router's classes is its share (:meth:`~memforensics.plan.routing.Routing.
        counted`), a sum over a view of a repeating storage is counted from its pattern."""
        counted = self.routing.counted(func, args, kwargs, out)
        if counted is not None:
            self._keep(out, counted, made_up=True, sized=True)
            return True
        if self._periodic and func in _VIEW_COUNTS and self._counted_view(func, args, kwargs, out):
            return True
        if func in assumed.MOVES and self._moved(args, out):
            return True  # whatever the indices say, made up or not
        inputs = [*_tensors(args), *(t for v in kwargs.values() for t in _tensors(v))]
        copies = [self.value(t) if t.is_meta else t for t in inputs]
        if all(c is not None for c in copies):
            found = {id(t): c for t, c in zip(inputs, copies, strict=True)}
            return self._compute(func, args, kwargs, out, found=found)
        if self.extremes and (extreme := self.extremes.reduced(func, args, kwargs)) is not None:
            self._keep(out, extreme)
            return True
        if func in OR or func in AND:
            return self._absorbed(func in OR, copies, out)
        if func in _SCALAR_OR or func in _SCALAR_AND:
            return self._absorbed(func in _SCALAR_OR, [_flags(args[1:], out)], out)
        if func in _MASKED_WRITES and self._unwritten(args, out):
            return True
        if not isinstance(out, torch.Tensor) or not out.is_meta:
            return False
        partition = assumed.partitioned(func, args, kwargs, out, self.value, self.routing)
        if isinstance(partition, periodic.Repeat):
            partition = periodic.viewed(partition, out, LIMIT)
        if partition is not None:
            self._keep(out, partition, made_up=True, sized=True)
            return True
        result = (
            self._combined(args, out, matches)
            if func is _ADD
            else assumed.decided(func, args, kwargs, out, self.value, matches)
        )
        if result is None:
            return False
        self._keep(out, result, made_up=True)
        return True

    def _combined(
        self, args: tuple[Any, ...], out: torch.Tensor, matches: assumed.Matches | None
    ) -> torch.Tensor | None:
        """``out``'s values as a confusion matrix's index of ``C`` classes, where it is an
        integer sum of a known and an unknown tensor of its shape, one side integers times
        ``C`` (:meth:`_scale`): the targets times ``C`` plus the predictions
        (``target * C + pred``, the known side the product) or the predictions times ``C`` plus
        the targets (``C * pred + target``, the unknown side the product), the predictions
        matching as :meth:`~memforensics.plan.targets.Targets.combined` says; else None."""
        if matches is None or len(args) != 2 or not self._scales:
            return None
        if not all(isinstance(a, torch.Tensor) and a.shape == out.shape for a in args):
            return None
        if any(a.is_floating_point() or a.is_complex() or a.dtype == torch.bool for a in args):
            return None
        copies = [self.value(a) if a.is_meta else a for a in args]
        side = 0 if copies[0] is not None else 1
        known, unknown = copies[side], args[1 - side]
        if known is None or copies[1 - side] is not None:
            return None
        classes = self._scale_of(unknown)
        predictions_scaled = classes is not None
        if classes is None:
            classes = self._scale_of(args[side])
            if classes is None or bool((known % classes).any()):
                return None
            known = known // classes
        targets = known.reshape(-1).to(torch.int64)
        predicted = self.targets.combined(targets, classes, matches)
        if predicted is None:
            return None
        rows, columns = (predicted, targets) if predictions_scaled else (targets, predicted)
        return (rows * classes + columns).reshape(out.shape).to(out.dtype)

    def _confusion(self, args: tuple[Any, ...], out: Any, matches: assumed.Matches | None) -> bool:
        """Whether ``out``, a large stand-in of at most :data:`HOST_LIMIT` bytes (a
        segmentation batch's pixels), was kept as a confusion matrix's index
        (:meth:`_combined`), made up: it costs the host what its targets' copy does."""
        if not isinstance(out, torch.Tensor) or out.untyped_storage().nbytes() > HOST_LIMIT:
            return False
        result = self._combined(args, out, matches)
        if result is None:
            return False
        self._keep(out, result, made_up=True)
        return True

    def _scale(self, func: Any, args: tuple[Any, ...], out: Any, outs: list[torch.Tensor]) -> None:
        """After ``func`` set ``outs``: what was kept of them as products is forgotten, and
        ``out``, a product of integers and a whole number ``C`` of two at least
        (``target * C``, ``C * pred``), known or not, laid out over all of its storage, is kept
        as one: a side of a confusion matrix's index (:meth:`_combined`)."""
        for tensor in outs if self._scales else ():
            self._scales.pop(tensor.untyped_storage()._cdata, None)
        if func is not _MUL or not isinstance(out, torch.Tensor) or not out.is_meta:
            return
        if len(args) != 2 or out.dtype == torch.bool or not integral(out.dtype):
            return
        if not periodic.covers(out):
            return
        factors = [
            self._number(number)
            for tensor, number in (args, args[::-1])
            if isinstance(tensor, torch.Tensor) and tensor.shape == out.shape
        ]
        factor = next((f for f in factors if f is not None), None)
        if factor is None or factor < 2:
            return
        storage = out.untyped_storage()
        key = storage._cdata
        if key not in self._scaled:
            self._scaled.add(key)
            when_released(storage, self._unscaled, key)
        self._scales[key] = (factor, storage.nbytes())

    def _unscaled(self, key: int) -> None:
        """A storage kept as a product (:meth:`_scale`) died."""
        self._scaled.discard(key)
        self._scales.pop(key, None)

    def _scale_of(self, tensor: torch.Tensor) -> int | None:
        """The number ``tensor``'s storage was multiplied by (:meth:`_scale`), or None."""
        if not tensor.is_meta:
            return None
        storage = tensor.untyped_storage()
        found = self._scales.get(storage._cdata)
        return found[0] if found is not None and found[1] == storage.nbytes() else None

    def _number(self, value: Any) -> int | None:
        """``value`` as a whole number: a Python integer, or a known integer tensor of one
        element; else None."""
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if not isinstance(value, torch.Tensor) or value.dim() != 0:
            return None
        if value.dtype == torch.bool or not integral(value.dtype):
            return None
        found = self.decided(value) if value.is_meta else value
        return None if found is None else int(found)

    def _counted_view(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> bool:
        """Whether ``out`` was kept as a sum, count or ``any`` over dimensions of a view of a
        repeating storage too large to read element by element (a one-hot's classes summed
        over its rows: ``expert_mask.sum(dim=(-1, -2))``)."""
        viewed = args[0] if args else None
        if not isinstance(viewed, torch.Tensor) or not isinstance(out, torch.Tensor):
            return False
        if not viewed.is_meta or not out.is_meta or viewed.dim() == 0:
            return False
        if set(kwargs) - {"dtype", "dim", "keepdim"} or self.value(viewed) is not None:
            return False
        named = args[1] if len(args) > 1 else kwargs.get("dim")
        if named is None or named == []:
            dims = list(range(viewed.dim()))
        else:
            listed = named if isinstance(named, (list, tuple)) else [named]
            dims = sorted({int(d) % viewed.dim() for d in listed})
        nonzero = func not in (torch.ops.aten.sum.default, torch.ops.aten.sum.dim_IntList)
        found = self._reduced_view(viewed, dims, nonzero)
        if found is None:
            return False
        if func in (torch.ops.aten.any.default, torch.ops.aten.any.dims, torch.ops.aten.any.dim):
            found = found > 0
        key = viewed.untyped_storage()._cdata
        made_up = key in self._made_up
        self._keep(
            out,
            found.to(out.dtype).reshape(out.shape),
            made_up=made_up,
            guessed=bool(self._made_up.get(key)),
            sized=made_up and key in self._sized,
        )
        return True

    def _read(self, value: Any, known: dict[int, torch.Tensor | None]) -> Any:
        """An argument as :meth:`_compute` runs it on the CPU: a stand-in as its copy (the one
        in ``known``, by the ``id`` of its tensor, where the caller read it already), in lists
        too. A method, not a closure calling itself, which would make a reference cycle that
        keeps the call's tensors (a module's parameters among them) alive until Python's
        collector runs, where a GPU frees them when the script drops them."""
        if isinstance(value, torch.Tensor):
            copy = known.get(id(value))
            if copy is not None:
                return copy
            return self.value(value) if value.is_meta else value
        if isinstance(value, (list, tuple)):
            return type(value)(self._read(v, known) for v in value)
        if isinstance(value, torch.device) and value.type == "meta":
            return _CPU
        return value

    def _compute(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        ignored: torch.Tensor | None = None,
        found: dict[int, torch.Tensor | None] | None = None,
    ) -> bool:
        """Whether ``func`` was run again on the inputs' CPU copies, its outputs kept so;
        ``ignored``: an input whose values it does not read (:mod:`~memforensics.plan.unread`),
        taken as zeros and not counted among the inputs its marks come from; ``found``: the
        copies the caller has already read, by the ``id`` of their tensor in this call (each
        read builds a view of its copy anew)."""
        known = found or {}
        cpu_args = tuple(self._read(a, known) for a in args)
        if ignored is not None:  # the first argument (:data:`~memforensics.plan.unread.UNREAD`)
            cpu_args = (torch.zeros(ignored.shape, dtype=ignored.dtype, device=_CPU), *cpu_args[1:])
        cpu_kwargs = {k: self._read(v, known) for k, v in kwargs.items()}
        try:
            with _OnHost():
                if torch.Tag.nondeterministic_seeded in func.tags:
                    result = self._drawn(func, cpu_args, cpu_kwargs)
                else:
                    result = func(*cpu_args, **cpu_kwargs)
                outs, results = _leaves(out), _leaves(result)
                if len(outs) != len(results):
                    return False
                inputs = _inputs(args, kwargs) if self._made_up else []
                read = [t for t in inputs if t is not ignored]
                marks = [self._made_up.get(t.untyped_storage()._cdata) for t in read]
                made_up = any(mark is not None for mark in marks)
                guessed = any(marks)
                sized = made_up and self._all_sized(args, kwargs, ignored)
                source = _FROM_HOST.get(func)
                copied = source is not None and not args[source].is_meta
                hosted = self._hosted_values(func, args, kwargs, ignored, copied) and not made_up
                given = {id(v) for v in (*cpu_args, *cpu_kwargs.values())}
                for made, result in zip(outs, results, strict=True):
                    if isinstance(made, torch.Tensor) and made.is_meta:
                        computed = _emptied(result, made)
                        fresh = id(computed) not in given
                        self._keep(made, computed, made_up, guessed, sized, fresh=fresh)
                        if hosted:
                            self._hosted.add(made.untyped_storage()._cdata)
                if copied and results:
                    made = outs[0]
                    self.targets.given(results[0], None, made.untyped_storage()._cdata)
        except Exception:  # noqa: BLE001  # an operator the CPU cannot run so: values unknown
            return False
        return True

    def _hosted_values(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        ignored: torch.Tensor | None,
        copied: bool,
    ) -> bool:
        """Whether what ``func`` computes holds values the host's data alone decide
        (:meth:`_hosted_inputs`): a copy of a host tensor that requires no gradient, or any
        operator but a random draw on such values alone."""
        if torch.Tag.nondeterministic_seeded in func.tags:
            return False
        if copied:
            return not args[_FROM_HOST[func]].requires_grad
        if not self._hosted:
            return False
        return self._hosted_inputs([t for t in _inputs(args, kwargs) if t is not ignored])

    def _drawn(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A random operator run on the plan's own CPU generator: the script's CPU draws are
        what they would be without the plan."""
        state = torch.get_rng_state()
        torch.set_rng_state(self._rng.get_state())
        try:
            return func(*args, **kwargs)
        finally:
            self._rng.set_state(torch.get_rng_state())
            torch.set_rng_state(state)

    def _absorbed(self, either: bool, copies: list[torch.Tensor | None], out: Any) -> bool:
        """``or`` with a known all-true input is all true; ``and`` with a known all-false input
        is all false, of the output's shape."""
        if not isinstance(out, torch.Tensor) or not out.is_meta:
            return False
        for copy in copies:
            if copy is None or copy.shape != out.shape:
                continue
            if (either and bool(copy.all())) or (not either and not bool(copy.any())):
                self._keep(out, torch.full(out.shape, either, dtype=out.dtype, device=_CPU))
                return True
        return False

    def _moved(self, args: tuple[Any, ...], out: Any) -> bool:
        """Values moved by integer indices from a source of one value
        (:func:`~memforensics.plan.assumed.moved`), made up only where the source is, not
        where the indices are: PyTorch Geometric's ``TopKPooling`` gathers a single graph's
        batch vector, all zeros, by a sort of unknown scores, then sorts it stably and masks by
        it, which decides how many nodes each level keeps. A mask's selection is left to the
        rules for data-dependent shapes: how many values it takes is the mask's to say."""
        if not isinstance(out, torch.Tensor) or not out.is_meta:
            return False
        if any(i.dtype in MASK_DTYPES for index in args[1:] for i in _tensors(index)):
            return False
        found = assumed.moved(args, out, self.value)
        if found is None:
            return False
        mark = self._made_up.get(args[0].untyped_storage()._cdata)
        self._keep(out, found, made_up=mark is not None, guessed=bool(mark))
        return True

    def _unwritten(self, args: tuple[Any, ...], out: Any) -> bool:
        """A masked or indexed write (:data:`_MASKED_WRITES`) whose known indices select no
        position writes nothing, whatever the values it would write: its output holds its
        known destination's values (``eos_idx[is_eos.any(1)] = ...`` where no end-of-sequence
        token was generated). Made up where the destination or the selection is."""
        if len(args) < 2 or not isinstance(out, torch.Tensor) or not out.is_meta:
            return False
        destination = args[0]
        if not isinstance(destination, torch.Tensor) or not destination.is_meta:
            return False
        kept = self.value(destination)
        if kept is None or kept.shape != out.shape:
            return False
        chosen = args[1] if isinstance(args[1], (list, tuple)) else [args[1]]
        selections = [i for i in chosen if isinstance(i, torch.Tensor)]
        if not selections:
            return False
        selects_none = False
        for index in selections:
            found = self.value(index) if index.is_meta else index
            if found is None:
                return False
            if index.dtype == torch.bool:
                selects_none = selects_none or not bool(found.any())
            else:
                selects_none = selects_none or found.numel() == 0
        if not selects_none:
            return False
        marks = [self._made_up.get(t.untyped_storage()._cdata) for t in [destination, *selections]]
        computed = kept.clone()
        self._keep(out, computed, any(m is not None for m in marks), any(bool(m) for m in marks))
        return True

    def _keep(
        self,
        made: torch.Tensor,
        computed: Any,
        made_up: bool = False,
        guessed: bool = False,
        sized: bool = False,
        *,
        fresh: bool = False,
    ) -> None:
        """``computed`` becomes ``made``'s values: written into its storage's copy (a new one
        when the storage is new, the same one for an in-place write); ``made_up``: computed
        from a made-up value, ``guessed``: from a made-up floating-point scalar, ``sized``:
        from partitions alone (:meth:`sized`). ``fresh``: ``computed`` is an operator's new
        output, none of its arguments; where the storage is new and ``computed`` lies in a
        storage of its own as ``made`` lies in its (:func:`_own_copy`), that storage becomes
        the copy, with nothing copied (most outputs of a small operator run again)."""
        storage = made.untyped_storage()
        key = storage._cdata
        if self._pieces and key in self._pieces and key not in self._values:
            if isinstance(computed, torch.Tensor) and not (made_up or guessed or sized):
                self._piece(made, computed)  # known values into known parts or unknown ones
                return
            self._pieces.pop(key)  # made up: the whole storage is, as where nothing is known
        self._filled.pop(key, None)
        if self._periodic:
            self._periodic.pop(key, None)
        self.bounds.forget([made])
        self._mark(key, made_up, guessed, sized)
        if self._hosted:
            self._hosted.discard(key)
        kept = self._values.get(key)
        if kept is None and fresh and (own := _own_copy(computed, made, storage.nbytes())):
            self._values[key] = own
            when_released(storage, self._drop, key)
            return
        if kept is None:
            kept = torch.empty(storage.nbytes(), dtype=torch.uint8, device=_CPU).untyped_storage()
            self._values[key] = kept
            when_released(storage, self._drop, key)
        if not isinstance(computed, torch.Tensor):
            return
        view = self._view(kept, made)
        if _HOST_ADDRESS(view) != _HOST_ADDRESS(computed):
            view, computed = _unexpanded(view, computed)
            view.copy_(computed)

    def _drop(self, key: int) -> None:
        """A storage died: its copy and its mark go with it."""
        self._values.pop(key, None)
        self._periodic.pop(key, None)
        self._made_up.pop(key, None)
        self._sized.discard(key)
        self._hosted.discard(key)

    def written(self, tensors: list[torch.Tensor]) -> None:
        """``tensors`` were written by code the plan does not run (a Triton kernel): what was
        known of their values is not any more."""
        self._forget([tensor for tensor in tensors if tensor.is_meta])

    def _forget(self, outs: list[torch.Tensor]) -> None:
        self.bounds.forget(outs)
        if self.extremes:
            self.extremes.forget(outs)
        for tensor in outs:
            key = tensor.untyped_storage()._cdata
            self._made_up.pop(key, None)
            self._sized.discard(key)
            self._hosted.discard(key)
            self._values.pop(key, None)
            self._filled.pop(key, None)
            self._periodic.pop(key, None)
            if self._pieces:
                self._pieces.pop(key, None)

    @staticmethod
    def _view(kept: torch.UntypedStorage, like: torch.Tensor) -> torch.Tensor:
        """``like``'s view of the copy ``kept``: its geometry, and its lazy conjugate or
        negation (``z.conj()`` is a view that reads its storage conjugated)."""
        view = torch.empty(0, dtype=like.dtype, device=_CPU)
        view = view.set_(kept, like.storage_offset(), like.size(), like.stride())
        if like.is_conj():
            view = view.conj()
        if like.is_neg():
            view = view._neg_view()
        return view
