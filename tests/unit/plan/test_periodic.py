"""Values of a storage that repeats a short pattern (``plan/periodic.py``), checked against
the same views of a real CPU tensor holding them."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from memforensics.plan.periodic import pattern, viewed  # noqa: E402

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
