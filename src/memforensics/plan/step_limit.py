"""A planned run ended after a number of optimizer steps (``plan --steps N``).

A training loop's memory repeats from its second or third step on: the optimizer's state is
made at the first step, and every later step frees what it allocates. Planning the whole
schedule (90 epochs of ImageNet) costs as long as the script's own loop runs on stand-ins, for
figures its first steps already give. The limit counts the steps of every ``torch.optim``
optimizer (subclasses included: Accelerate's, DeepSpeed's, bitsandbytes'), each on its own, and
ends the run as the first of them is about to take step N + 1, so that every optimizer's N-th
step and what follows it up to there (a second optimizer's step, an evaluation) is planned.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from memforensics.plan.device import Stopped


class StepsTaken(Stopped):
    """The run came to an optimizer's step N + 1 under a limit of N steps: the figures are
    those of the steps before it."""


class StepLimit:
    """Steps each optimizer has taken under the limit; ``taken`` the most any has taken."""

    def __init__(self, steps: int) -> None:
        if steps < 1:
            raise ValueError(f"--steps must be at least 1, got {steps}")
        self.steps = steps
        self.counts: dict[int, int] = {}

    @property
    def taken(self) -> int:
        """The most steps any optimizer took (0: none took a step)."""
        return max(self.counts.values(), default=0)

    def before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """The global step pre-hook: ends the run where ``optimizer`` would go past the limit."""
        if self.counts.get(id(optimizer), 0) >= self.steps:
            raise StepsTaken(f"{self.steps} optimizer steps taken")

    def after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """The global step post-hook: one more step of ``optimizer``."""
        self.counts[id(optimizer)] = self.counts.get(id(optimizer), 0) + 1


@contextmanager
def limited(steps: int | None) -> Iterator[StepLimit | None]:
    """Every optimizer's steps counted while the block runs, the run ended past ``steps`` of
    one (None: no limit, nothing hooked); the hooks removed after."""
    if steps is None:
        yield None
        return
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    limit = StepLimit(steps)
    handles = (
        register_optimizer_step_pre_hook(limit.before_step),
        register_optimizer_step_post_hook(limit.after_step),
    )
    try:
        yield limit
    finally:
        for handle in handles:
            handle.remove()
