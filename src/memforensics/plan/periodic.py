"""Values of a large stand-in whose storage repeats a short pattern, each of its values held
for a block of elements: element ``i`` holds ``pattern[(i // block) % len(pattern)]``.

A one-hot of ``n`` rows over ``c`` classes, in rows, is such a storage: its pattern is one row,
``c`` elements, whatever ``n`` is (blocks of one). So is one laid out class first (``arange(c)
[:, None] == idx[None]``): ``c`` values, each held for a block of ``n`` elements. Kept so, its
values cost no host memory that grows with the rows, and a view of it
(``one_hot(...).permute(2, 1, 0)[e]``, one class's slice) reads as few elements as the view
varies in: a dimension whose stride is a multiple of the period (pattern times block) steps from
one repeat to the next, so the view is the same along it, and so are the dimensions whose steps
together stay within one block.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

_CPU = torch.device("cpu")


class Repeat(NamedTuple):
    """A storage's values: ``pattern``'s values in turn, each for ``block`` elements."""

    pattern: torch.Tensor
    block: int


def whole(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is laid out in rows from its storage's start over all of it, so its
    elements in order are its storage's."""
    return bool(
        tensor.is_contiguous()
        and tensor.storage_offset() == 0
        and tensor.numel() * tensor.element_size() == tensor.untyped_storage().nbytes()
    )


def covers(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is laid out over all of its storage from its start, each element
    once, in any order of dimensions (a permuted one's copy keeps its strides): a copy laid out
    as it is puts each value at the storage element it came from."""
    return (
        tensor.storage_offset() == 0
        and tensor.numel() * tensor.element_size() == tensor.untyped_storage().nbytes()
        and _dense(tensor)
    )


def _dense(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s dimensions, from the smallest stride up, each step over all the
    elements of those before it: no gap and no element twice."""
    expected = 1
    pairs = zip(tensor.shape, tensor.stride(), strict=True)
    steps = sorted((step, size) for size, step in pairs if size != 1)
    for step, size in steps:
        if step != expected:
            return False
        expected *= size
    return True


def _same_along(values: torch.Tensor, dim: int) -> bool:
    """Whether ``values`` is the same along dimension ``dim`` (broadcast, or equal there)."""
    if values.shape[dim] == 1 or values.stride(dim) == 0:
        return True
    return bool((values == values.narrow(dim, 0, 1)).all())


def pattern(made: torch.Tensor, values: torch.Tensor, limit: int) -> Repeat | None:
    """What ``made``'s storage repeats when ``made`` (laid out in rows over all of its
    storage) holds ``values`` (a CPU tensor of its shape, broadcast where it is the same, or a
    small copy); None where ``made`` is laid out otherwise, or the dimensions ``values`` varies
    along span a pattern of more than ``limit`` bytes."""
    if values.shape != made.shape or values.dtype != made.dtype or not whole(made):
        return None
    if made.numel() == 0:
        return None
    varying = [d for d in range(made.dim()) if not _same_along(values, d)]
    first, last = (varying[0], varying[-1] + 1) if varying else (0, 0)
    length = math.prod(made.shape[first:last])
    if length * made.element_size() > limit:
        return None
    index = tuple(slice(None) if first <= d < last else 0 for d in range(made.dim()))
    return Repeat(values[index].reshape(-1).clone(), math.prod(made.shape[last:]))


def viewed(repeat: Repeat, view: torch.Tensor, limit: int) -> torch.Tensor | None:
    """``view``'s values (a CPU tensor of its shape, broadcast where it is the same) over a
    storage that repeats ``repeat``; None where ``view`` reads the storage in another dtype or
    varies in more than ``limit`` bytes' worth of elements."""
    values, block = repeat
    if view.dtype != values.dtype:
        return None
    period = values.numel() * block
    base = view.storage_offset() % period
    varying = [
        (d, size, step % period)
        for d, (size, step) in enumerate(zip(view.shape, view.stride(), strict=True))
        if size != 1 and step % period != 0
    ]
    fine = [(d, size, step) for d, size, step in varying if step % block != 0]
    if base % block + sum((size - 1) * step for _, size, step in fine) < block:
        varying = [v for v in varying if v not in fine]  # steps within one block: the same
    if math.prod(size for _, size, _ in varying) * view.element_size() > limit:
        return None
    index = torch.tensor(base, device=_CPU)
    for d, size, step in varying:
        shape = [1] * view.dim()
        shape[d] = size
        index = index + (torch.arange(size, device=_CPU) * step).reshape(shape)
    return values[(index // block) % values.numel()].expand(view.shape)


PERIOD_LIMIT = 1 << 20
"""Longest period (pattern times block, in elements) whose counts are computed."""


def reduced(
    repeat: Repeat, view: torch.Tensor, dims: list[int], nonzero: bool
) -> torch.Tensor | None:
    """The sum of ``view``'s values (``nonzero``: the count of its non-zero ones) over
    ``dims``, for each place along the others (a float64 CPU tensor of ``view``'s shape less
    ``dims``), over a storage that repeats ``repeat``, without reading the view element by
    element: where each element falls in one period is counted, dimension by dimension (a
    dimension of ``n`` steps of ``s`` visits the places ``i·s`` modulo the period, each as often
    as ``n`` goes round them), and those counts meet the period's values. None where the period
    is longer than :data:`PERIOD_LIMIT` or the places kept are more than it."""
    values, block = repeat
    period = values.numel() * block
    kept = [d for d in range(view.dim()) if d not in dims]
    if period > PERIOD_LIMIT or math.prod(view.shape[d] for d in kept) > PERIOD_LIMIT:
        return None
    if view.numel() == 0:
        return torch.zeros([view.shape[d] for d in kept], dtype=torch.float64, device=_CPU)
    held = (values != 0) if nonzero else values
    each = held.to(torch.float64).repeat_interleave(block)
    counts = torch.zeros(period, dtype=torch.float64, device=_CPU)
    counts[0] = 1.0
    for d in dims:
        counts = _cyclic(counts, _places(view.shape[d], view.stride(d), period), False)
    met = _cyclic(counts, each, True)  # met[s]: the sum over dims from place s
    start = torch.tensor(view.storage_offset(), device=_CPU)
    for i, d in enumerate(kept):
        shape = [1] * len(kept)
        shape[i] = view.shape[d]
        start = start + (torch.arange(view.shape[d], device=_CPU) * view.stride(d)).reshape(shape)
    return met[start % period].round()


def _places(size: int, step: int, period: int) -> torch.Tensor:
    """How often ``size`` steps of ``step`` from place 0 fall at each place of the period."""
    step %= period
    cycle = period // math.gcd(step, period)
    rounds, rest = divmod(size, cycle)
    at = (torch.arange(cycle, device=_CPU) * step) % period
    counts = torch.zeros(period, dtype=torch.float64, device=_CPU)
    counts[at] = float(rounds)
    counts[at[:rest]] += 1.0
    return counts


def _cyclic(first: torch.Tensor, second: torch.Tensor, correlate: bool) -> torch.Tensor:
    """The cyclic convolution of two vectors over one period (``correlate``: ``first`` met at
    each shift of ``second``, ``sum_p first[p]·second[p + s]``)."""
    n = first.numel()
    if correlate:  # first[p] at -p: a convolution
        first = torch.roll(first.flip(0), 1)
    if n == 1:
        return first * second
    met: torch.Tensor = torch.fft.irfft(torch.fft.rfft(first) * torch.fft.rfft(second), n=n)
    return met
