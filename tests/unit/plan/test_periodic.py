"""Values of a storage that repeats a short pattern (``plan/periodic.py``), checked against
the same views of a real CPU tensor holding them."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from memforensics.plan.periodic import Repeat, pattern, reduced, viewed  # noqa: E402

pytestmark = pytest.mark.torch

LIMIT = 1 << 16


def _one_hot(rows: int, top: int, classes: int, first: bool) -> tuple[Any, Any]:
    """A meta one-hot and the CPU one of the same values: every row at class 0, laid out class
    last or class first."""
    chosen = torch.zeros(rows, top, dtype=torch.long)
    real = torch.nn.functional.one_hot(chosen, classes)
    if first:
        real = real.permute(2, 0, 1).contiguous()
    return torch.empty(real.shape, dtype=real.dtype, device="meta"), real


@pytest.mark.parametrize("first", [False, True])
def test_a_class_slice_of_a_large_one_hot_reads_as_the_real_one(first: bool) -> None:
    """A one-hot of 4,096 rows is kept as its one row (or its classes, each for a block of
    rows), and its class slices, permuted or not, read the real tensor's values."""
    made, real = _one_hot(4096, 2, 9, first)
    repeat = pattern(made, real, LIMIT)
    assert repeat is not None
    assert repeat.pattern.numel() == 9
    mask = made.permute(1, 2, 0) if first else made.permute(2, 1, 0)
    expected = real.permute(1, 2, 0) if first else real.permute(2, 1, 0)
    views = [(mask, expected), (mask[0], expected[0]), (mask[..., 3], expected[..., 3])]
    for view, truth in views:
        found = viewed(repeat, view, LIMIT)
        assert found is not None
        assert torch.equal(found, truth)
    whole = viewed(repeat, made, LIMIT)
    assert whole is not None
    assert int(whole.sum()) == 4096 * 2


def test_a_view_that_varies_in_too_many_elements_is_unknown() -> None:
    """A view whose values vary in more elements than the limit is not worked out."""
    made = torch.empty(4096, 8, dtype=torch.long, device="meta")
    values = torch.arange(4096 * 8).reshape(4096, 8)
    assert pattern(made, values, LIMIT) is None
    repeat = pattern(made, torch.arange(8).expand(4096, 8), LIMIT)
    assert repeat is not None
    assert viewed(repeat, made.view(torch.float64), LIMIT) is None  # read in another dtype


@pytest.mark.parametrize("seed", range(20))
def test_sums_and_counts_over_views_of_a_repeating_storage_are_the_real_ones(seed: int) -> None:
    """A sum or a count of non-zero values over some dimensions of any view (permuted, offset)
    of a storage repeating a pattern in blocks is what the same reduction of a CPU tensor
    holding those values gives."""
    draw = torch.Generator().manual_seed(seed)
    size = int(torch.randint(1, 30, (), generator=draw))
    block = int(torch.randint(1, 4, (), generator=draw))
    held = torch.randint(0, 3, (size,), generator=draw)
    shape = [int(s) for s in torch.randint(1, 7, (3,), generator=draw)]
    count = shape[0] * shape[1] * shape[2]
    storage = held[(torch.arange(2 * count) // block) % size]
    laid = torch.empty(shape).permute(*torch.randperm(3, generator=draw).tolist())
    offset = int(torch.randint(0, count, (), generator=draw))
    real = storage.as_strided(laid.shape, laid.stride(), offset)
    meta = torch.empty(2 * count, dtype=held.dtype, device="meta")
    view = meta.as_strided(laid.shape, laid.stride(), offset)
    dims = [d for d in range(3) if bool(torch.rand((), generator=draw) < 0.6)]
    for nonzero in (False, True):
        values = (real != 0) if nonzero else real
        expected = values.double().sum(dim=dims) if dims else values.double()
        assert torch.equal(reduced(Repeat(held, block), view, dims, nonzero), expected)
