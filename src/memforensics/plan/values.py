"""What a stand-in cannot know: the values the script's own values do not decide. Where the
script reads them, the plan answers the values it knows where the script made them
(:mod:`memforensics.plan.known`), else made-up values chosen so that loops ending on them run to
their own bounds (:class:`Reads`); it takes a data-dependent shape at its upper bound, and says
once where each happened. Which ``torch.compile`` backend the running code is under is kept here
too (:func:`compiled_backend`; :mod:`~memforensics.plan.compiled` runs the compiled code).
"""

from __future__ import annotations

import functools
import os
import sys
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from types import FrameType
from typing import Any

import torch

from memforensics.plan import gathered, scored
from memforensics.plan.device import OutOfScope
from memforensics.plan.known import Known

_TORCH = os.path.join(os.path.dirname(torch.__file__), "")
"""torch's own files' folder, with its separator: a library beside it whose name begins with
``torch`` (torchmetrics, torchvision, torch_geometric) is not torch's own code."""
_HERE = os.path.dirname(os.path.abspath(__file__))
_META = torch.device("meta")
_CPU = torch.device("cpu")
_PASSING = frozenset(
    os.path.join(_TORCH, *name.split("/"))
    for name in ("_tensor.py", "overrides.py", "_ops.py", "utils/_device.py")
)
"""torch's files that pass a read on to a stand-in (``Tensor.__format__``, ``__repr__``,
``__array__``, ``handle_torch_function``, a device context) without being its reader."""


def where(frame: FrameType | None = None) -> str:
    """``file:line`` of the innermost frame of the script's own code (not torch's, not ours),
    from ``frame`` outward (default: the caller's)."""
    frame = frame if frame is not None else sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith((_TORCH, _HERE)) or name.startswith("<")):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return "an unknown place"


class Notes:
    """Says each kind of difference once, naming where it first happened, into ``kept``: the
    planned device's record (:attr:`~memforensics.plan.device.PlannedDevice.said`), not a
    warning, so a script's own warning filters neither hide it nor raise it into the script."""

    def __init__(self, kept: list[str] | None = None) -> None:
        self.said: set[str] = set()
        self.kept = kept if kept is not None else []

    def once(self, kind: str, message: str) -> None:
        """Keep ``message`` (with where it happened) the first time ``kind`` is seen."""
        if kind not in self.said:
            self.said.add(kind)
            self.kept.append(f"{message} (first at {where()})")


def by_torch() -> bool:
    """Whether the code reading or making a stand-in's values is torch's own (GradScaler's
    overflow test, a NaN check, a loss function): the innermost frame that is not ours nor one
    that passes the call on."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(_HERE) or name.startswith("<") or name in _PASSING):
            return name.startswith(_TORCH)
        frame = frame.f_back
    return False


def _filled(tensor: torch.Tensor, value: float, dtype: torch.dtype) -> torch.Tensor:
    """``value`` in ``tensor``'s shape on the CPU, with no memory behind the shape."""
    return torch.full((), value, dtype=dtype, device=_CPU).expand(tensor.shape)


FALLING = 256
"""How slowly a made-up floating-point value falls: ``10 * FALLING / (FALLING + n)`` after ``n``
rounds of reads (or first uses on the device) with training between them. It falls toward 0, so
a loop bounded only by a loss reaching a target (``while loss > 0.5``) ends too (after 4,864
rounds for 0.5)."""

UNBOUNDED = 10_000
"""How many flags decided by made-up floating-point values (an adaptive solver's ``error_ratio
<= 1``) one place of the script may read with no backward pass between: a loop that tests
them and has no bound of its own reads the same made-up answer for ever."""


class Unbounded(OutOfScope):
    """A loop's end depends on made-up values only, and it has no bound the plan can run it
    to: the run ends there, its figures those up to there."""


READ = (
    "values read from the device that the script's own values do not decide are made up in a "
    "plan, so that loops bounded by values run to their own limits: a loss falls from 10 "
    "toward 0 and an accuracy rises as it trains, integers and flags read 0, generated text "
    "never ends before its length limit, and a router spreads its tokens evenly over its "
    "experts (docs/plan.md, 'What it does not model', says each rule)"
)
AGREED = (
    "torch.allclose and torch.equal of values the plan does not compute answer True: a script's "
    "check of one result against another passes, as on a GPU where the script works"
)
KNOWN = (
    "values read from the device are computed on the CPU where the script's own values decide "
    "them (shapes, ranges, fills; a random draw is drawn again within its bounds)"
)


def _nothing() -> None:
    return None


class Reads:
    """What a stand-in answers when the script reads its values: the values the script's own
    decide (:class:`~memforensics.plan.known.Known`), else made-up ones; each said once, with
    where.

    A made-up value lets a loop that ends on values run to its own bound. An integer or a flag
    reads as zero, but the indices ``topk`` or ``sort`` made read as their ranks, ``0, 1, ...``
    along the dimension ranked (:meth:`~memforensics.plan.routing.Routing.ranks`), distinct in
    each row as a GPU's are, so a beam search ranking its candidates on the host keeps its
    beams; on the device, what the plan assumes of unknown values
    (:mod:`~memforensics.plan.assumed`: ordinary in size, a made-up integer none of the values
    the script names but, tested against every class at once, class 0, a count of unknown flags
    every flag) decides the tests that end decoding and a one-hot's rows,
    so greedy, sampled and beam decoding all run to their maximum length. A floating-point
    value read by the script or a library reads as a loss that keeps improving:
    ``10 * FALLING / (FALLING + n)``, where ``n`` counts the rounds of such reads with a
    backward pass between them. Every read within one evaluation gives the same value,
    and each evaluation after more training a lower one, by more than 0.01 for the first 250
    rounds, so early stopping on a validation loss runs to its epoch limit; the value stays in
    (0, 10], finite, and a perplexity (``exp``) of it never overflows. What torch's own code
    reads stays zero (GradScaler's overflow flag, NaN tests), so no optimizer step is skipped.

    On the device, an unknown float32 or float64 scalar takes its round's value when the
    script or a library first uses it or makes it (:meth:`made`), so what is computed from it
    is known there: a comparison made on the device (``val < best``; Lightning's
    ``EarlyStopping``, which compares the epoch mean of a logged loss with its best) sees the
    loss improve, and a flag read from it is the comparison's. A floating-point value computed
    from it still reads as above (what the device holds is scaled by whatever followed).
    A flag so decided that one place of the script reads more than :data:`UNBOUNDED` times
    with no backward pass between ends the run (:class:`Unbounded`): the loop testing it
    (an adaptive solver rejecting each step on a made-up error ratio) has no bound of its own
    to run to, and would read the same made-up answer for ever.

    Predictions compared with their targets on the device (``argmax(logits) == labels``) rise
    the other way (:meth:`matches`): at each place in the code that compares them, one more
    of them matches each round, so an accuracy, and a hand-written early stopping on it, keeps
    improving until every prediction matches. Predictions read on the host are made of the
    batch's targets (:class:`~memforensics.plan.targets.Targets`, told of each loss's target by
    :meth:`loss`) and match by the same count, at the place that reads them, so an accuracy or
    an F1 score computed there rises too. Generated sequences read on the host that no target
    fits position by position are their batch's references, one more sequence each round
    (:meth:`~memforensics.plan.targets.Targets.sequences`), so a score of the generated text
    rises as well, while decoding on the device still runs to its maximum length.
    """

    def __init__(self, notes: Notes, known: Known | None = None) -> None:
        self.notes = notes
        self.known = known if known is not None else Known()
        self.targets = self.known.targets
        self._passes = 0
        self._read_after: int | None = None
        self._rounds = 0
        self._scored: dict[str, scored.Scored] = {}
        """Each place that scores predictions: its round's comparisons."""
        self._gathers = frozenset(id(op) for op in gathered.all_gathers())
        """The all-gathers' ids: an operator lives as long as torch, and an id is hashed in C,
        where an ``OpOverload``'s ``__hash__`` is Python's, a cost on every operator."""
        self.waited: Callable[[], None] = _nothing
        """Called before each read of a stand-in's values to the host, where the host waits
        on the device: it raises where CUDA refuses that wait (a graph capture underway)."""
        self._tested: dict[str, int] = {}
        """Each place's reads, since the last backward pass, of flags decided by made-up
        floating-point values (:data:`UNBOUNDED`)."""
        self._tested_after = 0
        self._made_up_on_host: weakref.WeakSet[Any] = weakref.WeakSet()
        """Host storages a stand-in's values were copied into (``.cpu()``, ``.to("cpu")``,
        ``host.copy_(stand_in)``): a checkpoint written from them is no more the GPU's than one
        written from the stand-ins' zeros."""

    def backward(self) -> None:
        """One backward pass ran: the next floating-point read starts a new round."""
        self._passes += 1
        self.targets.backward()

    def values(self, tensor: torch.Tensor, exact: bool = False) -> torch.Tensor:
        """``tensor``'s values on the CPU, known or made up (a zero-stride view: no memory).
        ``exact``: a made-up floating-point value in double precision, for Python numbers
        (a half-precision rounding would make a falling loss stand still)."""
        self.waited()
        found = self.known.value(tensor)
        if found is not None and not self.known.made_up(tensor):
            self.notes.once("known", KNOWN)
            return found
        self.notes.once("read", READ)
        if found is not None and not (tensor.is_floating_point() and self.known.guessed(tensor)):
            if not tensor.is_floating_point() and self.known.guessed(tensor):
                self._tested_again()
            return found  # a flag, a count or an accuracy from what the plan assumes
        if by_torch():
            return _filled(tensor, 0, tensor.dtype)
        if not tensor.is_floating_point():
            predicted = self.targets.predicted(tensor, self.matches)
            if predicted is None:
                predicted = self.targets.sequences(tensor, self.matches)
            if predicted is None:
                predicted = self.known.routing.ranks(tensor)
            return predicted if predicted is not None else _filled(tensor, 0, tensor.dtype)
        falling = self._falling()
        dtype = torch.float64 if exact else tensor.dtype
        scores = self.targets.scores(tensor, falling, self.matches)
        return scores.to(dtype) if scores is not None else _filled(tensor, falling, dtype)

    def _tested_again(self) -> None:
        """One more read, at the script's place reading it, of a flag decided by made-up
        floating-point values; past :data:`UNBOUNDED` reads there with no backward pass
        between, the run ends (:class:`Unbounded`): the loop reading it would read the same
        made-up answer for ever."""
        if self._tested_after != self._passes:
            self._tested_after = self._passes
            self._tested.clear()
        place = where()
        count = self._tested[place] = self._tested.get(place, 0) + 1
        if count > UNBOUNDED:
            raise Unbounded(
                f"{place} read a flag decided by values the plan made up {UNBOUNDED:,} times "
                "with no backward pass between: the loop testing it has no bound of its own the "
                "plan can run it to (docs/plan.md, 'What it does not model'), so the plan ends "
                "the run there"
            )

    def made(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """One operator ran on the device: what it made is known where the script's values
        decide it (:meth:`~memforensics.plan.known.Known.after`), and an unknown float32 or
        float64 scalar it uses or makes outside torch's own code takes its round's value. An
        all-gather of known values holds this rank's in every rank's place
        (:func:`~memforensics.plan.gathered.own_gathered`)."""
        if id(func) in self._gathers:
            written = gathered.own_gathered(func, args, kwargs, out, self.known.value)
            if written is not None and self.known.computed(written):
                self.notes.once("gathered tensors", gathered.GATHERED_TENSORS)
                return
        self.known.after(func, args, kwargs, out, self._guess, self.matches)

    def matches(self, count: int) -> int | None:
        """How many of ``count`` predictions compared with their targets match, the first ones:
        at each place that compares, one per comparison in its first round, and one more in
        all each round after (counted there, with a backward pass between rounds), shared by
        the comparisons' sizes (:mod:`~memforensics.plan.scored`). None where torch's own code
        compares."""
        if by_torch():
            return None
        place = self._scored.get(key := where())
        if place is None:
            place = self._scored[key] = scored.Scored(self._passes)
        elif place.passes != self._passes:
            place.next_round(self._passes)
        return place.matched(count)

    def loss(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        """A loss with class targets (``nll_loss``, under ``cross_entropy``) run on the device:
        its target, where known, is the batch's (:meth:`~memforensics.plan.targets.Targets.given`,
        with its ``ignore_index``)."""
        target = args[1]
        found = self.known.decided(target)
        if found is not None:
            ignored = args[4] if len(args) > 4 else kwargs.get("ignore_index", -100)
            self.targets.given(found, ignored, target.untyped_storage()._cdata)
        return func(*args, **kwargs)

    def _guess(self) -> float | None:
        """The value an unknown scalar takes where it is used or made: its round's, unless
        torch's own code is the one using it."""
        return None if by_torch() else self._falling()

    def _falling(self) -> float:
        if self._read_after != self._passes:
            if self._read_after is not None:
                self._rounds += 1
            self._read_after = self._passes
        return 10 * FALLING / (FALLING + self._rounds)

    def item(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        """``.item()`` of a stand-in."""
        return self.values(tensor, exact=True).item()

    def tolist(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        """``.tolist()`` of a stand-in."""
        return self.values(tensor, exact=True).tolist()

    def to_host(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        """``.cpu()``/``.numpy()``-bound copies of a stand-in: allocated on the CPU as the real
        copy would be."""
        host = self.values(tensor).clone(memory_format=torch.contiguous_format)
        return self.copied_out(tensor, host)

    def copied_out(self, tensor: torch.Tensor, host: torch.Tensor) -> torch.Tensor:
        """``host``, a copy of stand-in ``tensor``'s values on the CPU, noted as the plan's:
        made up, or drawn again where the GPU drew its own (a random initialization), never the
        values the GPU would hold after the same steps."""
        self._made_up_on_host.add(host.untyped_storage())
        return host

    def made_up_on_host(self, tensor: torch.Tensor) -> bool:
        """Whether host tensor ``tensor`` holds a copy of a stand-in's values."""
        return (
            bool(self._made_up_on_host)
            and tensor.device.type == "cpu"
            and tensor.untyped_storage() in self._made_up_on_host
        )

    def text(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> str:
        """How a stand-in prints: its values, on the CUDA device the script put it on."""
        shown = repr(self.values(tensor))
        return shown[:-1] + ", device='cuda:0')" if shown.endswith(")") else shown

    def formatted(self, tensor: torch.Tensor, spec: str) -> str:
        """``f"{t:.3f}"``: a scalar formatted, else the printed values."""
        if tensor.dim() == 0:
            return format(self.item(tensor), spec)
        return self.text(tensor)

    def to_numpy(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        """``.numpy()`` of a stand-in."""
        return self.to_host(tensor).numpy()

    def equal(self, tensor: torch.Tensor, other: torch.Tensor) -> bool:
        """``torch.equal`` of stand-ins, a read of both (``istft`` checks its window so, a
        CRF's Viterbi decoding its first tags): unequal shapes never are equal, else as
        :meth:`allclose` with no tolerance."""
        if tensor.shape != other.shape:
            return False
        return self.agree(tensor, other, torch.equal)

    def allclose(
        self, tensor: torch.Tensor, other: torch.Tensor, rtol: float, atol: float, equal_nan: bool
    ) -> bool:
        """``torch.allclose`` of stand-ins, a read of both: values the script's own decide are
        compared as read; where either side's are not (a model's output, a Triton kernel's,
        which the plan does not compute), they agree, as a script's check of one result against
        another passes on a GPU where the script works (said once)."""
        return self.agree(
            tensor, other, lambda mine, theirs: torch.allclose(mine, theirs, rtol, atol, equal_nan)
        )

    def agree(
        self,
        tensor: torch.Tensor,
        other: torch.Tensor,
        compare: Callable[[torch.Tensor, torch.Tensor], bool],
    ) -> bool:
        """A check of ``tensor`` against ``other``: ``compare`` of their values where the
        script's own decide both, else True (said once)."""
        mine, theirs = self.known.decided(tensor), self.known.decided(other)
        if mine is None or theirs is None:
            self.notes.once("agreed", AGREED)
            return True
        self.notes.once("known", KNOWN)
        return bool(compare(mine, theirs))

    def scalar(self, tensor: torch.Tensor) -> Any:
        """A scalar read below Python (``bool(t)``, ``int(t)``, a data-dependent branch)."""
        return self.values(tensor, exact=True).item()


INDUCTOR = "inductor"
"""``torch.compile``'s default backend."""
_BACKEND: ContextVar[object] = ContextVar("memforensics_compile_backend", default=None)


def compiled_backend() -> object:
    """The backend of the outermost ``torch.compile`` the running code is inside (dynamo
    traces nested compiled code with the outermost's backend): ``"inductor"`` by default, a
    string or callable the script gave, None outside any."""
    return _BACKEND.get()


def marked(fn: Callable[..., Any], backend: object) -> Callable[..., Any]:
    """``fn`` marked as compiled with ``backend`` while it runs, unless an outer compile is."""

    @functools.wraps(fn)
    def compiled(*args: Any, **kwargs: Any) -> Any:
        if _BACKEND.get() is not None:
            return fn(*args, **kwargs)
        token = _BACKEND.set(backend)
        try:
            return fn(*args, **kwargs)
        finally:
            _BACKEND.reset(token)

    return compiled
