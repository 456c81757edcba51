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

Predictions gathered over an evaluation (``torch.cat(preds).cpu()``) read as the targets given
since the last backward pass, one batch after another (a batch's labels copied to the device
and then given to its loss are one batch), up to :data:`GATHERED` elements.

Generated sequences (``model.generate()``'s rows of token ids, decoded on the host and scored
against the decoded labels: exact match, a token F1, BLEU) fit no target position by position.
They read as their batch's references instead (:meth:`Targets.sequences`), one generated
sequence a prediction: the first ``n + 1`` rows are their references' tokens in round ``n``, the
rest an id no reference holds (a padding token, which decoding drops), so a score of the
generated text rises as it trains. The labels' end-of-sequence token (the one token that ends
every row of a batch of labels) is never read, there nor position by position: a loop that tests
for it on the host, as decoding on the device, runs to its own bound.

Predictions combined on the device with the batch's targets into a confusion matrix's index
(``target * C + pred`` or ``pred * C + target``, which ``bincount`` counts: torchmetrics'
macro-averaged accuracy, torchvision's segmentation reference, which drops its ignored label
first) match by the same count, at the line that adds (:meth:`Targets.combined`), so the
matrix's diagonal gains one a round.

A tensor no such target matches (one value, a storage of another size: a generated token, an
``argmax`` read alone) reads as zeros. Only integers copied to the device or given to a loss are
kept, the last :data:`RECENT` and those since the last backward pass, so the cost is one check
where a loss runs or an integer tensor arrives.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch

_CPU = torch.device("cpu")

RECENT = 8
"""How many recent targets are kept: a batch's tensors (ids, mask, labels) and its loss's."""
GATHERED = 1 << 20
"""Most elements kept of the targets given since the last backward pass (an evaluation's
labels, batch after batch), for predictions gathered over it."""

_INTEGERS = frozenset((torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64))

Matches = Callable[[int], "int | None"]
"""How many of so many predictions match their targets (the first ones), or None."""


class _Given(NamedTuple):
    values: torch.Tensor  # flat, on the CPU
    ignored: int | None  # the loss's ignore_index; None for a copy from the host
    storage: int | None  # the device storage it describes: a batch's labels, then its loss's
    width: int | None = None  # its rows' length, where it arrived as rows (a batch of sequences)


class Targets:
    """The integer tensors most recently given to a loss or copied to the device, newest
    first, and the predictions read on the host made of them."""

    def __init__(self) -> None:
        self._recent: deque[_Given] = deque(maxlen=RECENT)
        self._since: list[_Given] = []  # given since the last backward pass, oldest first
        self._since_size = 0  # their elements
        self._changes = 0  # changes to them, so that their gathering is made once for each
        self._gathered: tuple[int, _Given | None] = (-1, None)
        self._top = -1  # the largest class a loss was given

    def given(
        self, values: torch.Tensor, ignored: int | None = None, storage: int | None = None
    ) -> None:
        """``values`` (on the CPU) reached the device, in ``storage``, as a loss's target
        (``ignored``: its ``ignore_index``) or, with None, as a copy from the host."""
        if values.dtype not in _INTEGERS or values.numel() < 2:
            return
        width = values.shape[-1] if values.dim() == 2 else self._width(values, storage)
        given = _Given(values.reshape(-1).clone(), ignored, storage, width)
        if ignored is not None:
            classes = given.values[_scored(given)]
            if classes.numel():
                self._top = max(self._top, int(classes.max()))
        again = self._since and storage is not None and self._since[-1].storage == storage
        if again:  # the batch's labels, now its loss's target: one batch, scored as the loss's
            self._since_size += given.values.numel() - self._since[-1].values.numel()
            self._since[-1] = given
            self._changes += 1
        elif self._since_size + given.values.numel() <= GATHERED:
            self._since.append(given)
            self._since_size += given.values.numel()
            self._changes += 1
        self._recent.appendleft(given)

    def _width(self, values: torch.Tensor, storage: int | None) -> int | None:
        """The rows' length of the tensor in ``storage`` as it arrived (a loss's target is its
        batch's labels flattened: ``labels.view(-1)``); None where it never arrived as rows."""
        for given in self._recent:
            if storage is not None and given.storage == storage:
                return given.width if given.values.numel() == values.numel() else None
        return None

    def backward(self) -> None:
        """A backward pass ran: what is given next is another evaluation's, or training's."""
        self._since.clear()
        self._since_size = 0
        self._changes += 1

    def predicted(self, tensor: torch.Tensor, matches: Matches) -> torch.Tensor | None:
        """``tensor``'s values read on the host as predictions of the batch's targets (on the
        CPU, ``tensor``'s dtype), the first ``matches(scored)`` of its scored positions
        matching; None where no target fits it."""
        if tensor.dtype not in _INTEGERS or not self._recent:
            return None
        size = tensor.untyped_storage().nbytes() // tensor.element_size()
        for given in self._candidates(size):
            targets, scored = given.values, _scored(given)
            end = _ended(_rows(given))[1] if given.width else None
            if end is not None:  # a batch of sequences: its end-of-sequence token never read
                scored = scored & (targets != end)
            classes = torch.unique(targets[scored])
            if classes.numel() >= 2 and self._classes(given, classes):
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

    def combined(self, kept: torch.Tensor, classes: int, matches: Matches) -> torch.Tensor | None:
        """The predictions a confusion matrix's index of ``classes`` classes combines on the
        device with ``kept``, its targets (flat, on the CPU): the first ``matches(n)`` their
        targets and the rest another of the targets' classes, as :meth:`predicted` reads them.
        None where ``kept`` is not, in order, a recent target's classes below ``classes`` (all
        of its classes, or those a segmentation's reference keeps where it filters out its
        ignored label, 255, first), two of them at least."""
        for given in self._recent:
            chosen = _scored(given) & (given.values < classes)
            if int(chosen.sum()) != kept.numel():
                continue
            targets = given.values[chosen].to(torch.int64)
            if not torch.equal(targets, kept):
                continue
            found = torch.unique(targets)
            if found.numel() < 2:
                return None
            matched = matches(targets.numel())
            if matched is None:
                return None
            other = torch.where(targets == found[0], found[1], found[0])
            hit = torch.arange(targets.numel(), device=_CPU) < matched
            return torch.where(hit, targets, other)
        return None

    def _candidates(self, size: int) -> Iterator[_Given]:
        """Targets of ``size`` elements, newest first; then, only if none is, the targets
        gathered since the last backward pass."""
        yield from (given for given in self._recent if given.values.numel() == size)
        if self._since_size >= size:
            if self._gathered[0] != self._changes:
                self._gathered = (self._changes, self._gather())
            gathered = self._gathered[1]
            if gathered is not None and gathered.values.numel() == size:
                yield gathered

    def _classes(self, given: _Given, classes: torch.Tensor) -> bool:
        """Whether ``given``'s ``classes`` are a loss's classes: a loss's own, or a copy's
        at most the largest a loss was given."""
        if given.ignored is not None:
            return True
        return classes.numel() > 0 and int(classes[-1]) <= self._top

    def _gather(self) -> _Given | None:
        """The targets given since the last backward pass, one after another, each a loss's
        classes (an evaluation's labels, for predictions gathered over it: ``torch.cat(preds)``);
        None when none is."""
        parts = [g for g in self._since if self._classes(g, torch.unique(g.values[_scored(g)]))]
        if len(parts) < 2:
            return None
        ignored = {g.ignored for g in parts if g.ignored is not None}
        values = torch.cat([g.values for g in parts])
        if len(ignored) == 1:
            return _Given(values, ignored.pop(), None)
        unscored = [g.values[~_scored(g)] for g in parts]
        return _Given(values, None, None) if all(u.numel() == 0 for u in unscored) else None

    def scores(self, tensor: torch.Tensor, value: float, matches: Matches) -> torch.Tensor | None:
        """Floating-point ``tensor`` read on the host as scores over the classes in its last
        dimension (logits, probabilities: ``np.argmax(logits, axis=-1)`` computed there): every
        score ``value``, the predicted class's ``value + 1``, the predictions read as
        :meth:`predicted` reads them for a row each; None where no target fits its rows or a
        class falls outside the last dimension."""
        if tensor.dim() < 2 or tensor.shape[-1] < 2 or not self._recent:
            return None
        rows = torch.empty(tensor.shape[:-1], dtype=torch.int64, device=_CPU)
        predicted = self.predicted(rows, matches)
        if predicted is None or int(predicted.max()) >= tensor.shape[-1]:
            return None
        scores = torch.full(tensor.shape, value, dtype=tensor.dtype, device=_CPU)
        return scores.scatter_(-1, predicted.unsqueeze(-1), value + 1)

    def sequences(self, tensor: torch.Tensor, matches: Matches) -> torch.Tensor | None:
        """A batch of generated sequences (``model.generate()``'s, rows of token ids) read on
        the host as the batch's reference sequences (:meth:`_references`), one sequence a
        prediction: the first ``matches(rows)`` rows are their references' tokens from the
        first column on, less the end-of-sequence token they all end with (:func:`_ended`),
        the rest of each row and every other row :func:`_filler`; None where no reference has
        as many rows. So no read holds the end-of-sequence token: a loop that tests for it on
        the host runs to its own bound, as decoding on the device does, and text decoded with
        ``skip_special_tokens`` is the reference's where a row matches."""
        if tensor.dtype not in _INTEGERS or tensor.dim() != 2 or not self._recent:
            return None
        references = self._references(tensor.shape[0])
        if references is None:
            return None
        count = matches(len(references))
        if count is None:
            return None
        references, end = _ended(references)
        filler = _filler(references, end)
        read = torch.full(tensor.shape, filler, dtype=torch.int64, device=_CPU)
        for row, reference in zip(read[:count], references, strict=False):
            kept = reference[: row.numel()]
            row[: kept.numel()] = kept
        return read.to(tensor.dtype)

    def _references(self, rows: int) -> list[torch.Tensor] | None:
        """The scored tokens of each of ``rows`` reference sequences, an evaluation's before
        training's and a loss's targets before a copy's (a batch's token ids are copied as rows
        too): since the last backward pass, the newest loss's targets that arrived as that many
        rows, else every loss's targets one batch after another (an evaluation's labels), else
        the newest copy of that many rows (an evaluation's labels may hold tokens no
        training loss was given, so a loss's classes do not bound them); else the newest
        loss's targets of that many rows; None where none fit."""
        since = list(reversed(self._since))
        losses = [g for g in since if g.ignored is not None and g.width]
        for given in losses:
            if _fits(given, rows):
                return _rows(given)
        found = [row for given in reversed(losses) for row in _rows(given)]
        if len(found) == rows:
            return found
        copies = [g for g in since if g.ignored is None and _fits(g, rows)]
        for given in copies:
            if torch.unique(given.values[_scored(given)]).numel() >= 2:
                return _rows(given)
        losses = [g for g in self._recent if g.ignored is not None]
        return next((_rows(g) for g in losses if _fits(g, rows)), None)


def _fits(given: _Given, rows: int) -> bool:
    """Whether ``given`` arrived as ``rows`` rows."""
    return given.width is not None and given.values.numel() == rows * given.width


def _rows(given: _Given) -> list[torch.Tensor]:
    """``given``'s rows, each its scored tokens in order."""
    width = given.width or given.values.numel()
    rows = given.values.reshape(-1, width)
    return [row[kept] for row, kept in zip(rows, _scored(given).reshape(-1, width), strict=True)]


def _ended(references: list[torch.Tensor]) -> tuple[list[torch.Tensor], int | None]:
    """``references`` less the end-of-sequence token, and that token: the last of every
    row where there are two rows at least and it is held nowhere else (a tokenizer appends it to
    each target); None, and the rows as they are, where no such token is."""
    if len(references) < 2 or any(row.numel() == 0 for row in references):
        return references, None
    end = references[0][-1]
    if any(row[-1] != end or bool((row[:-1] == end).any()) for row in references):
        return references, None
    return [row[:-1] for row in references], int(end)


def _filler(references: list[torch.Tensor], end: int | None) -> int:
    """The token an unmatched generated position reads as: the smallest id that no reference
    holds and that is not their ``end`` (the padding token of T5's, BART's and Llama's
    vocabularies, which decoding with ``skip_special_tokens`` drops), so a row that matches
    decodes to its reference alone."""
    held = torch.cat([*references, torch.tensor([] if end is None else [end], dtype=torch.int64)])
    held = torch.unique(held[held >= 0])
    free = torch.nonzero(held != torch.arange(held.numel()))
    return int(free[0]) if free.numel() else held.numel()


def _scored(given: _Given) -> torch.Tensor:
    """Where ``given`` holds a class: at or above zero, and not its loss's ``ignore_index``."""
    scored = given.values >= 0
    if given.ignored is not None:
        scored &= given.values != given.ignored
    return scored
