"""Indices into a dimension of known size (a router's top-k choices of ``E`` experts), and how
many of them a test against one class selects.

A mixture of experts routes each token to the experts its router scores highest: ``topk(scores,
k, dim=-1).indices`` over the experts' dimension, of size ``E``, so every index lies in ``0 ..
E-1`` whatever the scores hold. In a plan the scores are unknown, and so are the indices; a loop
over the experts that takes each one's rows by a test against its class (DeepSeek's training
path, ``y[flat == i] = expert(x[flat == i])``, or ``(topk_ids == i).nonzero()``) would, at the
upper bound a data-dependent shape takes, run every routed row through every expert: ``E`` times
the activations a GPU keeps.

So a storage of indices made by ``topk``, ``sort`` (``argsort``), ``argmax``/``argmin`` or
``max``/``min`` along a dimension keeps that dimension's size (its *classes*), as do its copies
and casts, until it is written. A test of such indices for equality with one known class ``c``
(a number, or a known one-element tensor) selects the share of them a balanced routing gives that
class: ``m // E`` of ``m`` indices, one more for the first ``m % E`` classes, so the shares of a
loop over every class sum to ``m``, each routed row taken once, as a GPU's do (with a router at
random initialisation, or trained with its balancing loss, each expert takes about ``m / E``).
A test for inequality selects the rest. A class outside ``0 .. E-1`` selects none.

Only the *size* of what such a test selects is so (``nonzero``, ``masked_select``, indexing by
it: :mod:`~memforensics.plan.shapes`); its values, read or computed with, stay what the plan
assumes of a made-up integer (:mod:`~memforensics.plan.assumed`): equal to no value the script
names. A generated token is an index into the vocabulary too, and an end-of-sequence test on it
must stay never equal for decoding to run to its maximum length.

Read on the host, the indices ``topk`` and ``sort`` make are their ranks along the dimension
they ranked (:meth:`Routing.ranks`): ``0, 1, ..., k-1`` in each row, where every other unknown
integer reads 0. A row of them is distinct on a GPU whatever the scores, and a beam search that
ranks its candidates on the host (Whisper's ``BeamSearchDecoder``, ``prefix + [token.item()]``
for each of a beam's top ``k + 1`` tokens) keeps its beams only if the reads are distinct too.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from memforensics.plan.extremes import integral
from memforensics.plan.periodic import covers

_CPU = torch.device("cpu")

_aten = torch.ops.aten
_ALONG = {
    _aten.topk.default: 1,
    _aten.sort.default: 1,
    _aten.sort.stable: 1,
    _aten.max.dim: 1,
    _aten.min.dim: 1,
    _aten.argmax.default: 0,
    _aten.argmin.default: 0,
}
"""Operators that make indices along a dimension of their input, and the output that holds
them."""
_STABLE_DIM = frozenset((_aten.sort.stable,))
"""Those whose dimension is a keyword-only argument."""
_RANKED = frozenset((_aten.topk.default, _aten.sort.default, _aten.sort.stable))
"""Those whose indices along the dimension are distinct in each row: a rank's place, or a
permutation of the row."""
_COPIES = frozenset((_aten._to_copy.default, _aten.clone.default))
"""Copies and casts: each index from the index at the same place."""
_SORTS = frozenset((_aten.sort.default, _aten.sort.stable))
"""Sorts: their values are their input's, permuted."""
_COUNTS = frozenset(
    (
        _aten.any.default,
        _aten.all.default,
        _aten.sum.default,
        _aten.count_nonzero.default,
        _aten.sum.dim_IntList,
        _aten.count_nonzero.dim_IntList,
        _aten.any.dims,
        _aten.all.dims,
    )
)
"""Reductions of a mask that count its selected elements (or ask whether any or all are)."""
_ASSIGNED_LIMIT = 1 << 20
"""Most indices whose assigned classes are computed one by one."""
_TESTS = {
    _aten.eq.Scalar: True,
    _aten.eq.Tensor: True,
    _aten.ne.Scalar: False,
    _aten.ne.Tensor: False,
}
"""Tests of equality, and whether they select the class (else the rest)."""


class Routing:
    """Index storages by the size of the dimension they index, and the shares of them that
    tests against one class select, by storage, kept as long as the storage lives and is not
    written."""

    def __init__(self) -> None:
        self._classes: dict[int, tuple[int, ...]] = {}  # storage: (classes, nbytes[, step, size])
        self._shares: dict[int, tuple[int, int, bool]] = {}  # mask: (selected, nbytes, every)

    def after(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        written: list[torch.Tensor],
        value: Any,
    ) -> None:
        """Account for one operator: the storages it wrote into (``written``, and an ``out=``
        tensor) forget what was kept of them; indices it made keep their classes, a test of them
        its share. A storage it made is new: what was kept of one before at its place went
        with it. ``value``: a stand-in's known values on the CPU
        (:meth:`~memforensics.plan.known.Known.value`)."""
        if self._classes or self._shares:
            for tensor in (*written, *_outs(kwargs)):
                key = tensor.untyped_storage()._cdata
                self._classes.pop(key, None)
                self._shares.pop(key, None)
        along = _ALONG.get(func)
        if along is not None:
            self._made(func, args, kwargs, out, along)
        elif not self._classes:
            return
        elif func in _COPIES:
            self._copied(args, out)
        elif func in _TESTS:
            self._tested(func, args, out, value)

    def _keep(self, kept: dict[Any, Any], tensor: torch.Tensor, *figures: Any) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key not in self._classes and key not in self._shares:
            weakref.finalize(storage, self._drop, key)
        kept[key] = (figures[0], storage.nbytes(), *figures[1:])

    def _drop(self, key: int) -> None:
        self._classes.pop(key, None)
        self._shares.pop(key, None)

    def _made(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, along: int
    ) -> None:
        """Indices made along a dimension of ``args[0]``: their storage keeps its size."""
        made = out[along] if isinstance(out, (tuple, list)) else out
        source = args[0] if args else None
        if not isinstance(made, torch.Tensor) or not made.is_meta:
            return
        if not isinstance(source, torch.Tensor) or source.dim() == 0:
            return
        if func in _STABLE_DIM:
            dim = kwargs.get("dim", -1)
        elif func is _aten.topk.default:
            dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
        elif func in (_aten.argmax.default, _aten.argmin.default):
            dim = args[1] if len(args) > 1 else kwargs.get("dim")
        else:
            dim = args[1] if len(args) > 1 else kwargs.get("dim", -1)
        classes = source.numel() if dim is None else source.shape[dim]
        if classes > 0 and func in _RANKED and made.dim() > 0:
            ranked = dim % made.dim()
            self._keep(self._classes, made, classes, made.stride(ranked), made.shape[ranked])
        elif classes > 0:
            self._keep(self._classes, made, classes)
        if func in _SORTS and isinstance(out, (tuple, list)) and isinstance(out[0], torch.Tensor):
            self._copied((source,), out[0])  # a permutation of the input's values

    def _copied(self, args: tuple[Any, ...], out: Any) -> None:
        """A copy or cast of indices, to integers, keeps their classes."""
        source = args[0] if args else None
        if not isinstance(source, torch.Tensor) or not isinstance(out, torch.Tensor):
            return
        kept = self._classes.get(source.untyped_storage()._cdata)
        if kept is None or kept[1] != source.untyped_storage().nbytes():
            return
        if out.is_meta and integral(out.dtype) and out.dtype != torch.bool:
            self._keep(self._classes, out, kept[0])

    def _tested(self, func: Any, args: tuple[Any, ...], out: Any, value: Any) -> None:
        """A test of indices for equality with one known class: its share."""
        if len(args) < 2 or not isinstance(out, torch.Tensor) or not out.is_meta:
            return
        indices, other = args[0], args[1]
        if not isinstance(indices, torch.Tensor) or not indices.is_meta:
            indices, other = other, indices
        if not isinstance(indices, torch.Tensor) or out.numel() != indices.numel():
            return
        kept = self._classes.get(indices.untyped_storage()._cdata)
        if kept is None or kept[1] != indices.untyped_storage().nbytes():
            return
        found = other
        if isinstance(other, torch.Tensor):
            found = value(other) if other.is_meta else other
            if found is None or found.numel() != 1 or not integral(found.dtype):
                return
            found = found.item()
        if isinstance(found, bool) or not isinstance(found, int):
            return
        count = out.numel()
        taken = share(count, kept[0], found, _TESTS[func])
        self._keep(self._shares, out, taken, count >= kept[0])

    def classes(self, indices: torch.Tensor) -> int | None:
        """How many classes ``indices`` (any view of a storage of indices made along a dimension
        of known size, or a copy of one) lie in; None where that is not known."""
        if not self._classes or not indices.is_meta:
            return None
        kept = self._classes.get(indices.untyped_storage()._cdata)
        if kept is None or kept[1] != indices.untyped_storage().nbytes():
            return None
        return int(kept[0])

    def assigned(self, indices: torch.Tensor) -> torch.Tensor | None:
        """The classes a balanced routing gives ``indices`` where they are counted or spread
        into classes: element ``i`` of their storage is class ``i mod E``; a CPU tensor of their
        shape and dtype, or None where their classes are unknown or they are too many."""
        classes = self.classes(indices)
        if classes is None or indices.numel() > _ASSIGNED_LIMIT:
            return None
        return (_places(indices) % classes).to(indices.dtype).expand(indices.shape).contiguous()

    def ranks(self, indices: torch.Tensor) -> torch.Tensor | None:
        """``indices`` (any view of the indices ``topk`` or ``sort`` made) read on the host as
        their ranks along the dimension the operator ranked: ``0, 1, ..., k-1`` in each row, the
        first the ``0`` any unknown integer reads, the others distinct from it and from each
        other as a row of real indices is. A CPU tensor of their shape and dtype, or None where
        they are no such indices or are too many."""
        if not self._classes or not indices.is_meta or indices.numel() > _ASSIGNED_LIMIT:
            return None
        kept = self._classes.get(indices.untyped_storage()._cdata)
        if kept is None or kept[1] != indices.untyped_storage().nbytes() or len(kept) < 4:
            return None
        step, size = kept[2], kept[3]
        ranked = _places(indices) // step % size
        return ranked.to(indices.dtype).expand(indices.shape).contiguous()

    def counted(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> torch.Tensor | None:
        """A count of a test against one class taken whole (``mask.any()``, ``mask.sum()``,
        ``count_nonzero``, ``all``) where there are at least as many indices as classes: what
        the test's share gives, on the CPU; else None."""
        if not self._shares or func not in _COUNTS or not args:
            return None
        mask = args[0]
        if not isinstance(mask, torch.Tensor) or not isinstance(out, torch.Tensor):
            return None
        if not mask.is_meta or out.numel() != 1 or mask.numel() == 0:
            return None
        kept = self._shares.get(mask.untyped_storage()._cdata)
        if kept is None or kept[1] != mask.untyped_storage().nbytes() or not kept[2]:
            return None
        if not covers(mask) or set(kwargs) - {"dtype", "dim", "keepdim"}:
            return None
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        if dims is not None and dims != [] and _reduced(dims, mask.dim()) != set(range(mask.dim())):
            return None
        taken = kept[0]
        if func in (_aten.any.default, _aten.any.dims):
            value: Any = taken > 0
        elif func in (_aten.all.default, _aten.all.dims):
            value = taken == mask.numel()
        else:
            value = taken
        return torch.full(out.shape, value, dtype=out.dtype, device=_CPU)

    def share(self, mask: torch.Tensor) -> int | None:
        """How many of ``mask``'s elements a test against one class selects, where ``mask`` is
        such a test's result (all of its storage); else None."""
        if not self._shares or not mask.is_meta:
            return None
        kept = self._shares.get(mask.untyped_storage()._cdata)
        if kept is None or kept[1] != mask.untyped_storage().nbytes() or not covers(mask):
            return None
        return int(kept[0])


def _places(indices: torch.Tensor) -> torch.Tensor:
    """Where each element of view ``indices`` lies in its storage, in elements, on the CPU."""
    place = torch.tensor(indices.storage_offset(), device=_CPU)
    for d, (size, step) in enumerate(zip(indices.shape, indices.stride(), strict=True)):
        shape = [1] * indices.dim()
        shape[d] = size
        place = place + (torch.arange(size, device=_CPU) * step).reshape(shape)
    return place


def _reduced(dims: Any, rank: int) -> set[int]:
    """The dimensions a reduction's ``dim`` argument names."""
    named = dims if isinstance(dims, (list, tuple)) else [dims]
    return {d % rank if rank else 0 for d in named}


def _outs(kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors an operator writes through its ``out=`` argument."""
    given = kwargs.get("out")
    if isinstance(given, torch.Tensor):
        return [given]
    return (
        [t for t in given if isinstance(t, torch.Tensor)]
        if isinstance(given, (list, tuple))
        else []
    )


def share(count: int, classes: int, chosen: int, equal: bool = True) -> int:
    """Of ``count`` indices routed evenly over ``classes`` classes, how many are ``chosen``
    (``equal``) or are not: ``count // classes``, one more for the first ``count % classes``
    classes, none outside them."""
    taken = count // classes + (chosen < count % classes) if 0 <= chosen < classes else 0
    return taken if equal else count - taken
