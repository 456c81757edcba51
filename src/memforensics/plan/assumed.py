"""What a plan assumes of the values it does not know, and the operators those assumptions
decide.

A model's outputs (logits, scores, the tokens chosen from them) are unknown in a plan
(:mod:`memforensics.plan.known`). They are taken to be those of a run whose sequences never end
early, and where an operator's result is the same for every such value, it is known:

- *Unknown values are ordinary numbers*: smaller in size than :data:`ORDINARY`. A comparison
  with a number at or beyond it (the ``-1e9`` score Hugging Face gives a beam that cannot win, a
  dtype's lowest value used as a mask, an infinity) comes out as any ordinary value's would.
- *A made-up integer is none of the values the script names*: it equals none of a known
  tensor's values or a number (``isin`` against the end-of-sequence tokens is false, ``!= -100``
  true), so no generated token ends decoding before its maximum length.
- *Unknown floating-point values compare as equal*: each reads as its round's one value, so a
  comparison of two unknown floating-point tensors is decided as that of their reads (``>=``,
  ``<=`` and ``==`` true, the strict ones and ``!=`` false): a detection loss's check that its
  predicted boxes' far corners lie beyond their near ones (``(boxes[:, 2:] >= boxes[:, :2]).all()``)
  passes, as it does on a GPU, where the widths are a sigmoid's.
- *A made-up integer is not negative*: it is a token, a class or a beam index, as the zeros an
  integer reads as are, so an order test of it against known values on the other side of zero
  is decided (``beam_indices < 0``, the padding test after beam search, is false: it agrees
  with the count of flags that gave the search its full length).
- *The extreme of made-up integers is the zero they read as*: ``max`` or ``min`` over the whole
  of an unknown integer tensor is known as zero, so what is computed from it agrees with its
  read. st-moe's ``safe_one_hot`` takes ``max(indexes.max() + 2, capacity)`` classes and cuts
  the one-hot back to ``capacity``: were ``indexes.max() + 2`` unknown, it would read as zero
  and its test against the capacity as false, giving a one-hot of no class and no expert a
  token.
- *A selection takes only what it selects*: ``where`` with a known condition that picks one side
  everywhere is that side.
- *Values moved from a tensor holding one value everywhere are that value*, whatever the
  indices (``gather``, ``index_select``, indexing): a beam search's "finished" flags, all false,
  stay all false when the beams are reordered by their unknown scores. Moved by integer indices
  the plan made up, they are made up only where the tensor is
  (:class:`~memforensics.plan.known.Known` asks :func:`moved` first).
- *A count of unknown flags takes its upper bound*, every flag set, as a data-dependent shape
  does: the generated length beam search measures from its beam indices is its maximum.
- *A histogram of unknown integers counts every one of them*, each as the zero an integer reads
  as: ``bincount``'s bins (``histc``'s, where its range holds zero) sum to the number of values
  counted, so a split by them (a mixture of experts' tokens per expert, read with ``tolist``)
  covers every token routed, with all of them at the first expert, the most any one takes.
- *A sum scattered by unknown indices adds every value*, each at index 0, as the indices read:
  ``scatter_add`` and ``index_add`` of known values into a known tensor (the counts of a
  router's choices, ``zeros(e).scatter_add_(0, ids, ones)``) sum to what was added, all at
  the first place, as a histogram's do.
- *Unknown indices a value is written at (not added) are distinct along the dimension*, the
  ``k`` of each slice ``0 .. k-1`` (``k`` at most the dimension's size): ``scatter_`` of known
  values, a one-hot (``zeros(n, c).scatter_(1, labels[:, None], 1)``, class 0 as below) or a
  router's top-k choices marked in rows of zeros (DeepSeek's ``cnts.scatter_(1, topk_ids,
  1)``), whose sums count every routed token once per chosen expert, each expert at most every
  token, as a row's top-k choices are distinct.
- *An unknown integer tested against every class at once is one of them*, class 0, the zero an
  integer reads as: an equality test of unknown integers with known values that give each of
  them the classes ``0 .. c-1`` (``c`` at least two) along the dimensions it is broadcast over
  (``one_hot``, which is ``index.unsqueeze(-1) == arange(c)`` on a ``meta`` tensor, or a
  script's own ``idx[..., None] == torch.arange(c)``) is true at class 0 alone. So a one-hot's
  rows each hold one set entry, as on a GPU, and its slices by class take every row between
  them, all at class 0: the sizes taken from them (``torch.where(expert_mask[e])`` in a mixture
  of experts' loop over its experts) sum to the rows, exact in total for any routing, with the
  first class taking the most any one can, as the histogram's counts do.
- *A model's predictions come closer to their targets as it trains*: integers compared
  elementwise with integers of the same shape, the unknown against the unknown or against
  targets holding more than one value (``argmax(logits) == labels``), match as many as the
  caller's count says, the first ones; an accuracy computed from them rises round by round. So
  do predictions combined with their targets into a confusion matrix's index, either one
  times the number of classes plus the other
  (:meth:`~memforensics.plan.targets.Targets.combined`). An end-of-sequence test compares
  with one named value, and stays never equal.

Where the unknown integers are a router's choices, indices into a dimension of ``E`` classes
(:class:`~memforensics.plan.routing.Routing`), the partitions read them as a balanced routing
spreads them, element ``i`` of their storage at class ``i mod E``
(:meth:`~memforensics.plan.routing.Routing.assigned`), not all at class 0: ``bincount``'s and
``histc``'s bins, the sums scattered at them, their one-hot and the rows marked by them each
give every class its share, ``m // E`` of ``m``, one more for the first ``m % E``, as a test
against one class selects. A one-hot of them in rows repeats every ``E`` rows, kept so
(:class:`~memforensics.plan.periodic.Repeat`).

The histogram, the scattered sum, the distinct writes and the class test are *partitions*:
whatever the unknown values, each is counted once, so the sizes taken from what they decide
(:func:`partitioned`) are those of a real routing. The others decide values, never a size.

Each rule returns the operator's result computed on the CPU, or None where it does not apply;
the class test's is broadcast from the few values it varies in, so it costs no host memory that
grows with the rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from memforensics.plan import periodic
from memforensics.plan.routing import Routing, share

ORDINARY = 1e9
"""Size no unknown value reaches: a comparison with a number this large or larger is decided."""

Values = Callable[[torch.Tensor], "torch.Tensor | None"]
"""A stand-in's known values on the CPU, or None when unknown."""
Matches = Callable[[int], "int | None"]
"""How many of so many predictions compared with their targets match (the first ones), or None
where the caller gives no count."""

_aten = torch.ops.aten
_COMPARISONS = frozenset(
    getattr(getattr(_aten, name), overload)
    for name in ("eq", "ne", "lt", "le", "gt", "ge")
    for overload in ("Tensor", "Scalar")
)
_EQUALITY = {
    _aten.eq.Tensor: False,
    _aten.eq.Scalar: False,
    _aten.ne.Tensor: True,
    _aten.ne.Scalar: True,
}
"""Equality tests, and what a made-up integer gives against a value the script names."""
_SCORES = {_aten.eq.Tensor: True, _aten.ne.Tensor: False}
"""Elementwise tests of predictions against targets, and what a match gives."""
_ISIN = frozenset((_aten.isin.Tensor_Tensor, _aten.isin.Tensor_Scalar))
MOVES = frozenset(
    (_aten.gather.default, _aten.index_select.default, _aten.index.Tensor, _aten.take.default)
)
"""Operators that only move their first argument's values to where indices say."""
_COUNTS = frozenset((_aten.sum.default, _aten.sum.dim_IntList, _aten.count_nonzero.dim_IntList))
_EXTREMES = frozenset((_aten.max.default, _aten.min.default))
"""Reductions of a whole tensor to its largest or smallest value."""
_HISTOGRAMS = frozenset((_aten.bincount.default, _aten.histc.default))
"""Histograms of their first argument's values, the rest of their arguments known."""
_SCATTERED_SUMS = frozenset(
    (
        _aten.scatter_add.default,
        _aten.scatter_add_.default,
        _aten.index_add.default,
        _aten.index_add_.default,
    )
)
"""Sums of known values into a known tensor at indices (``(self, dim, index, src)``): a
histogram by those indices where the values are ones (``zeros(e).scatter_add_(0, ids, ones)``)."""
_SCATTERS = frozenset(
    (_aten.scatter.value, _aten.scatter_.value, _aten.scatter.src, _aten.scatter_.src)
)
"""Writes of known values into a known tensor at indices along a dimension (``(self, dim, index,
value or src)``), the last write at a repeated index winning in no order CUDA promises: a
one-hot (``zeros(n, c).scatter_(1, labels[:, None], 1)``), a router's top-k choices marked
(``new_zeros((n, e)).scatter_(1, topk_ids, 1)``)."""
_SMALL = 1 << 16
"""Most bytes of a scattered result computed whole where it does not repeat one slice."""
_CLASS_TESTS = frozenset((_aten.eq.Tensor, _aten.ne.Tensor))
"""Equality tests of two tensors: against every class at once, a one-hot."""
_PARTITIONS = _HISTOGRAMS | _SCATTERED_SUMS | _CLASS_TESTS | _SCATTERS
"""Every operator :func:`partitioned` may decide: one lookup turns the rest away (an operator
is hashed in Python, on each lookup)."""
_CLASSES = 1 << 16
"""Most known values a test against every class is looked at for (a class index's ``arange``)."""
_CPU = torch.device("cpu")


def decided(
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    out: torch.Tensor,
    values: Values,
    matches: Matches | None = None,
) -> torch.Tensor | None:
    """``func``'s result (``out``'s values) on the CPU where the assumptions decide it, else
    None. ``matches``: how many predictions match their targets (:func:`_scored`). The
    partitions are :func:`partitioned`'s, asked first."""
    if func in _SCORES and matches is not None:
        scored = _scored(func, args, out, values, matches)
        if scored is not None:
            return scored
    if func in _COMPARISONS:
        ordinary = _ordinary(func, args, kwargs, values)
        if ordinary is None:
            ordinary = _signed(func, args, kwargs, values)
        if ordinary is None:
            ordinary = _alike(func, args, kwargs, values)
        return ordinary if ordinary is not None else _named(func, args, out, values)
    if func in _ISIN:
        return _named(func, args, out, values, kwargs.get("invert", False))
    if func is _aten.where.self:
        return _selected(args, values)
    if func in MOVES and any(_unknown(a, values) for a in _flat(args[1:])):
        return moved(args, out, values)
    if func in _COUNTS:
        return _counted(func, args, kwargs, values)
    if func in _EXTREMES:
        return _extreme_integer(args, out, values)
    return None


def partitioned(
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    out: torch.Tensor,
    values: Values,
    routing: Routing | None = None,
) -> torch.Tensor | periodic.Repeat | None:
    """``func``'s result on the CPU where an assumption that counts each unknown value once
    decides it (a histogram, a test against every class: sizes taken from it are a real
    routing's), else None; a result that repeats every few rows as what its storage repeats.
    ``routing``: the router's choices among the unknown integers, read as a balanced routing
    spreads them. Cheap for an operator that is neither."""
    if func not in _PARTITIONS:
        return None
    if func in _HISTOGRAMS:
        return _histogram(func, args, kwargs, values, routing)
    if func in _SCATTERED_SUMS:
        return _scattered(func, args, kwargs, values, routing)
    if func in _CLASS_TESTS:
        return _classes(func, args, out, values, routing)
    if func in _SCATTERS:
        return _distinct(func, args, kwargs, out, values, routing)
    return None


def _assigned(index: torch.Tensor, routing: Routing | None) -> torch.Tensor:
    """Unknown integers as a partition reads them: a router's choices spread evenly over their
    classes (:meth:`~memforensics.plan.routing.Routing.assigned`), any others the zero an
    integer reads as."""
    found = routing.assigned(index) if routing is not None else None
    return found if found is not None else _zeros(index)


def _unknown(value: Any, values: Values) -> bool:
    return isinstance(value, torch.Tensor) and value.is_meta and values(value) is None


def _on_cpu(value: Any, values: Values) -> Any:
    """A known argument's CPU copy (a number stays a number); None for an unknown tensor."""
    if isinstance(value, torch.Tensor):
        return values(value) if value.is_meta else value
    return value


def _flat(args: tuple[Any, ...]) -> list[Any]:
    """Arguments with one level of lists opened (indexing's list of index tensors)."""
    return [v for a in args for v in (a if isinstance(a, (list, tuple)) else (a,))]


def _zeros(tensor: torch.Tensor) -> torch.Tensor:
    return torch.zeros(tensor.shape, dtype=tensor.dtype, device=_CPU)


def _sides(args: tuple[Any, ...], values: Values) -> tuple[torch.Tensor, Any] | tuple[None, None]:
    """The unknown side of a two-sided test and the known other side's values, else Nones."""
    if len(args) < 2:
        return None, None
    first, second = args[0], args[1]
    if _unknown(first, values) and not _unknown(second, values):
        return first, _on_cpu(second, values)
    if _unknown(second, values) and not _unknown(first, values):
        return second, _on_cpu(first, values)
    return None, None


def _extreme(known: Any) -> bool:
    """Whether every value of ``known`` is beyond any ordinary value (or not a number)."""
    if isinstance(known, torch.Tensor):
        if known.numel() == 0 or known.dtype == torch.bool:
            return False
        big = known.double().abs()
        return bool(((big >= ORDINARY) | big.isnan()).all())
    if isinstance(known, (int, float)) and not isinstance(known, bool):
        return math.isnan(known) or abs(known) >= ORDINARY
    return False


def _ordinary(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], values: Values
) -> torch.Tensor | None:
    """A comparison of an unknown value with an extreme one: decided as for zero."""
    unknown, known = _sides(args, values)
    if unknown is None or not _extreme(known):
        return None
    cpu = [_zeros(a) if a is unknown else _on_cpu(a, values) for a in args]
    result: torch.Tensor = func(*cpu, **kwargs)
    return result


_ORDERS = frozenset(
    getattr(getattr(_aten, name), overload)
    for name in ("lt", "le", "gt", "ge")
    for overload in ("Tensor", "Scalar")
)


def _signed(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], values: Values
) -> torch.Tensor | None:
    """An order test of a made-up integer with known values none of which lies between zero
    and every non-negative integer (all below zero, or zero itself for the tests that zero
    decides): decided as for zero, which any non-negative integer agrees with there."""
    if func not in _ORDERS:
        return None
    unknown, known = _sides(args, values)
    if unknown is None or unknown.is_floating_point() or unknown.is_complex():
        return None
    if unknown.dtype == torch.bool or isinstance(known, bool):
        return None
    if isinstance(known, torch.Tensor):
        if known.numel() == 0 or known.is_complex() or known.dtype == torch.bool:
            return None
        if not bool((known.double() <= 0).all()):
            return None
    elif not isinstance(known, (int, float)) or not known <= 0:
        return None
    cpu = [_zeros(a) if a is unknown else _on_cpu(a, values) for a in args]
    zero: torch.Tensor = func(*cpu, **kwargs)
    one: torch.Tensor = func(
        *[torch.ones_like(c) if a is unknown else c for a, c in zip(args, cpu, strict=True)],
        **kwargs,
    )
    if not torch.equal(zero, one):
        return None  # the known side holds zero where the test tells zero from one
    return zero


def _alike(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], values: Values
) -> torch.Tensor | None:
    """A comparison of two unknown floating-point tensors: decided as for equal values, as the
    same comparison of their reads would be (an unknown floating-point value reads as its round's
    one value), so ``>=``, ``<=`` and ``==`` hold everywhere and ``>``, ``<`` and ``!=``
    nowhere."""
    if len(args) < 2:
        return None
    first, second = args[0], args[1]
    if not (_unknown(first, values) and _unknown(second, values)):
        return None
    if not (first.is_floating_point() and second.is_floating_point()):
        return None
    result: torch.Tensor = func(_zeros(first), _zeros(second), *args[2:], **kwargs)
    return result


def _named(
    func: Any, args: tuple[Any, ...], out: torch.Tensor, values: Values, invert: bool = False
) -> torch.Tensor | None:
    """An equality test (or ``isin``) of a made-up integer against the script's known values:
    never equal."""
    if func not in _EQUALITY and func not in _ISIN:
        return None
    unknown, known = _sides(args, values)
    if func in _ISIN and unknown is not args[0]:
        return None
    if unknown is None or unknown.is_floating_point() or unknown.dtype == torch.bool:
        return None
    if isinstance(known, torch.Tensor) and (known.is_floating_point() or known.dtype == torch.bool):
        return None
    if isinstance(known, (bool, float)):
        return None
    equal = invert if func in _ISIN else _EQUALITY[func]
    return torch.full(out.shape, equal, dtype=out.dtype, device=_CPU)


def _scored(
    func: Any, args: tuple[Any, ...], out: torch.Tensor, values: Values, matches: Matches
) -> torch.Tensor | None:
    """Predictions compared elementwise with their targets: the first ``matches(n)`` of them
    match. Both sides integers of the output's shape, one unknown at least, a known side holding
    more than one value (an end-of-sequence test names one)."""
    sides = args[:2]
    if len(sides) < 2 or not all(isinstance(a, torch.Tensor) for a in sides):
        return None
    if not any(_unknown(a, values) for a in sides):
        return None
    for side in sides:
        if side.shape != out.shape or side.is_floating_point() or side.is_complex():
            return None
        if side.dtype == torch.bool:
            return None
        if not _unknown(side, values):
            known = _on_cpu(side, values)
            if known is None or torch.unique(known).numel() < 2:
                return None
    spread = _spread(sides, values)
    per_target = [1 if d in spread else size for d, size in enumerate(out.shape)]
    count = matches(math.prod(per_target))
    if count is None:
        return None
    match = _SCORES[func]
    first = torch.full((math.prod(per_target),), match, dtype=torch.bool, device=_CPU)
    first[count:] = not match
    flags = torch.full(out.shape, not match, dtype=torch.bool, device=_CPU)
    flags[tuple(slice(0, 1) if d in spread else slice(None) for d in range(out.dim()))] = (
        first.reshape(per_target)
    )
    return flags.to(out.dtype)


def _spread(sides: tuple[Any, ...], values: Values) -> set[int]:
    """The dimensions along which the known side repeats one target (``target.expand_as(pred)``
    beside ``topk``'s predictions): the predictions there are a sample's other guesses, of which
    at most one can be its target, so only the first is scored."""
    known = [side for side in sides if not _unknown(side, values)]
    if not known:
        return set()
    return {d for d, (size, step) in enumerate(zip(known[0].shape, known[0].stride(), strict=True))
            if size > 1 and step == 0}  # fmt: skip


def _selected(args: tuple[Any, ...], values: Values) -> torch.Tensor | None:
    """``where`` whose known condition picks one side everywhere: that side (known)."""
    if len(args) < 3 or _unknown(args[0], values):
        return None
    condition = _on_cpu(args[0], values)
    if not isinstance(condition, torch.Tensor) or condition.numel() == 0:
        return None
    unused = 2 if bool(condition.all()) else 1 if not bool(condition.any()) else None
    if unused is None or _unknown(args[3 - unused], values):
        return None
    cpu = [
        _zeros(a) if i == unused and _unknown(a, values) else _on_cpu(a, values)
        for i, a in enumerate(args)
    ]
    result: torch.Tensor = torch.where(cpu[0], cpu[1], cpu[2])
    return result


def moved(args: tuple[Any, ...], out: torch.Tensor, values: Values) -> torch.Tensor | None:
    """Values moved (:data:`MOVES`) from a tensor holding one value everywhere: that value,
    whatever the indices, unknown or made up, say (a GPU raises on one out of range)."""
    source = args[0]
    if not isinstance(source, torch.Tensor) or not source.is_meta:
        return None
    copy = values(source)
    if copy is None or copy.numel() == 0:
        return None
    one = copy.reshape(-1)[0]
    if not bool((copy == one).all()):
        return None
    return torch.full(out.shape, one.item(), dtype=out.dtype, device=_CPU)


def _counted(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], values: Values
) -> torch.Tensor | None:
    """A count of unknown flags: every flag set."""
    flags = args[0]
    if not (_unknown(flags, values) and flags.dtype == torch.bool):
        return None
    every = torch.ones(flags.shape, dtype=torch.bool, device=_CPU)
    result: torch.Tensor = func(every, *args[1:], **kwargs)
    return result


def _extreme_integer(
    args: tuple[Any, ...], out: torch.Tensor, values: Values
) -> torch.Tensor | None:
    """The largest or smallest of unknown integers: zero, as each of them reads (not of flags,
    whose ``max`` is an ``any``, a count's upper bound)."""
    whole = args[0]
    if not _unknown(whole, values) or whole.numel() == 0:
        return None
    if whole.dtype == torch.bool or whole.is_floating_point() or whole.is_complex():
        return None
    return _zeros(out)


def _histogram(
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    values: Values,
    routing: Routing | None,
) -> torch.Tensor | None:
    """A histogram of unknown integers (``bincount``'s weights, where given, known): every
    value counted as zero, a router's choices each class its share."""
    counted = args[0]
    if not _unknown(counted, values) or counted.is_floating_point() or counted.is_complex():
        return None
    if any(_unknown(v, values) for v in (*args[1:], *kwargs.values())):
        return None  # unknown weights: the sums are unknown
    rest = [_on_cpu(a, values) for a in args[1:]]
    options = {k: _on_cpu(v, values) for k, v in kwargs.items()}
    shared = _shares(func, counted, rest, options, routing)
    if shared is not None:
        return shared
    zeros = _assigned(counted, routing)
    if func is _aten.histc.default:  # CUDA's counts integers in their dtype, the CPU's floats only
        counts: torch.Tensor = func(zeros.float(), *rest, **options)
        return counts.to(counted.dtype)
    result: torch.Tensor = func(zeros, *rest, **options)
    return result


def _shares(
    func: Any,
    counted: torch.Tensor,
    rest: list[Any],
    options: dict[str, Any],
    routing: Routing | None,
) -> torch.Tensor | None:
    """The histogram of all of a router's choices (a storage of them counted whole, without
    weights): each class its share, the bins a class falls in as ``bincount``'s (one per
    class) and CUDA's ``histc``'s (``(c - min) * bins / (max - min)``, the last bin closed)
    do; None where it is not one."""
    classes = routing.classes(counted) if routing is not None else None
    if classes is None or not periodic.covers(counted):
        return None
    count = counted.numel()
    each = torch.tensor(
        [share(count, classes, c) for c in range(classes)], dtype=torch.float64, device=_CPU
    )
    every = torch.arange(classes, dtype=torch.float64, device=_CPU)
    if func is _aten.bincount.default:
        if (rest and rest[0] is not None) or options.get("weights") is not None:
            return None
        minlength = rest[1] if len(rest) > 1 else options.get("minlength", 0)
        length = max(int(minlength), min(count, classes))
        bins = torch.zeros(length, dtype=torch.float64, device=_CPU)
        bins[: min(length, classes)] = each[:length]
        return bins.to(torch.long)
    named = dict(zip(("bins", "min", "max"), rest, strict=False)) | options
    total, low, high = int(named.get("bins", 100)), named.get("min", 0), named.get("max", 0)
    low, high = float(low), float(high)
    if low == high == 0.0:
        low, high = 0.0, float(min(count, classes) - 1)
    if low == high:
        low, high = low - 1, high + 1
    inside = (every >= low) & (every <= high)
    at = ((every - low) * total / (high - low)).to(torch.long).clamp(max=total - 1)
    bins = torch.zeros(total, dtype=torch.float64, device=_CPU)
    bins.index_add_(0, at[inside], each[inside])
    return bins.to(counted.dtype)


def _classes(
    func: Any, args: tuple[Any, ...], out: torch.Tensor, values: Values, routing: Routing | None
) -> torch.Tensor | periodic.Repeat | None:
    """An equality test of unknown integers with known values that give each of them every
    class ``0 .. c-1`` (``c`` at least two) once, along the dimensions where it is broadcast:
    each is class 0. The result is broadcast from its few values along the other dimensions."""
    unknown, known = _sides(args, values)
    if unknown is None or not isinstance(known, torch.Tensor):
        return None
    for side in (unknown, known):
        if side.is_floating_point() or side.is_complex() or side.dtype == torch.bool:
            return None
    rank = out.dim()
    if unknown.dim() > rank or known.dim() > rank or known.numel() > _CLASSES:
        return None
    spread_shape = (1,) * (rank - unknown.dim()) + tuple(unknown.shape)
    met = known.reshape((1,) * (rank - known.dim()) + tuple(known.shape))
    spread = [d for d in range(rank) if spread_shape[d] == 1 and out.shape[d] > 1]
    if not spread or any(met.shape[d] != out.shape[d] for d in spread):
        return None
    rest = [d for d in range(rank) if d not in spread]
    classes = math.prod(out.shape[d] for d in spread)
    each = met.permute(*rest, *spread).reshape(-1, classes)
    every = torch.arange(classes, dtype=each.dtype, device=_CPU).expand_as(each)
    if classes < 2 or not torch.equal(each.sort(dim=1).values, every):
        return None
    routed = routing.classes(unknown) if routing is not None else None
    if routed is not None and routed <= classes:
        balanced = _routed_classes(func, unknown, met, out, spread, routed, routing)
        if balanced is not None:
            return balanced
    zero = torch.zeros((1,) * rank, dtype=unknown.dtype, device=_CPU)
    result: torch.Tensor = func(zero, met)
    return result.expand(out.shape)


def _routed_classes(
    func: Any,
    unknown: torch.Tensor,
    met: torch.Tensor,
    out: torch.Tensor,
    spread: list[int],
    routed: int,
    routing: Routing | None,
) -> torch.Tensor | periodic.Repeat | None:
    """A one-hot of a router's choices (``routed`` classes): each choice at the class its
    place gives (:meth:`~memforensics.plan.routing.Routing.assigned`). Laid out in rows (the
    classes last, the choices in their storage's order), it repeats every ``routed`` rows:
    kept as that pattern; else computed whole where it is small."""
    rank = out.dim()
    trailing = spread == list(range(rank - len(spread), rank))
    if trailing and periodic.whole(unknown) and periodic.whole(out):
        width = math.prod(out.shape[d] for d in spread)
        if routed * width * out.element_size() > _SMALL:
            return None
        row = met.reshape(-1)[-width:] if met.numel() >= width else met.reshape(-1)
        first = torch.arange(routed, dtype=unknown.dtype, device=_CPU).reshape(routed, 1)
        repeated: torch.Tensor = func(first, row.reshape(1, width))
        return periodic.Repeat(repeated.to(out.dtype).reshape(-1), 1)
    if out.numel() * out.element_size() > _SMALL or routing is None:
        return None
    found = routing.assigned(unknown)
    if found is None:
        return None
    result: torch.Tensor = func(found, met)
    return result


def _scattered(
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    values: Values,
    routing: Routing | None = None,
) -> torch.Tensor | None:
    """A sum of known values into a known tensor at unknown integer indices: every value added
    at index 0."""
    if len(args) < 4 or not _unknown(args[2], values) or args[2].is_floating_point():
        return None
    if any(_unknown(a, values) for a in (args[0], args[3], *kwargs.values())):
        return None
    target, source = _on_cpu(args[0], values), _on_cpu(args[3], values)
    if not isinstance(target, torch.Tensor) or not isinstance(source, torch.Tensor):
        return None
    options = {k: _on_cpu(v, values) for k, v in kwargs.items()}
    scatter = func in (_aten.scatter_add.default, _aten.scatter_add_.default)
    operator = _aten.scatter_add.default if scatter else _aten.index_add.default
    result: torch.Tensor = operator(target, args[1], _assigned(args[2], routing), source, **options)
    return result


def _distinct(
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    out: torch.Tensor,
    values: Values,
    routing: Routing | None = None,
) -> torch.Tensor | periodic.Repeat | None:
    """A write of known values into a known tensor at unknown indices along a dimension: the
    ``k`` indices of each slice along it are distinct, ``0 .. k-1`` (``k`` at most the
    dimension's size). The result is computed on one slice where the rest repeats it (the
    target, the index and the values each the same along every other dimension), else whole
    where it is small; a router's choices as :func:`_routed_rows` marks them."""
    if len(args) < 4 or kwargs or not _unknown(args[2], values) or args[2].is_floating_point():
        return None
    target, index, source = args[0], args[2], args[3]
    if _unknown(target, values) or _unknown(source, values):
        return None
    known, given = _on_cpu(target, values), _on_cpu(source, values)
    if not isinstance(known, torch.Tensor) or known.dim() != index.dim() or known.dim() == 0:
        return None
    dim = args[1] % known.dim()
    count = index.shape[dim]
    if count > known.shape[dim]:
        return None  # more writes than places: some index repeats
    others = [d for d in range(known.dim()) if d != dim]
    shape = [1] * known.dim()
    shape[dim] = count
    distinct = torch.arange(count, dtype=index.dtype, device=_CPU).reshape(shape)
    operator = _aten.scatter.src if isinstance(given, torch.Tensor) else _aten.scatter.value
    repeats = all(
        index.shape[d] == known.shape[d]
        and _same_along(known, d)
        and (not isinstance(given, torch.Tensor) or _same_along(given, d))
        for d in others
    )
    routed = routing.classes(index) if routing is not None else None
    if routed is not None and repeats:
        marked = _routed_rows(operator, known, index, given, out, dim, routed)
        if marked is not None:
            return marked
    if repeats:
        one = [slice(0, 1) if d != dim else slice(None) for d in range(known.dim())]
        piece = given[tuple(one)] if isinstance(given, torch.Tensor) else given
        row: torch.Tensor = operator(known[tuple(one)], dim, distinct, piece)
        return row.expand(out.shape)
    if out.numel() * out.element_size() > _SMALL:
        return None
    result: torch.Tensor = operator(known, dim, distinct.expand(index.shape), given)
    return result


def _routed_rows(
    operator: Any,
    known: torch.Tensor,
    index: torch.Tensor,
    given: Any,
    out: torch.Tensor,
    dim: int,
    routed: int,
) -> periodic.Repeat | None:
    """A router's ``k`` choices a row, ``routed`` classes, marked in rows that hold the same
    values until the write (``cnts.scatter_(1, topk_ids, 1)``): row ``t`` takes classes
    ``t·k .. t·k + k - 1`` modulo ``routed``
    (:meth:`~memforensics.plan.routing.Routing.assigned`), so the rows repeat every
    ``routed / gcd(k, routed)``, kept as that pattern. Only rows laid out one after another,
    the classes last."""
    if dim != known.dim() - 1 or not (periodic.whole(index) and periodic.whole(out)):
        return None
    count, width = index.shape[dim], known.shape[dim]
    rows = routed // math.gcd(count, routed)
    if rows * width * out.element_size() > _SMALL:
        return None
    first = known.reshape(-1, width)[:1].expand(rows, width)
    chosen = (torch.arange(rows * count, device=_CPU) % routed).reshape(rows, count)
    piece = given
    if isinstance(given, torch.Tensor):
        piece = given.reshape(-1, count)[:1].expand(rows, count)
    marked: torch.Tensor = operator(first.contiguous(), 1, chosen.to(index.dtype), piece)
    return periodic.Repeat(marked.to(out.dtype).reshape(-1), 1)


def _same_along(values: torch.Tensor, dim: int) -> bool:
    """Whether ``values`` is the same along dimension ``dim`` (broadcast, or equal there)."""
    if values.shape[dim] == 1 or values.stride(dim) == 0:
        return True
    return bool((values == values.narrow(dim, 0, 1)).all())
