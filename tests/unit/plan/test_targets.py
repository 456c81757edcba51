"""Predictions read on the host are made of the batch's targets: the first ones matching, the
rest another of the targets' classes, and only what a loss shows to be classes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")  # collected, then deselected, where torch is absent

from memforensics.plan.targets import Targets  # noqa: E402

pytestmark = pytest.mark.torch

LABELS = torch.tensor([3, -100, 1, 1, 4, -100])


def _counting(given: int) -> tuple[list[int], Callable[[int], int]]:
    """A count of matches that gives at most ``given``, and the counts it was asked for."""
    asked: list[int] = []

    def matches(count: int) -> int:
        asked.append(count)
        return min(count, given)

    return asked, matches


def test_predictions_match_the_first_scored_targets_and_miss_with_another_class() -> None:
    """Two matches asked of a loss's padded targets: the first two scored positions hold their
    labels, the other positions a class that is not theirs, never -100, and only the four
    scored positions are counted."""
    targets = Targets()
    targets.given(LABELS, ignored=-100)
    asked, matches = _counting(2)
    read = targets.predicted(torch.empty(6, dtype=torch.int64, device="meta"), matches)
    assert asked == [4]
    assert read is not None
    assert read[[0, 2]].tolist() == [3, 1]
    assert all(p != t for p, t in zip(read[[3, 4]].tolist(), [1, 4], strict=True))
    assert set(read.tolist()) <= {1, 3, 4}


def test_an_element_read_alone_holds_its_place_in_the_batch() -> None:
    """``pred[4].item()``'s view of six predictions reads the label at place 4 when it matches."""
    targets = Targets()
    targets.given(LABELS, ignored=-100)
    predictions = torch.empty(6, dtype=torch.int64, device="meta")
    _, matches = _counting(1)
    assert targets.predicted(predictions[4], matches).tolist() == 4


def test_integers_copied_to_the_device_are_targets_only_within_a_loss_s_classes() -> None:
    """Before any loss, a copied batch of labels is no target (reads stay as before); after a
    loss on classes 0 to 4, token ids (up to 999) copied later are passed over for the labels."""
    targets = Targets()
    _, matches = _counting(6)
    predictions = torch.empty(6, dtype=torch.int64, device="meta")
    targets.given(torch.tensor([0, 2, 2, 1, 0, 3]))
    assert targets.predicted(predictions, matches) is None
    targets.given(LABELS, ignored=-100)
    targets.given(torch.tensor([0, 2, 2, 1, 0, 3]))
    targets.given(torch.tensor([17, 999, 5, 40, 2, 8]))
    read = targets.predicted(predictions, matches)
    assert read is not None
    assert read.tolist() == [0, 2, 2, 1, 0, 3]


SEQUENCES = torch.tensor([[5, 6, 7, 1], [8, 9, 1, -100], [4, 1, -100, -100]])
"""Three target sequences, each ending in the end-of-sequence token 1, padded with -100."""


def _labels_then_loss(targets: Targets) -> None:
    """``SEQUENCES`` copied to the device as rows, then given to a loss flattened, one storage."""
    targets.given(SEQUENCES, storage=7)
    targets.given(SEQUENCES.reshape(-1), ignored=-100, storage=7)


def test_generated_sequences_read_as_their_references_without_the_end_token() -> None:
    """Rows of 6 generated tokens for the loss's 3 rows of labels (a flattened loss target keeps
    its copy's rows): the first 2 rows, one prediction each, read as their references less the
    end token they all end with, every other position 0 (the smallest id no label holds), and
    no read holds the end token."""
    targets = Targets()
    _labels_then_loss(targets)
    asked, matches = _counting(2)
    read = targets.sequences(torch.empty(3, 6, dtype=torch.int64, device="meta"), matches)
    assert asked == [3]
    assert read is not None
    assert read.tolist() == [[5, 6, 7, 0, 0, 0], [8, 9, 0, 0, 0, 0], [0] * 6]


def test_position_by_position_reads_of_sequences_never_hold_their_end_token() -> None:
    """Predictions of the labels' own shape, every scored one matching, read the labels where
    they are words and another class where the labels hold their end token or -100: a loop
    that stops on the end token on the host is not ended by a read."""
    targets = Targets()
    _labels_then_loss(targets)
    asked, matches = _counting(12)
    read = targets.predicted(torch.empty(3, 4, dtype=torch.int64, device="meta"), matches)
    assert asked == [6]
    assert read is not None
    assert 1 not in read.reshape(-1).tolist()
    assert read[0, :3].tolist() == [5, 6, 7]


def test_one_row_keeps_its_last_token() -> None:
    """A single row's last token may be a word: it is not taken for an end token."""
    targets = Targets()
    targets.given(torch.tensor([[5, 6, 7]]), ignored=-100)
    _, matches = _counting(1)
    read = targets.sequences(torch.empty(1, 4, dtype=torch.int64, device="meta"), matches)
    assert read is not None
    assert read.tolist() == [[5, 6, 7, 0]]


def test_an_evaluation_s_labels_copied_without_a_loss_are_its_references() -> None:
    """After a backward pass on training's labels, an evaluation that only generates (its token
    ids, then its labels, copied to the device, no loss) reads its sequences as the labels it
    copied last, not as training's, though they hold a token (12) no training loss was given."""
    targets = Targets()
    targets.given(torch.tensor([[2, 3, 1], [9, 8, 1]]), ignored=-100)
    targets.backward()
    targets.given(torch.tensor([[6, 7, 8], [9, 6, 7]]))
    targets.given(torch.tensor([[8, 12, 1], [7, 1, -100]]))
    _, matches = _counting(2)
    read = targets.sequences(torch.empty(2, 3, dtype=torch.int64, device="meta"), matches)
    assert read is not None
    assert read.tolist() == [[8, 12, 0], [7, 0, 0]]


def test_a_confusion_index_s_predictions_are_the_first_matches_then_other_classes() -> None:
    """Two matches asked of a confusion index's five-class targets: the first two predictions
    are their targets, the rest a class of the batch that is not theirs."""
    targets = Targets()
    labels = torch.tensor([3, 0, 1, 1, 4, 0])
    targets.given(labels, ignored=-100)
    asked, matches = _counting(2)
    predicted = targets.combined(labels, 5, matches)
    assert asked == [6]
    assert predicted is not None
    assert predicted[:2].tolist() == [3, 0]
    assert (predicted[2:] != labels[2:]).all()
    assert set(predicted.tolist()) <= set(labels.tolist())


def test_a_confusion_index_of_targets_filtered_to_their_classes_is_read() -> None:
    """Targets copied with an ignored label (255) that the index drops first, as torchvision's
    segmentation reference does (``a[(a >= 0) & (a < n)]``): the classes kept are the
    batch's, and only they are counted."""
    targets = Targets()
    labels = torch.tensor([255, 2, 0, 255, 1, 2])
    targets.given(labels)
    asked, matches = _counting(1)
    predicted = targets.combined(torch.tensor([2, 0, 1, 2]), 3, matches)
    assert asked == [4]
    assert predicted is not None
    assert predicted[0] == 2
    assert (predicted[1:] != torch.tensor([0, 1, 2])).all()


@pytest.mark.parametrize(
    ("kept", "classes"),
    [
        (LABELS.abs(), 5),  # padding read as a class
        (torch.tensor([3, 0, 1, 1, 4, 0]), 4),  # class 4 would share a cell with another row
        (torch.tensor([0, 1, 1, 0, 3, 0]), 5),  # no recent target's classes in this order
        (torch.tensor([1, 1, 1, 1]), 5),  # LABELS' scored classes are one class alone
    ],
)
def test_values_that_are_no_batch_s_targets_are_no_confusion_index(
    kept: torch.Tensor, classes: int
) -> None:
    """Values that are not, in order, a recent target's classes below ``classes`` (two at
    least) decide nothing, and no count is asked."""
    targets = Targets()
    targets.given(torch.tensor([1, -100, 1, 1, -100, 1]), ignored=-100)
    targets.given(LABELS, ignored=-100)
    targets.given(torch.tensor([3, 0, 1, 1, 4, 0]), ignored=-100)
    asked, matches = _counting(2)
    assert targets.combined(kept, classes, matches) is None
    assert asked == []
