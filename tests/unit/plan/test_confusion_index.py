"""A confusion matrix's index, the batch's targets and unknown predictions combined as either
one times the number of classes plus the other: its predictions are the first matches, then
another class, whichever side the number multiplies; a product written since is no index."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # collected, then deselected, where torch is absent

from memforensics.plan.known import Known  # noqa: E402  (after the skip without torch)

pytestmark = pytest.mark.torch

aten = torch.ops.aten
LABELS = torch.tensor([2, 0, 1, 1, 0, 2])


def _index(targets_first: bool, written: bool = False) -> torch.Tensor | None:
    """The index ``y * 3 + p`` (or ``p * 3 + y``) of the labels copied to the device and
    unknown predictions, two of them matching; ``written``: the product written in place
    before the sum. Its values, or None where unknown."""
    known = Known()
    y = torch.empty(6, dtype=torch.int64, device="meta")
    known.after(aten.copy_.default, (y, LABELS), {}, y)
    p = torch.empty(6, dtype=torch.int64, device="meta")  # an argmax: unknown
    scaled = y if targets_first else p
    product = aten.mul.Tensor(scaled, 3)
    known.after(aten.mul.Tensor, (scaled, 3), {}, product)
    if written:
        known.after(aten.add_.Scalar, (product, 0), {}, product)
    other = p if targets_first else y
    index = aten.add.Tensor(product, other)
    known.after(aten.add.Tensor, (product, other), {}, index, matches=lambda n: min(n, 2))
    return known.value(index)


@pytest.mark.parametrize("targets_first", [True, False])
def test_the_first_predictions_match_and_the_rest_take_another_class(targets_first: bool) -> None:
    """The index's targets are the labels on their side (rows with the targets first,
    columns with the predictions first); the first two predictions are their labels (the
    diagonal), the other four another of the labels' classes."""
    index = _index(targets_first)
    assert index is not None
    rows, columns = index // 3, index % 3
    targets, predicted = (rows, columns) if targets_first else (columns, rows)
    assert targets.tolist() == LABELS.tolist()
    assert predicted[:2].tolist() == LABELS[:2].tolist()
    assert (predicted[2:] != LABELS[2:]).all()
    assert set(predicted.tolist()) <= {0, 1, 2}


@pytest.mark.parametrize("targets_first", [True, False])
def test_a_product_written_before_the_sum_is_no_index(targets_first: bool) -> None:
    """A product an operator wrote after the multiplication is not known to be one: the sum
    stays unknown."""
    assert _index(targets_first, written=True) is None
