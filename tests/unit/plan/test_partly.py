"""Values known in part (``plan/partly.py``): what a sort and the tests of its result decide,
checked against torch's own sort and tests on completions of the unknown elements by finite
values, at the dtype's ends too."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memforensics.plan.partly import elementwise_part, sorted_part  # noqa: E402

pytestmark = pytest.mark.torch

_aten = torch.ops.aten
TOP = torch.finfo(torch.float32).max
BOTTOM = torch.finfo(torch.float32).min


def _part() -> tuple[object, object]:
    """A 6-by-10 matrix known where its extremes were written (the dtype's largest, ``inf``,
    NaN, the smallest) and at two ordinary values, unknown elsewhere."""
    values = torch.zeros(6, 10)
    done = torch.zeros(6, 10, dtype=torch.bool)
    for row in range(6):
        for col, value in ((row, TOP), (9 - row, BOTTOM), ((row + 3) % 10, 0.5)):
            values[row, col], done[row, col] = value, True
    values[0, 4], values[1, 5], values[2, 6] = float("inf"), float("nan"), float("-inf")
    done[0, 4] = done[1, 5] = done[2, 6] = True
    return done, values


def _completions(done: object, values: object) -> list[object]:
    """The known values with the unknown ones filled with finite values: random, and at the
    dtype's ends."""
    generator = torch.Generator().manual_seed(0)
    fills = [torch.randn(values.shape, generator=generator) for _ in range(5)]
    fills += [torch.full(values.shape, end) for end in (TOP, BOTTOM, 0.0)]
    return [torch.where(done, values, fill) for fill in fills]


def _same(got: object, real: object, where: object) -> bool:
    """Whether ``got`` equals ``real`` (NaN equal to NaN) wherever ``where`` holds."""
    return bool((((got == real) | (got.isnan() & real.isnan())) | ~where).all())


@pytest.mark.parametrize(
    ("func", "args", "kwargs"),
    [
        (_aten.sort.default, (1, False), {}),
        (_aten.sort.default, (1, True), {}),
        (_aten.sort.stable, (), {"stable": True, "dim": 1}),
        (_aten.topk.default, (3, 1, True, True), {}),
        (_aten.topk.default, (3, 1, False, True), {}),
    ],
)
def test_a_sort_s_known_ends_are_the_real_sort_s_whatever_the_unknown_values(
    func: object, args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    """Each row's extremes sort to its ends as torch sorts them on every completion, and an
    ordinary known value (0.5) is not said to be known where it lands."""
    done, values = _part()
    found = sorted_part(func, (values, *args), kwargs, (done, values))
    assert found is not None
    known, ordered = found
    assert bool(known.any())
    assert not bool((ordered == 0.5)[known].any())
    for completed in _completions(done, values):
        real = func(completed, *args, **kwargs)[0]
        assert _same(ordered, real, known)


def test_an_unsorted_topk_decides_nothing() -> None:
    """``topk(sorted=False)`` orders nothing, so nothing of its values is said to be known."""
    done, values = _part()
    args = (values, 3, 1, True, False)
    assert sorted_part(_aten.topk.default, args, {}, (done, values)) is None


@pytest.mark.parametrize(
    "func",
    [_aten.lt.Tensor, _aten.le.Tensor, _aten.gt.Tensor, _aten.ge.Tensor, _aten.eq.Tensor,
     _aten.ne.Tensor, _aten.sub.Tensor],
)  # fmt: skip
def test_an_elementwise_result_is_known_where_the_real_one_is_the_same_for_every_completion(
    func: object,
) -> None:
    """A sorted row less a margin tested against an unknown column: where the result is said
    to be known it is the real one on every completion of both sides; an order test of the
    largest value against anything is known."""
    done, values = _part()
    other = torch.zeros(6, 1)
    parts = {id(values): (done, values), id(other): (torch.zeros(6, 1, dtype=torch.bool), other)}
    found = elementwise_part(func, (values, other), {}, parts)
    assert found is not None
    known, result = found
    for completed in _completions(done, values):
        for column in _completions(torch.zeros(6, 1, dtype=torch.bool), other):
            assert _same(result, func(completed, column), known)
    if func in (_aten.lt.Tensor, _aten.ge.Tensor):
        assert bool(known[values == TOP].all())
    if func is _aten.sub.Tensor:
        assert not bool(known.any())
