"""Early stopping in a planned run: the training libraries' callbacks never end it.

An early-stopping callback ends training when a watched metric stops improving. Under the plan
that metric is computed from values the device would hold, which are made up
(:class:`~memforensics.plan.values.Reads`): a read falls as a loss improving would, so a metric
that should fall keeps improving and the run goes to its own bound. A metric that should rise
(an accuracy, Lightning's ``mode="max"``, Hugging Face's ``greater_is_better``) would stop
improving at once, and no single made-up value improves both ways. The callbacks know which
way is better, so it is there that the plan answers: each still records what it watched, and
never signals a stop, said once. Training then runs to its epoch or step limit, as it does
where the metric falls.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from memforensics.plan.patches import LibraryReplacement
from memforensics.plan.values import Notes

NEVER_STOPS = (
    "early stopping never ends a planned run: the metric it watches is made up, so training "
    "runs to its epoch or step limit"
)
LIGHTNING = (
    "lightning.pytorch.callbacks.early_stopping",
    "pytorch_lightning.callbacks.early_stopping",
)
TRANSFORMERS = "transformers.trainer_callback"
IGNITE = "ignite.handlers.early_stopping"
SKORCH = "skorch.callbacks.training"


def lightning_criteria(notes: Notes) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Lightning's ``EarlyStopping._evaluate_stopping_criteria``: its best score and wait
    count kept as the library keeps them, its answer never "stop"."""

    def stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
        def _evaluate_stopping_criteria(self: Any, current: Any) -> tuple[bool, str | None]:
            reason_before = getattr(self, "stopping_reason", None)
            should_stop, reason = original(self, current)
            if not should_stop:
                return False, reason
            notes.once("early stopping", NEVER_STOPS)
            if hasattr(self, "stopping_reason"):
                self.stopping_reason = reason_before
            return False, None

        return _evaluate_stopping_criteria

    return stand_in


def transformers_patience(notes: Notes) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Hugging Face's ``EarlyStoppingCallback.check_metric_value``: the evaluation compared as
    the library compares it, its patience never used up."""

    def stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
        def check_metric_value(self: Any, *args: Any, **kwargs: Any) -> Any:
            checked = original(self, *args, **kwargs)
            if getattr(self, "early_stopping_patience_counter", 0):
                notes.once("early stopping", NEVER_STOPS)
                self.early_stopping_patience_counter = 0
            return checked

        return check_metric_value

    return stand_in


def patience_unreached(
    notes: Notes, count: str
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A callback that ends training once its ``count`` of checks without improvement
    reaches its ``patience`` (ignite's ``EarlyStopping.__call__``, skorch's
    ``EarlyStopping.on_epoch_end``): each check run as the library runs it, with a patience
    no count reaches, the count kept as the library keeps it."""

    def stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
        def check(self: Any, *args: Any, **kwargs: Any) -> Any:
            patience = self.patience
            self.patience = sys.maxsize
            try:
                return original(self, *args, **kwargs)
            finally:
                self.patience = patience
                if getattr(self, count, 0) >= patience:
                    notes.once("early stopping", NEVER_STOPS)

        check.__name__ = original.__name__
        check.__qualname__ = original.__qualname__
        return check

    return stand_in


def rows(notes: Notes) -> list[LibraryReplacement]:
    """The early-stopping callbacks a planned run answers where the script imports them."""
    why = "the metric it watches is made up in a plan; which way is better is known only here"
    return [
        *(
            LibraryReplacement(
                module, "EarlyStopping._evaluate_stopping_criteria", lightning_criteria(notes), why
            )
            for module in LIGHTNING
        ),
        LibraryReplacement(
            TRANSFORMERS,
            "EarlyStoppingCallback.check_metric_value",
            transformers_patience(notes),
            why,
        ),
        LibraryReplacement(
            IGNITE, "EarlyStopping.__call__", patience_unreached(notes, "counter"), why
        ),
        LibraryReplacement(
            SKORCH, "EarlyStopping.on_epoch_end", patience_unreached(notes, "misses_"), why
        ),
    ]
