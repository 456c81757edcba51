"""The batch's targets: what a model's predictions read on the host are made of.

Predictions copied to the host (``.cpu()``, ``.to("cpu")``, ``.numpy()``, ``.tolist()``,
``.item()`` of each, a ``copy_`` into a host tensor) and scored there (an accuracy, an F1 score
in numpy or scikit-learn) are unknown integers in a plan. Read as zeros, a metric computed from
them stands still, and a patience loop on it ends early. So they read as the batch's targets,
the first ones matching and the rest another of the targets' classes, as many matching as the
device's own comparisons would (:meth:`~memforensics.plan.values.Reads.matches`: one more each
round, at each place in the code), and a metric computed on the host rises as it trains.

*The batch's targets* are the integer tensor most recently given to a loss on the device as its
target (``cross_entropy``, ``nll_loss``) or copied to the device from the host (a batch's labels
arrive so, whether or not a loss follows), with as many elements as the predictions' storage (a
view of them, ``pred[i]``, reads its place in the batch) and two classes at least. A class is a
value at or above zero that is not the loss's ``ignore_index``: a negative value (-100, -1)
marks a position that is not scored, as token classification pads its labels. Such a position
never matches and reads as a class, so what the script scores sees real classes only, and a
prediction used as an index into the classes finds one. A tensor copied from the host is a
batch's targets only where every class it holds is at most the largest a loss on the device was
given: a batch's inputs (token ids, up to the vocabulary's size) are copied as integers too, and
are not predictions' classes; before any such loss, no copy is.

Scores read on the host (a batch's logits, ``.cpu().numpy()``, then ``argmax`` there) read
likewise, one row a prediction: every score is the made-up floating-point value, the predicted
class's one more, so ``argmax`` finds the predictions above.

A tensor no such target matches (one value, a storage of another size: a generated token, an
``argmax`` read alone) reads as zeros, as before. Only integers copied to the device or given to
a loss are kept, the last :data:`RECENT`, so the cost is one check where a loss runs or an
integer tensor arrives.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import torch

RECENT = 8
"""How many recent targets are kept: a batch's tensors (ids, mask, labels) and its loss's."""

_INTEGERS = frozenset((torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64))

Matches = Callable[[int], "int | None"]
"""How many of so many predictions match their targets (the first ones), or None."""


class _Given(NamedTuple):
    values: torch.Tensor  # flat, on the CPU
    ignored: int | None  # the loss's ignore_index; None for a copy from the host


class Targets:
    """The integer tensors most recently given to a loss or copied to the device, newest
    first, and the predictions read on the host made of them."""

    def __init__(self) -> None:
        self._recent: deque[_Given] = deque(maxlen=RECENT)
        self._top = -1  # the largest class a loss was given

    def given(self, values: torch.Tensor, ignored: int | None = None) -> None:
        """``values`` (on the CPU) reached the device as a loss's target (``ignored``: its
        ``ignore_index``) or, with None, as a copy from the host."""
        if values.dtype not in _INTEGERS or values.numel() < 2:
            return
        given = _Given(values.reshape(-1).clone(), ignored)
        if ignored is not None:
            classes = given.values[_scored(given)]
            if classes.numel():
                self._top = max(self._top, int(classes.max()))
        self._recent.appendleft(given)

    def predicted(self, tensor: torch.Tensor, matches: Matches) -> torch.Tensor | None:
        """``tensor``'s values read on the host as predictions of the batch's targets (on the
        CPU, ``tensor``'s dtype), the first ``matches(scored)`` of its scored positions
        matching; None where no target fits it."""
        if tensor.dtype not in _INTEGERS or not self._recent:
            return None
        size = tensor.untyped_storage().nbytes() // tensor.element_size()
        for given in self._recent:
            if given.values.numel() != size:
                continue
            targets, scored = given.values, _scored(given)
            classes = torch.unique(targets[scored])
            copied = given.ignored is None
            if classes.numel() >= 2 and not (copied and int(classes[-1]) > self._top):
                break
        else:
            return None
        other = torch.where(targets == classes[0], classes[1], classes[0])
        place = (tensor.shape, tensor.stride(), tensor.storage_offset())
        read = [t.as_strided(*place).reshape(-1) for t in (targets, scored, other)]
        count = matches(int(read[1].sum()))
        if count is None:
            return None
        matched = read[1] & (read[1].cumsum(0) <= count)
        return torch.where(matched, read[0], read[2]).reshape(tensor.shape).to(tensor.dtype)

    def scores(self, tensor: torch.Tensor, value: float, matches: Matches) -> torch.Tensor | None:
        """Floating-point ``tensor`` read on the host as scores over the classes in its last
        dimension (logits, probabilities: ``np.argmax(logits, axis=-1)`` computed there): every
        score ``value``, the predicted class's ``value + 1``, the predictions read as
        :meth:`predicted` reads them for a row each; None where no target fits its rows or a
        class falls outside the last dimension."""
        if tensor.dim() < 2 or tensor.shape[-1] < 2 or not self._recent:
            return None
        rows = torch.empty(tensor.shape[:-1], dtype=torch.int64)
        predicted = self.predicted(rows, matches)
        if predicted is None or int(predicted.max()) >= tensor.shape[-1]:
            return None
        scores = torch.full(tensor.shape, value, dtype=tensor.dtype)
        return scores.scatter_(-1, predicted.unsqueeze(-1), value + 1)


def _scored(given: _Given) -> torch.Tensor:
    """Where ``given`` holds a class: at or above zero, and not its loss's ``ignore_index``."""
    scored = given.values >= 0
    if given.ignored is not None:
        scored &= given.values != given.ignored
    return scored
